//! What the bench reads from its environment, each with its default.

/// Candidates per election in every section but `scale`.
pub const CANDIDATES: usize = 3;

/// Every setting of the bench, in the order a run's command line names them.
const SETTINGS: [&str; 6] = [
    "LK_BENCH_ONLY",
    "LK_BENCH_ROUNDS",
    "LK_BENCH_WINDOW_S",
    "LK_BENCH_CANDIDATES",
    "LK_BENCH_SCALE_ROUNDS",
    "LK_BENCH_SCALE_BACKEND",
];

/// The settings this run was given, by name, in `SETTINGS`' order.
pub fn given() -> Vec<(&'static str, String)> {
    SETTINGS
        .iter()
        .filter_map(|name| Some((*name, std::env::var(name).ok()?)))
        .collect()
}

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

/// Sections a whole run leaves out: they run only when asked for by name.
const ONLY_WHEN_ASKED: [&str; 1] = ["scale"];

/// `LK_BENCH_ONLY=etcd` (or a comma-separated list: `file,steady`) runs those sections;
/// unset, every section but `scale`.
pub struct Only {
    sections: Option<Vec<String>>,
}

impl Only {
    pub fn from_env() -> Only {
        let list = std::env::var("LK_BENCH_ONLY").ok();
        Only {
            sections: list.map(|l| l.split(',').map(|s| s.trim().to_owned()).collect()),
        }
    }

    /// A whole run: no section in particular was asked for.
    pub fn whole(&self) -> bool {
        self.sections.is_none()
    }

    /// Whether `section` runs: it was asked for, or nothing in particular was and it
    /// is part of a whole run.
    pub fn runs(&self, section: &str) -> bool {
        match &self.sections {
            Some(asked) => asked.iter().any(|s| s == section),
            None => !ONLY_WHEN_ASKED.contains(&section),
        }
    }

    /// The sections asked for that are not among `known`.
    pub fn unknown<'a>(&'a self, known: &[&str]) -> Vec<&'a str> {
        let asked = self.sections.iter().flatten();
        asked
            .filter(|s| !known.contains(&s.as_str()))
            .map(String::as_str)
            .collect()
    }
}
