//! `LK_BENCH_ONLY=abuse`: the hostile-client crowd of `tests/suite/hostile_clients.rs`
//! (`common::harness::crowd`) against the release build, at the default open-files limit and
//! at a raisable one: probes answered, scrapes, RSS idle, peak and after, and whether
//! the leader kept its one tenure.

use std::time::Duration;

use crate::common::harness::crowd::{raise_own_limit, under_abuse, AbuseReport};
use crate::page::Key;
use crate::report::Report;

pub fn measure(report: &mut Report, _rounds: usize) {
    let hard = raise_own_limit();
    for (row, nofile) in [("fixed", (1024, 1024)), ("raisable", (1024, hard))] {
        // Back under 16 MiB (the bound for the release build), whatever the idle size.
        let r = under_abuse(nofile, Duration::from_secs(30), |_| 16 * 1024);
        if row == "raisable" {
            report.value(
                Key::new("abuse", row, "limit"),
                format!("1024, raisable (hard {})", thousands(hard)),
            );
        }
        cells(report, row, &r);
    }
}

/// The cells of `row` (one open-files limit) from what the crowd's run saw.
fn cells(report: &mut Report, row: &'static str, r: &AbuseReport) {
    let cell = |column| Key::new("abuse", row, column);
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    let settled = r
        .settled_in
        .map_or("not under 16 MiB within 10 s".to_owned(), |d| {
            format!("under 16 MiB {:.1} s after the crowd left", d.as_secs_f64())
        });
    report.value(cell("probes"), format!("{} of {}", r.answered, r.probes));
    report.value(cell("scrapes"), format!("{} of {}", r.scraped, r.scrapes));
    report.value(
        cell("rss"),
        format!(
            "{} / {} / {} MiB, {settled}",
            mib(r.idle_kib),
            mib(r.peak_kib),
            mib(r.after_kib)
        ),
    );
    report.value(
        cell("garbage"),
        format!(
            "{} of {}",
            thousands(r.garbage_wrong as u64),
            thousands(r.garbage_sent as u64)
        ),
    );
    let kept = r.still_leads && r.leader_claims == 1 && r.follower_claims == 0;
    report.value(
        cell("tenure"),
        if kept {
            "one, kept; no follower led".to_owned()
        } else {
            format!(
                "{} claims of the leader (still leads: {}), {} of followers",
                r.leader_claims, r.still_leads, r.follower_claims
            )
        },
    );
    report.value(
        cell("crowd"),
        format!(
            "{} clients, {} connections in all, {} open near the end; {} flood answers",
            thousands(r.crowd as u64),
            thousands(r.dialed as u64),
            thousands(r.held as u64),
            thousands(r.floods as u64)
        ),
    );
}

/// `n` with a comma between each group of three digits: 67,148.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}
