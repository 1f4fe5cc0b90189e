//! A group of sidecars on one election, each logging its transitions, and the series
//! of handovers measured on it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use leasekeeper::clock::monotonic_now_ns;

use crate::common::checks::checker::{parse_claims, LoggedClaim};
use crate::common::{eventually, Sidecar};
use crate::look::after_stop;

/// A set of sidecars with one transition log per slot.
pub struct Group {
    dir: tempfile::TempDir,
    args: Vec<String>,
    pub slots: Vec<Sidecar>,
    generation: usize,
}

impl Group {
    pub fn new(args: Vec<String>, n: usize) -> Group {
        let mut g = Group {
            dir: tempfile::tempdir().expect("dir"),
            args,
            slots: Vec::new(),
            generation: 0,
        };
        for slot in 0..n {
            g.add_slot(slot);
        }
        g
    }

    fn log(&self, slot: usize) -> PathBuf {
        self.dir.path().join(format!("slot-{slot}.jsonl"))
    }

    /// Starts a sidecar for `slot` and adds it as the group's next slot.
    pub fn add_slot(&mut self, slot: usize) {
        let s = self.spawn(slot);
        self.slots.push(s);
    }

    fn spawn(&mut self, slot: usize) -> Sidecar {
        self.generation += 1;
        let mut args = self.args.clone();
        args.extend([
            "--transition-log".to_owned(),
            self.log(slot).display().to_string(),
        ]);
        let s = Sidecar::spawn(
            &format!("bench-{slot}-g{}", self.generation),
            self.dir.path(),
            &args,
        );
        assert!(s.wait_listening(Duration::from_secs(10)), "{}", s.stderr());
        s
    }

    fn respawn(&mut self, slot: usize) {
        self.slots[slot].kill();
        let s = self.spawn(slot);
        self.slots[slot] = s;
    }

    pub fn leader(&self, limit: Duration) -> Option<usize> {
        eventually(limit, || {
            self.slots
                .iter()
                .position(|s| s.is_running() && s.leader().is_some_and(|v| v["is_leader"] == true))
        })
    }

    /// Waits until every follower follows `leader` by name (steady state before a
    /// handover: no follower is still catching up with the previous one).
    pub fn settled(&self, leader: usize) -> bool {
        eventually(Duration::from_secs(20), || {
            let holder = self.slots[leader].leader()?["leader"].clone();
            self.slots
                .iter()
                .enumerate()
                .all(|(i, s)| {
                    i == leader
                        || s.leader()
                            .is_some_and(|v| v["state"] == "follower" && v["leader"] == holder)
                })
                .then_some(())
        })
        .is_some()
    }

    /// Claims of every slot's transition log (dead processes' included), by start.
    pub fn claims(&self) -> Vec<LoggedClaim> {
        let mut claims = BTreeMap::new();
        for slot in 0..self.slots.len() {
            let text = std::fs::read_to_string(self.log(slot)).unwrap_or_default();
            parse_claims(&text, &mut claims);
        }
        let mut claims: Vec<_> = claims.into_values().collect();
        claims.sort_by_key(|c| c.start);
        claims
    }

    /// The first claim started after `after_ns` in any slot's log: (start, sent).
    fn next_claim_after(&self, after_ns: u64, limit: Duration) -> Option<(u64, Option<u64>)> {
        after_stop(limit, || {
            self.claims()
                .into_iter()
                .find(|c| c.start > after_ns)
                .map(|c| (c.start, c.sent))
        })
    }

    /// The end of the claim that ended after `after_ns` and before `before_ns` (the
    /// stopped leader's), if its log has it.
    fn ended_after(&self, after_ns: u64, before_ns: u64) -> Option<u64> {
        let ends = self.claims().into_iter().filter_map(|c| c.end);
        ends.filter(|e| *e > after_ns && *e <= before_ns).min()
    }

    /// Every line of every slot's transition log.
    fn lines(&self) -> Vec<serde_json::Value> {
        transition_lines((0..self.slots.len()).map(|slot| self.log(slot)))
    }

    /// The first release sent after `after_ns` (the stopped leader's): (sent, answered).
    /// Its line follows the answer, which may come after the new claim: waited for.
    fn release_after(&self, after_ns: u64) -> Option<(u64, u64)> {
        eventually(Duration::from_secs(1), || {
            let lines = self.lines();
            let released = lines.iter().filter(|l| l["event"] == "release");
            let marks =
                released.filter_map(|l| Some((l["sent_ns"].as_u64()?, l["at_ns"].as_u64()?)));
            marks.filter(|(sent, _)| *sent > after_ns).min()
        })
    }

    /// When the candidate whose claim started at `start` woke to the store's notice.
    fn woke_of(&self, start: u64) -> Option<u64> {
        let lines = self.lines();
        let mut started = lines.iter().filter(|l| l["event"] == "claim_start");
        let line = started.find(|l| l["at_ns"].as_u64() == Some(start))?;
        line["woke_ns"].as_u64()
    }

    /// Stops the leader `rounds` times, each time once every follower follows it, and
    /// restarts it as a follower. `expiry_probe` tells the remaining ttl (ms) of the
    /// leader's lease in the store just before a crash.
    pub fn handovers(
        &mut self,
        stop: Stop,
        rounds: usize,
        expiry_probe: Option<&dyn Fn() -> Option<u64>>,
    ) -> Handovers {
        let mut h = Handovers::default();
        for _ in 0..rounds {
            let leader = self.leader(Duration::from_secs(30)).expect("a leader");
            assert!(self.settled(leader), "followers never settled");
            // Let the leader renew at least once so the crash case measures a normal lease.
            std::thread::sleep(Duration::from_millis(20));
            let pttl_ms = expiry_probe.and_then(|p| p());
            let t0 = monotonic_now_ns();
            self.slots[leader].signal(stop.signal());
            let (start, sent) = self
                .next_claim_after(t0, Duration::from_secs(60))
                .expect("a new leader");
            h.record(t0, start, sent, pttl_ms);
            if let (Stop::Graceful, Some(sent)) = (stop, sent) {
                let marks = Marks {
                    t0,
                    ended: self.ended_after(t0, start),
                    release: self.release_after(t0),
                    woke: self.woke_of(start),
                    sent,
                    start,
                };
                h.steps.push(marks.steps());
            }
            let _ = self.slots[leader].wait_exit(Duration::from_secs(5));
            self.respawn(leader);
        }
        h
    }
}

/// Every line of the transition logs `files` (one missing reads as empty).
pub fn transition_lines(files: impl IntoIterator<Item = PathBuf>) -> Vec<serde_json::Value> {
    let text = |file: PathBuf| std::fs::read_to_string(file).unwrap_or_default();
    let texts: Vec<String> = files.into_iter().map(text).collect();
    let lines = texts.iter().flat_map(|t| t.lines());
    lines.filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[derive(Clone, Copy)]
pub enum Stop {
    Graceful,
    Crash,
}

impl Stop {
    fn signal(self) -> i32 {
        match self {
            Stop::Graceful => libc::SIGTERM,
            Stop::Crash => libc::SIGKILL,
        }
    }
}

/// What a series of handovers measured, in milliseconds.
#[derive(Default)]
pub struct Handovers {
    /// Signal sent → new leader's claim.
    pub latency: Vec<f64>,
    /// The new leader's acquiring request: sent → answered (its acquire round trip).
    pub acquire: Vec<f64>,
    /// For crashes: new claim − the store's own expiry of the dead leader's lease.
    pub past_expiry: Vec<f64>,
    /// For graceful stops, from the transition logs (see [`Marks::steps`]).
    pub steps: Vec<[Option<f64>; STEPS]>,
}

/// The steps of a graceful handover the page shows.
pub const STEPS: usize = 6;

/// The marks of one graceful handover in the transition logs (ns): the signal, the
/// stopped leader's claim's end and release (sent, answered), the new leader's wake
/// to the store's notice, its acquiring request sent, its claim.
struct Marks {
    t0: u64,
    ended: Option<u64>,
    release: Option<(u64, u64)>,
    woke: Option<u64>,
    sent: u64,
    start: u64,
}

impl Marks {
    /// In ms: signal → claim ended; → release sent; release sent → answered; release
    /// sent → the new leader woke; → its request sent; → its claim. A step one of
    /// whose marks is missing is `None`.
    fn steps(&self) -> [Option<f64>; STEPS] {
        let ms = |from: Option<u64>, to: Option<u64>| Some(to?.saturating_sub(from?) as f64 / 1e6);
        let released = self.release.map(|r| r.0);
        [
            ms(Some(self.t0), self.ended),
            ms(self.ended, released),
            ms(released, self.release.map(|r| r.1)),
            ms(released, self.woke),
            ms(self.woke, Some(self.sent)),
            ms(Some(self.sent), Some(self.start)),
        ]
    }
}

impl Handovers {
    /// Adds `more`'s handovers to these.
    pub fn extend(&mut self, more: Handovers) {
        self.latency.extend(more.latency);
        self.acquire.extend(more.acquire);
        self.past_expiry.extend(more.past_expiry);
        self.steps.extend(more.steps);
    }

    /// One handover: signal at `t0`, new claim at `start` (its request `sent`), the
    /// lease's remaining ttl at the signal `pttl_ms`.
    fn record(&mut self, t0: u64, start: u64, sent: Option<u64>, pttl_ms: Option<u64>) {
        self.latency.push((start - t0) as f64 / 1e6);
        if let Some(sent) = sent {
            self.acquire.push(start.saturating_sub(sent) as f64 / 1e6);
        }
        if let Some(pttl) = pttl_ms {
            self.past_expiry
                .push((start - t0) as f64 / 1e6 - pttl as f64);
        }
    }
}
