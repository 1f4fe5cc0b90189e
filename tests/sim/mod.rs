//! The deterministic simulator of the elector: N copies of the real
//! `Machine` against simulated stores of each family, under faults drawn from one
//! seed, judged by an oracle in simulated real time. See docs/safety.md, "The
//! simulator".

pub mod client;
pub mod explore;
pub mod faults;
pub mod handover;
pub mod oracle;
pub mod store;
pub mod world;

use leasekeeper::elector::machine::Flaws;

use client::Family;
use oracle::Violation;

/// What one run found.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub family: Family,
    pub flaws: Flaws,
    pub violations: Vec<Violation>,
    pub events: u64,
    pub claims: usize,
    /// How long after healing someone first claimed.
    pub heal_latency: Option<u64>,
}

/// Runs one seed of one family; the trace too when asked.
pub fn run(seed: u64, family: Family, flaws: Flaws, trace: bool) -> (Outcome, Vec<String>) {
    let (outcome, trace) = run_timed(seed, family, flaws, trace);
    (outcome, trace.into_iter().map(|(_, line)| line).collect())
}

/// [`run`], with each trace line's simulated real time.
pub fn run_timed(
    seed: u64,
    family: Family,
    flaws: Flaws,
    trace: bool,
) -> (Outcome, Vec<(u64, String)>) {
    let mut w = world::World::new(seed, family, flaws, trace);
    let violations = w.run();
    let outcome = Outcome {
        seed,
        family,
        flaws,
        violations,
        events: w.events,
        claims: w.oracle.claims.len(),
        heal_latency: w.oracle.first_claim_after(w.heal_at),
    };
    (outcome, w.trace.take().unwrap_or_default())
}

impl Outcome {
    pub fn report(&self) -> String {
        let mut s = format!(
            "seed {} family {}: {} events, {} claims, first claim {} after healing",
            self.seed,
            self.family.name(),
            self.events,
            self.claims,
            self.heal_latency.map_or("never".into(), oracle::ms)
        );
        for v in &self.violations {
            s += &format!("\n  VIOLATION ({}): {v}", v.kind());
        }
        s
    }
}

/// A failed run explained: its seed, family and violations, the last 40 lines of its
/// trace up to the first violation (the run again, traced: it is deterministic), and
/// how to replay it.
pub fn explain(o: &Outcome) -> String {
    let flaws = o.flaws;
    let (again, trace) = run_timed(o.seed, o.family, flaws, true);
    let at = again
        .violations
        .iter()
        .map(|v| v.at())
        .min()
        .unwrap_or(u64::MAX);
    let trace: Vec<String> = trace
        .into_iter()
        .filter(|(t, _)| *t <= at)
        .map(|(_, l)| l)
        .collect();
    let tail = trace.len().saturating_sub(40);
    let flaw_names = flaw_names(flaws);
    format!(
        "{}\nthe last {} trace lines up to the violation (real time, node @ its local time, event -> effects, next):\n{}\nreplay: LK_SIM_SEED={} LK_SIM_FAMILY={}{} cargo test --test suite elector_sim::replay -- --exact --nocapture",
        again.report(),
        trace.len() - tail,
        trace[tail..].join("\n"),
        o.seed,
        o.family.name(),
        if flaw_names.is_empty() { String::new() } else { format!(" LK_SIM_FLAWS={flaw_names}") },
    )
}

fn flaw_names(f: Flaws) -> String {
    let mut names = Vec::new();
    for (on, name) in [
        (f.deadline_from_reply, "deadline_from_reply"),
        (f.no_drift, "no_drift"),
        (f.trust_late_answers, "trust_late_answers"),
        (f.no_sit_out, "no_sit_out"),
    ] {
        if on {
            names.push(name);
        }
    }
    names.join(",")
}

/// Many seeds on several families.
#[derive(Debug, Default)]
pub struct Sweep {
    pub runs: u64,
    pub events: u64,
    pub failures: Vec<Outcome>,
    /// The longest time from healing to the first claim, per family.
    pub worst_heal: Vec<(String, u64)>,
}

impl Sweep {
    /// Runs `seeds` × `families` on `threads` threads.
    pub fn run(
        seeds: std::ops::Range<u64>,
        families: &[Family],
        flaws: Flaws,
        threads: usize,
    ) -> Sweep {
        let threads = threads.max(1) as u64;
        let parts: Vec<Sweep> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|k| {
                    let seeds = seeds.clone();
                    scope.spawn(move || {
                        let mut part = Sweep::default();
                        for seed in seeds.filter(|s| s % threads == k) {
                            for &fam in families {
                                part.add(run(seed, fam, flaws, false).0);
                            }
                        }
                        part
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a sweep thread"))
                .collect()
        });
        let mut all = Sweep::default();
        for p in parts {
            all.runs += p.runs;
            all.events += p.events;
            all.failures.extend(p.failures);
            for (fam, worst) in p.worst_heal {
                all.note_heal(&fam, worst);
            }
        }
        all.failures.sort_by_key(|o| (o.seed, o.family.name()));
        all.worst_heal.sort();
        all
    }

    fn note_heal(&mut self, fam: &str, latency: u64) {
        match self.worst_heal.iter_mut().find(|(f, _)| f == fam) {
            Some((_, w)) => *w = (*w).max(latency),
            None => self.worst_heal.push((fam.to_string(), latency)),
        }
    }

    fn add(&mut self, o: Outcome) {
        self.runs += 1;
        self.events += o.events;
        if let Some(l) = o.heal_latency {
            self.note_heal(&o.family.name(), l);
        }
        if !o.violations.is_empty() {
            self.failures.push(o);
        }
    }

    /// Violations by kind.
    pub fn counts(&self) -> String {
        let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
        for o in &self.failures {
            for v in &o.violations {
                *kinds
                    .entry(format!("{} on {}", v.kind(), o.family.name()))
                    .or_default() += 1;
            }
        }
        format!(
            "{} runs, {} failed: {kinds:?}",
            self.runs,
            self.failures.len()
        )
    }

    pub fn summary(&self, took: std::time::Duration) -> String {
        let worst: Vec<String> = self
            .worst_heal
            .iter()
            .map(|(f, w)| format!("{f} {}", oracle::ms(*w)))
            .collect();
        format!(
            "{} in {:.1} s ({:.0} runs/s, {} events); longest from healing to a claim: {}",
            self.counts(),
            took.as_secs_f64(),
            self.runs as f64 / took.as_secs_f64(),
            self.events,
            worst.join(", ")
        )
    }

    /// Fails with the first failure explained.
    pub fn assert_clean(&self) {
        if let Some(first) = self.failures.first() {
            panic!("{}\nfirst failure:\n{}", self.counts(), explain(first));
        }
    }
}

/// The one generator of a run: SplitMix64 (rand's `StdRng`, ChaCha, took a third of a
/// debug build's time); every choice is drawn through rand's `Rng` methods.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    pub fn seed_from_u64(seed: u64) -> Self {
        SimRng(seed ^ 0x5EED_1E45_EC0D_E5A1)
    }
}

impl rand::RngCore for SimRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}
