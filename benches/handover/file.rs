//! `LK_BENCH_ONLY=file`: graceful handovers, then crash failovers, on the file backend.

use crate::common::SidecarArgs;
use crate::group::{Group, Stop};
use crate::report::Report;
use crate::settings::CANDIDATES;

pub fn measure(report: &mut Report, rounds: usize) {
    let dir = tempfile::tempdir().expect("dir");
    let mut g = Group::new(SidecarArgs::file(dir.path()).ttl("15s").build(), CANDIDATES);
    let h = g.handovers(Stop::Graceful, rounds, None);
    report.latency("file: graceful handover (SIGTERM → new claim)", h.latency);
    let h = g.handovers(Stop::Crash, rounds, None);
    report.latency("file: crash failover (kill -9 → new claim)", h.latency);
    drop(g);
}
