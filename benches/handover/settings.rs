//! What the bench reads from its environment, each with its default.

/// Candidates per election in every section but `scale`.
pub const CANDIDATES: usize = 3;

/// `NAME` parsed from the environment, or `default` when it is unset or unreadable.
pub fn number_from_env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `LK_BENCH_ROUNDS`: handovers per measurement (40).
pub fn rounds() -> usize {
    number_from_env("LK_BENCH_ROUNDS", 40)
}

/// `LK_BENCH_ROUNDS`, else 50: graceful handovers of the SQL sections (their p99 target,
/// DESIGN §9, is judged over 50 rounds).
pub fn sql_graceful_rounds() -> usize {
    number_from_env("LK_BENCH_ROUNDS", 50)
}

/// Sections a full run leaves out: they run only when asked for by name.
const ONLY_WHEN_ASKED: [&str; 1] = ["scale"];

/// `LK_BENCH_ONLY=etcd` (or file, redis, steady, postgres, mysql, exec, kubernetes,
/// zookeeper, scale) runs one section; unset, every section but `scale`.
pub struct Only {
    section: Option<String>,
}

impl Only {
    pub fn from_env() -> Only {
        Only {
            section: std::env::var("LK_BENCH_ONLY").ok(),
        }
    }

    /// Whether `section` runs: it was asked for, or nothing in particular was and it
    /// is part of a full run.
    pub fn runs(&self, section: &str) -> bool {
        match self.section.as_deref() {
            Some(only) => only == section,
            None => !ONLY_WHEN_ASKED.contains(&section),
        }
    }
}
