//! The sidecar as PID 1 (a container's entry point, as in the image, without `tini`):
//! it forks, and the parent serves as init: reaps every orphan as it ends, passes
//! SIGTERM on, and ends with the sidecar's code. Run in a PID namespace of the test's
//! own (`unshare --pid --fork`, which needs root; this machine kind runs as root).

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::harness::procs;
use common::{eventually, free_port, leasekeeper_bin, send_signal};

#[test]
fn the_sidecar_as_pid_1_reaps_orphans_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("dir");
    let port = free_port();
    let ran = dir.path().join("hook-ran");
    // The hook leaves an orphan that exits after 200 ms: reparented to PID 1.
    let hook = format!("(sleep 0.2 &); touch {}", ran.display());
    let unshare = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child"])
        .arg(leasekeeper_bin())
        .args(["--backend", "file", "--file-path"])
        .arg(dir.path().join("pid1.lock"))
        .args([
            "--identity",
            "pid1",
            "--http-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--on-change", &hook])
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("pid1.stderr")).expect("log"),
        ))
        .spawn()
        .expect("unshare");
    let mut unshare = KillOnDrop(unshare);
    assert!(
        eventually(Duration::from_secs(10), || ran.exists().then_some(())).is_some(),
        "the hook never ran"
    );
    // The orphan (and any fork of the hook's shell not yet turned into it) has exited.
    let exited = eventually(Duration::from_secs(10), || {
        procs::running_below(unshare.0.id(), "sleep 0.2", None)
            .is_empty()
            .then_some(())
    });
    assert!(
        exited.is_some(),
        "the orphan still runs: {:?}",
        procs::running_below(unshare.0.id(), "sleep 0.2", None)
    );
    let reaped = eventually(Duration::from_secs(10), || {
        procs::zombies_below(unshare.0.id())
            .is_empty()
            .then_some(())
    });
    assert!(
        reaped.is_some(),
        "zombies below the sidecar as PID 1: {:?}",
        procs::zombies_below(unshare.0.id())
    );
    let pid1 = procs::all()
        .into_iter()
        .find(|p| p.ppid == unshare.0.id())
        .expect("the namespace's PID 1");
    send_signal(pid1.pid, libc::SIGTERM);
    let status = eventually(Duration::from_secs(10), || {
        unshare.0.try_wait().ok().flatten()
    });
    assert!(
        status.is_some_and(|s| s.success()),
        "PID 1 ended with {status:?} after SIGTERM: {}",
        std::fs::read_to_string(dir.path().join("pid1.stderr")).unwrap_or_default()
    );
}

/// A child killed and reaped on drop (`unshare --kill-child`: its namespace too).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
