//! What a sidecar costs the machine, read from /proc.

use std::time::Duration;

use crate::common::Sidecar;

/// CPU time (ns) spent so far by every thread of `pid`.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Resident set size of `pid`, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// (RSS MiB, CPU ms per s) of a sidecar left alone for `window`.
pub fn idle_footprint(s: &Sidecar, window: Duration) -> (f64, f64) {
    let before = cpu_ns(s.pid);
    std::thread::sleep(window);
    let after = cpu_ns(s.pid);
    let cpu_ms_per_s = after.saturating_sub(before) as f64 / 1e6 / window.as_secs_f64();
    (rss_kib(s.pid) as f64 / 1024.0, cpu_ms_per_s)
}
