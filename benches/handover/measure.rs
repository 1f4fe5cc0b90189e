//! The measurements every backend section makes the same way: graceful handovers,
//! crash failovers, and counters read as rates over a window.

use std::time::Duration;

use crate::floor;
use crate::group::{Group, Handovers, Stop, STEPS};
use crate::page::Key;
use crate::report::Report;
use crate::settings::CANDIDATES;

/// The floor of a section's graceful handover: `n` handovers of it, in process on the
/// section's server (a function of `floor`).
pub type Floor<'a> = &'a mut dyn FnMut(usize) -> anyhow::Result<Vec<floor::Round>>;

/// How many handovers leasekeeper's and the floor's series take in turn: a change in
/// the machine's load during a section weighs on both alike.
const BLOCK: usize = 5;

/// `rounds` graceful handovers among `CANDIDATES` sidecars started with `args`, and
/// as many of the floor's, in turns of [`BLOCK`]: the store's (`row`'s) cells of
/// graceful handover, acquire round trip, steps and floor. The group is handed back
/// still running, for a steady-state measurement.
pub fn graceful_handovers(
    report: &mut Report,
    row: &'static str,
    args: Vec<String>,
    rounds: usize,
    at_floor: Floor,
) -> Group {
    warmed_graceful_handovers(report, row, args, (0, rounds), at_floor)
}

/// [`graceful_handovers`] after `warm` handovers unmeasured, for a server whose
/// code warms up as it runs (a JVM's JIT): leasekeeper's requests meet it as warm as
/// the floor's, whose own unmeasured rounds come first (its requests are not all
/// leasekeeper's: no session opened or closed, no `multi`).
pub fn warmed_graceful_handovers(
    report: &mut Report,
    row: &'static str,
    args: Vec<String>,
    (warm, rounds): (usize, usize),
    at_floor: Floor,
) -> Group {
    let mut g = Group::new(args, CANDIDATES);
    drop(g.handovers(Stop::Graceful, warm, None));
    let (h, floor_rounds) = beside_floor(&mut g, rounds, at_floor);
    report.latency(Key::new("graceful", row, "leasekeeper"), h.latency);
    report.latency(Key::new("failover", row, "acquire"), h.acquire);
    steps(report, row, &h.steps);
    floor::graceful(report, row, floor_rounds);
    g
}

/// `rounds` graceful handovers of the group `g` and as many of the floor, in turns
/// of [`BLOCK`]. The floor's first error ends its series.
pub fn beside_floor(
    g: &mut Group,
    rounds: usize,
    at_floor: Floor,
) -> (Handovers, anyhow::Result<Vec<floor::Round>>) {
    let mut h = Handovers::default();
    let mut floor_rounds = Ok(Vec::new());
    for block in (0..rounds).step_by(BLOCK) {
        let n = BLOCK.min(rounds - block);
        h.extend(g.handovers(Stop::Graceful, n, None));
        if let Ok(done) = floor_rounds.as_mut() {
            match at_floor(n) {
                Ok(more) => done.extend(more),
                Err(e) => floor_rounds = Err(e),
            }
        }
    }
    (h, floor_rounds)
}

/// The medians of the graceful handovers' `steps` (see [`crate::group::Handovers`]):
/// the store's (`row`'s) cells of the steps table, `—` where no handover had the step.
pub fn steps(report: &mut Report, row: &'static str, steps: &[[Option<f64>; STEPS]]) {
    for (i, column) in STEP_COLUMNS.iter().enumerate() {
        let values = steps.iter().filter_map(|s| s[i]).collect();
        report.median(Key::new("steps", row, column), values);
    }
}

/// The steps table's columns, in the order of [`crate::group::Handovers::steps`].
const STEP_COLUMNS: [&str; STEPS] = [
    "ended",
    "release_sent",
    "release_answered",
    "woke",
    "take_sent",
    "claim",
];

/// `rounds` crash failovers among `CANDIDATES` sidecars started with `args` (whose
/// lease or session lasts `timeout`, e.g. "ttl 1 s"): the store's (`row`'s) crash
/// failover cell.
pub fn crash_failovers(
    report: &mut Report,
    row: &'static str,
    timeout: &str,
    args: Vec<String>,
    rounds: usize,
    expiry_probe: Option<&dyn Fn() -> Option<u64>>,
) -> Handovers {
    let mut g = Group::new(args, CANDIDATES);
    let h = g.handovers(Stop::Crash, rounds, expiry_probe);
    drop(g);
    report.labelled_latency(
        Key::new("failover", row, "crash"),
        timeout,
        h.latency.clone(),
    );
    h
}

/// `graceful` graceful handovers at ttl 15s, then up to 30 crash failovers at ttl 1s
/// with how far past the store's own expiry of the lease (read by `probe` as the
/// remaining ms) each new claim came. `args` gives the sidecars' arguments for a ttl.
pub fn graceful_handovers_then_crash_failovers(
    report: &mut Report,
    row: &'static str,
    args: impl Fn(&str) -> Vec<String>,
    probe: &dyn Fn() -> Option<u64>,
    (graceful, rounds): (usize, usize),
    at_floor: Floor,
) {
    drop(graceful_handovers(
        report,
        row,
        args("15s"),
        graceful,
        at_floor,
    ));
    let crash = crash_failovers(
        report,
        row,
        "ttl 1 s",
        args("1s"),
        rounds.min(30),
        Some(probe),
    );
    report.latency(Key::new("failover", row, "past_expiry"), crash.past_expiry);
}

/// How fast each of the counters `read` grew (per second) over `window`, sleeping.
pub fn rates_over<const N: usize>(window: Duration, read: impl Fn() -> [f64; N]) -> [f64; N] {
    rates_during(window, read, || std::thread::sleep(window))
}

/// How fast each of the counters `read` grew (per second) while `run` took `window`.
pub fn rates_during<const N: usize>(
    window: Duration,
    read: impl Fn() -> [f64; N],
    run: impl FnOnce(),
) -> [f64; N] {
    let before = read();
    run();
    let after = read();
    std::array::from_fn(|i| (after[i] - before[i]) / window.as_secs_f64())
}
