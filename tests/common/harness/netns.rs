//! Hosts in network namespaces on one bridge, for partitions inside a replicated store.
//!
//! Every host is a namespace with one veth into a bridge in the test's own namespace,
//! which has the bridge's address: the test (and the sidecars it starts) reach each
//! host directly, and the hosts reach each other over the bridge. [`NetLab::cut`]
//! drops everything between two hosts with a blackhole route on each side: packets are
//! discarded, established connections stay open and time out on their own (a
//! partition, not a reset), and the test's own links to both hosts stay up.
//!
//! Needs root (CI runs as root) and iproute2. Everything is removed on drop; names
//! carry the test process's pid, and leftovers of dead test processes are removed when
//! the next lab starts.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct NetLab {
    /// `lk<pid>x<n>`: the bridge, and the prefix of every namespace and veth.
    name: String,
    /// The /24 the lab lives in: `10.<net.0>.<net.1>.0`.
    net: (u8, u8),
    hosts: usize,
}

fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("network namespace setup (needs root and iproute2): {e}");
    }
}

/// Removes namespaces and bridges left by test processes that no longer run.
fn remove_leftovers() {
    let alive = |name: &str| {
        let pid = name
            .strip_prefix("lk")
            .and_then(|r| r.split('x').next())
            .and_then(|p| p.parse::<u32>().ok());
        pid.is_none_or(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
    };
    for line in ip(&["netns", "list"]).unwrap_or_default().lines() {
        let ns = line.split_whitespace().next().unwrap_or("");
        if ns.starts_with("lk") && ns.contains('h') && !alive(ns) {
            let _ = ip(&["netns", "del", ns]);
        }
    }
    for line in ip(&["-o", "link", "show", "type", "bridge"])
        .unwrap_or_default()
        .lines()
    {
        let dev = line.split(':').nth(1).map(str::trim).unwrap_or("");
        if dev.starts_with("lk") && !alive(dev) {
            let _ = ip(&["link", "del", dev]);
        }
    }
}

impl NetLab {
    /// A bridge and `hosts` namespaces on it, each host up and reachable.
    pub fn new(hosts: usize) -> NetLab {
        assert!(hosts < 200);
        remove_leftovers();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Short enough for interface names (15 bytes with the host suffix).
        let name = format!("lk{}x{n}", pid % 1_000_000);
        // A /24 of 10.0.0.0/8 per lab, apart for every test process of a run (one per
        // test under `cargo nextest`) and every lab of a process.
        let key = (pid as usize * 7 + n as usize) % 25_000;
        let net = (100 + (key / 250) as u8, (key % 250) as u8);
        let lab = NetLab { name, net, hosts };
        let bridge = lab.name.clone();
        must(&["link", "add", &bridge, "type", "bridge"]);
        must(&[
            "addr",
            "add",
            &format!("{}/24", lab.gateway()),
            "dev",
            &bridge,
        ]);
        must(&["link", "set", &bridge, "up"]);
        for i in 0..hosts {
            let ns = lab.ns(i);
            let outside = format!("{}v{i}", lab.name);
            let inside = format!("{}p{i}", lab.name);
            must(&["netns", "add", &ns]);
            must(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ]);
            must(&["link", "set", &outside, "master", &bridge, "up"]);
            must(&["link", "set", &inside, "netns", &ns]);
            let addr = format!("{}/24", lab.addr(i));
            for args in [
                vec!["link", "set", "lo", "up"],
                vec!["link", "set", &inside, "name", "eth0"],
                vec!["addr", "add", &addr, "dev", "eth0"],
                vec!["link", "set", "eth0", "up"],
            ] {
                let mut full = vec!["-n", &ns];
                full.extend(args);
                must(&full);
            }
        }
        lab
    }

    /// The namespace of host `i`.
    pub fn ns(&self, i: usize) -> String {
        format!("{}h{i}", self.name)
    }

    /// Host `i`'s address (reachable from the test's namespace).
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net.0, self.net.1, 2 + i as u8)
    }

    /// The bridge's address in the test's namespace.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net.0, self.net.1, 1)
    }

    /// A command that runs `program` inside host `i`.
    pub fn command(&self, i: usize, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(i), program]);
        cmd
    }

    fn route(&self, verb: &str, from: usize, to: usize) -> Result<String, String> {
        let dest = format!("{}/32", self.addr(to));
        ip(&["-n", &self.ns(from), "route", verb, "blackhole", &dest])
    }

    /// Drops every packet between hosts `a` and `b`, both ways.
    pub fn cut(&self, a: usize, b: usize) {
        for (x, y) in [(a, b), (b, a)] {
            if let Err(e) = self.route("add", x, y) {
                assert!(e.contains("File exists"), "{e}");
            }
        }
    }

    /// Lets hosts `a` and `b` talk again.
    pub fn mend(&self, a: usize, b: usize) {
        for (x, y) in [(a, b), (b, a)] {
            let _ = self.route("del", x, y);
        }
    }

    /// Cuts host `i` off from every other host (its links to the test stay up).
    pub fn isolate(&self, i: usize) {
        for j in (0..self.hosts).filter(|&j| j != i) {
            self.cut(i, j);
        }
    }

    /// Undoes [`NetLab::isolate`].
    pub fn heal(&self, i: usize) {
        for j in (0..self.hosts).filter(|&j| j != i) {
            self.mend(i, j);
        }
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        for i in 0..self.hosts {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["link", "del", &self.name]);
    }
}
