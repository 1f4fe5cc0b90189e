//! `LK_BENCH_ONLY=abuse`: the hostile-client crowd of `tests/hostile_clients.rs`
//! (`common::crowd`) against the release build, at the default open-files limit and
//! at a raisable one: probes answered, scrapes, RSS idle, peak and after, and whether
//! the leader kept its one tenure.

use std::time::Duration;

use crate::common::crowd::{raise_own_limit, under_abuse, AbuseReport};
use crate::report::Report;

pub fn measure(report: &mut Report, _rounds: usize) {
    let hard = raise_own_limit();
    for (label, nofile) in [
        ("nofile 1024 (fixed)", (1024, 1024)),
        ("nofile 1024, raisable", (1024, hard)),
    ] {
        // Back under 16 MiB (the bound for the release build), whatever the idle size.
        let r = under_abuse(nofile, Duration::from_secs(30), |_| 16 * 1024);
        rows(report, label, &r);
    }
}

fn rows(report: &mut Report, label: &str, r: &AbuseReport) {
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    report.row(
        &format!("abuse, {label}: fresh probes answered within 1 s"),
        format!(
            "{} of {} ({} crowd clients, {} connections in all, {} open near the end)",
            r.answered, r.probes, r.crowd, r.dialed, r.held
        ),
    );
    report.row(
        &format!("abuse, {label}: /metrics scrapes within 2 s"),
        format!("{} of {}", r.scraped, r.scrapes),
    );
    report.row(
        &format!("abuse, {label}: RSS idle / peak / after"),
        format!(
            "{} / {} / {} (under 16 MiB {})",
            mib(r.idle_kib),
            mib(r.peak_kib),
            mib(r.after_kib),
            r.settled_in
                .map_or("not within 10 s".to_owned(), |d| format!(
                    "{:.1} s after the crowd left",
                    d.as_secs_f64()
                ))
        ),
    );
    report.row(
        &format!("abuse, {label}: garbage not refused, flood answers"),
        format!("{} of {}, {}", r.garbage_wrong, r.garbage_sent, r.floods),
    );
    report.row(
        &format!("abuse, {label}: leader kept its one tenure"),
        (r.still_leads && r.leader_claims == 1 && r.follower_claims == 0).to_string(),
    );
}
