//! Processes as /proc shows them: a marker that names a test's background workers
//! (and kills every one of them on drop, so a failing test leaves none behind), the
//! descendants of a process, and its zombies.

use std::time::Duration;

use crate::common::eventually;

/// One process.
#[derive(Clone, Debug)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    /// `R`, `S`, `T`, `Z`, … from /proc/PID/stat.
    pub state: char,
    pub args: Vec<String>,
}

/// Every process /proc shows now (those that vanish while being read are left out).
pub fn all() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read)
        .collect()
}

fn read(pid: u32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rfind(')')?;
    let mut fields = stat[after + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Some(Proc {
        pid,
        ppid,
        state,
        args,
    })
}

/// Every process below `root` (not `root` itself), as the parent links show now.
pub fn descendants(root: u32) -> Vec<Proc> {
    let procs = all();
    let mut found: Vec<Proc> = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for p in procs.iter().filter(|p| p.ppid == parent) {
            parents.push(p.pid);
            found.push(p.clone());
        }
    }
    found
}

/// The zombies below `root`.
pub fn zombies_below(root: u32) -> Vec<Proc> {
    descendants(root)
        .into_iter()
        .filter(|p| p.state == 'Z')
        .collect()
}

/// The live processes (not zombies) below `root` whose command line holds `text`: not
/// leasekeeper's own (whose arguments may carry a command's text), nor `keep` and the
/// processes above it (a command that runs on, and the shell that started it).
pub fn running_below(root: u32, text: &str, keep: Option<u32>) -> Vec<Proc> {
    let procs = all();
    let bin = crate::common::leasekeeper_bin();
    let mut kept = Vec::new();
    let mut at = keep;
    while let Some(pid) = at.filter(|&p| p != root && p > 1) {
        kept.push(pid);
        at = procs.iter().find(|p| p.pid == pid).map(|p| p.ppid);
    }
    descendants(root)
        .into_iter()
        .filter(|p| p.state != 'Z' && !kept.contains(&p.pid))
        .filter(|p| {
            p.args
                .first()
                .is_none_or(|a| std::path::Path::new(a) != bin)
        })
        .filter(|p| p.args.join(" ").contains(text))
        .collect()
}

/// The exec guard of the sidecar `pid` (its child `leasekeeper __exec-guard …`).
pub fn guard_of(pid: u32) -> Option<u32> {
    all()
        .into_iter()
        .find(|p| p.ppid == pid && p.args.get(1).is_some_and(|a| a == "__exec-guard"))
        .map(|p| p.pid)
}

/// A word no other process has in its command line: `sleep <marker>` is a worker
/// that sleeps for decades and is found by that word alone. Dropping the marker
/// SIGKILLs every process that still carries it.
pub struct Marker(pub String);

impl Marker {
    pub fn new() -> Marker {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mix = (u64::from(nanos) ^ (u64::from(std::process::id()) << 20)) % 100_000_000;
        // A count of seconds for sleep(1): about 30 years.
        Marker(format!("9{mix:08}"))
    }

    /// `sleep <marker>`.
    pub fn sleep(&self) -> String {
        format!("sleep {}", self.0)
    }

    /// The processes that carry the marker now.
    pub fn procs(&self) -> Vec<Proc> {
        all()
            .into_iter()
            .filter(|p| p.args.iter().any(|a| a == &self.0))
            .collect()
    }

    /// The first process with the marker within `limit`.
    pub fn wait_running(&self, limit: Duration) -> Option<Proc> {
        eventually(limit, || self.procs().into_iter().next())
    }

    /// Whether every process with the marker is gone within `limit`.
    pub fn gone_within(&self, limit: Duration) -> bool {
        eventually(limit, || self.procs().is_empty().then_some(())).is_some()
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        for _ in 0..50 {
            let left = self.procs();
            if left.is_empty() {
                return;
            }
            for p in left {
                crate::common::send_signal(p.pid, libc::SIGKILL);
            }
            // Pause: before the next SIGKILL sweep.
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
