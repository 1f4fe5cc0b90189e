//! What every test server file shares: one started server process (Redis, an etcd
//! member, a ZooKeeper server, PostgreSQL's `runuser`, MariaDB, Prometheus) that can be
//! paused (SIGSTOP), resumed (SIGCONT), killed (woken, SIGKILL, reaped) and is killed
//! on drop; the wait until a fresh process serves; and data directories made once and
//! copied for each server (`initdb`, `mariadb-install-db`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{eventually, send_signal};

/// A server process the harness started, or none (before the first start and after
/// a kill).
#[derive(Default)]
pub struct ServerProcess {
    child: Option<Child>,
}

impl ServerProcess {
    /// Starts `cmd` with no stdin and no stdout, its stderr into the file `log` (created
    /// anew) or nowhere; `missing` is the panic message when it cannot start.
    pub fn start(cmd: &mut Command, log: Option<&Path>, missing: &str) -> ServerProcess {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("server log")),
            None => Stdio::null(),
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect(missing);
        ServerProcess { child: Some(child) }
    }

    /// Lets it run on after this is dropped (a server shared by test processes, which
    /// its keeper ends); its pid.
    pub fn detach(mut self) -> Option<u32> {
        self.child.take().map(|child| child.id())
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Sends `sig` while it runs.
    pub fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            send_signal(pid, sig);
        }
    }

    /// SIGSTOP.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Waits up to `limit` for it to exit by itself; whether it did (then it is reaped).
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let exited = eventually(limit, || child.try_wait().ok().flatten());
        if exited.is_some() {
            self.child = None;
        }
        exited.is_some()
    }

    /// Wakes it (a stopped process), kills it with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            send_signal(child.id(), libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits up to `limit` until `serves` says a freshly started server serves; panics with
/// `why()` (which may read the server's log) if it never does.
pub fn wait_serving(
    limit: Duration,
    mut serves: impl FnMut() -> bool,
    why: impl FnOnce() -> String,
) {
    let ok = eventually(limit, || serves().then_some(()));
    assert!(ok.is_some(), "{}", why());
}

/// A data directory made once by `make` (given an empty directory to fill) and kept in
/// the system's temp dir for every test process: `<tmp>/leasekeeper-<name>-<stamp>`,
/// where the stamp follows the size and time of `binary` (another server version gets
/// another one). It is made under a lock file and renamed into place whole, so every
/// process sees a complete one or makes it.
pub fn template(name: &str, binary: &str, make: impl FnOnce(&Path)) -> PathBuf {
    let stamp = std::fs::metadata(binary)
        .map(|m| format!("{}-{}", m.len(), m.mtime()))
        .unwrap_or_default();
    let root = std::env::temp_dir();
    let path = root.join(format!("leasekeeper-{name}-{stamp}"));
    if path.exists() {
        return path;
    }
    let lock = std::fs::File::create(root.join(format!("leasekeeper-{name}.lock")))
        .expect("template lock file");
    lock.lock().expect("template lock");
    if path.exists() {
        return path;
    }
    let fresh = root.join(format!("leasekeeper-{name}-{stamp}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&fresh);
    std::fs::create_dir(&fresh).expect("template dir");
    make(&fresh);
    std::fs::rename(&fresh, &path).expect("template rename");
    path
}

/// Copies the directory `from` to `to` (which must not exist), owners and modes kept.
pub fn copy_tree(from: &Path, to: &Path) {
    let copied = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .is_ok_and(|s| s.success());
    assert!(copied, "cp -a {} {}", from.display(), to.display());
}
