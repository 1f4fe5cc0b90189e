//! `LK_BENCH_ONLY=file`: graceful handovers, then crash failovers, on the file backend;
//! the idle footprint of a leader and a follower with the default flags (the
//! footprint target of DESIGN §9).

use std::time::Duration;

use crate::common::SidecarArgs;
use crate::floor;
use crate::footprint::idle_footprint;
use crate::group::{Group, Stop};
use crate::measure::beside_floor;
use crate::page::Key;
use crate::report::Report;
use crate::settings::CANDIDATES;

pub fn measure(report: &mut Report, rounds: usize) {
    let dir = tempfile::tempdir().expect("dir");
    let mut g = Group::new(SidecarArgs::file(dir.path()).ttl("15s").build(), CANDIDATES);
    let at_floor = &mut |n| floor::file::handovers(dir.path(), n);
    let (h, floor_rounds) = beside_floor(&mut g, rounds, at_floor);
    report.latency(Key::new("graceful", "file", "leasekeeper"), h.latency);
    crate::measure::steps(report, "file", &h.steps);
    floor::graceful(report, "file", floor_rounds);
    let h = g.handovers(Stop::Crash, rounds, None);
    report.latency(Key::new("failover", "file", "crash"), h.latency);
    drop(g);
    // Defaults but the lock's place: ttl 15s, no label, no Events (not in a Pod).
    let g = Group::new(SidecarArgs::file(dir.path()).build(), CANDIDATES);
    let leader = g.leader(Duration::from_secs(10)).expect("leader");
    assert!(g.settled(leader), "followers never settled");
    let follower = (leader + 1) % CANDIDATES;
    for (row, slot) in [("file_leader", leader), ("file_follower", follower)] {
        let (rss, cpu) = idle_footprint(&g.slots[slot], Duration::from_secs(10));
        report.value(
            Key::new("footprint", row, "value"),
            format!("{rss:.1} MiB / {cpu:.3} ms/s"),
        );
    }
    drop(g);
}
