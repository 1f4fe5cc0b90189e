//! Servers shared by the test processes of a run, for the tests that do not harm their
//! store (no kill, pause, partition or restart of it, no reading of its server-wide
//! counters): each such test gets its own namespace on one server (a ZooKeeper chroot)
//! instead of a server of its own.
//!
//! Under `cargo nextest` every test is a process of its own, so the sharing is between
//! processes, through files in `<tmp>/leasekeeper-shared/<kind>/`:
//! - `lock`: held while a process looks at or starts the server;
//! - `state`: the server's address, then its pids, then its keeper's pid;
//! - `users`: every process using the server holds a shared `flock` on it for as long
//!   as its [`SharedServer`] lives (the kernel drops it when the process ends, kill -9
//!   included).
//!
//! The first process that finds no live server starts one, in a process group of its
//! own, and a keeper beside it (a small `sh` loop): once nobody has used the server for
//! [`IDLE_SECS`] seconds, or one of its processes died, the keeper takes `lock`, kills
//! the server with SIGKILL and removes its directory. So a run leaves nothing behind a
//! few seconds after its last test, whatever became of the test processes.

use std::fs::{File, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How long a shared server outlives its last user.
pub const IDLE_SECS: u32 = 10;

/// A name no other test process of the run uses (this process's id and the time), for
/// a test's namespace on a shared server: `t<name>` databases, `/test-<name>` chroots.
pub fn namespace() -> String {
    format!("{}_{}", std::process::id(), crate::common::nanos())
}

/// A server that this process uses along with others; it stays up while this lives.
pub struct SharedServer {
    /// What the server's starter returned: its address.
    pub address: String,
    /// The server's directory (its data, log, sockets).
    pub dir: PathBuf,
    _user: File,
}

/// What a starter returns: the address of a server that serves, and its processes,
/// started with [`detached`] so that they outlive the process that started them.
pub struct Started {
    pub address: String,
    pub pids: Vec<u32>,
}

/// The shared server of `kind`, started by `start(dir)` (an empty directory for its
/// data) if no live one is there.
pub fn shared(kind: &str, start: impl FnOnce(&Path) -> Started) -> SharedServer {
    let dir = std::env::temp_dir().join("leasekeeper-shared").join(kind);
    std::fs::create_dir_all(&dir).expect("shared server dir");
    let lock = open(&dir.join("lock"));
    lock.lock().expect("shared server lock");
    let address = match live_state(&dir) {
        Some(address) => address,
        None => start_server(&dir, start),
    };
    let user = open(&dir.join("users"));
    user.lock_shared().expect("shared server user lock");
    SharedServer {
        address,
        dir: dir.join("data"),
        _user: user,
    }
}

fn open(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The address in `state` when the server and its keeper all still run.
fn live_state(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("state")).ok()?;
    let mut lines = text.lines();
    let address = lines.next()?.to_owned();
    let pids: Vec<u32> = lines.filter_map(|l| l.parse().ok()).collect();
    let alive =
        |pid: &u32| crate::common::process_state(*pid).is_some_and(|s| s != 'Z' && s != 'X');
    (!pids.is_empty() && pids.iter().all(alive)).then_some(address)
}

/// Starts the server in a fresh `data` directory and its keeper; writes `state`.
fn start_server(dir: &Path, start: impl FnOnce(&Path) -> Started) -> String {
    if let Ok(text) = std::fs::read_to_string(dir.join("state")) {
        // What is left of a server whose keeper or a process of it died.
        for pid in text.lines().skip(1).filter_map(|l| l.parse::<u32>().ok()) {
            crate::common::send_signal(pid, libc::SIGKILL);
        }
    }
    let _ = std::fs::remove_file(dir.join("state"));
    let data: PathBuf = dir.join("data");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir(&data).expect("shared server data dir");
    let started = start(&data);
    let keeper = keeper(dir, &started.pids);
    let mut state = started.address.clone();
    for pid in started.pids.iter().chain([&keeper]) {
        state.push_str(&format!("\n{pid}"));
    }
    std::fs::write(dir.join("state"), state).expect("shared server state");
    started.address
}

/// The keeper of the server `pids` in `dir` (see the module's doc).
const KEEPER: &str = r#"
cd "$1"; idle="$2"; shift 2
quiet=0
while sleep 1; do
  alive=1
  for p in "$@"; do
    case "$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)" in ''|Z|X) alive=0 ;; esac
  done
  if flock -n -x users true; then quiet=$((quiet + 1)); else quiet=0; fi
  [ $alive = 1 ] && [ $quiet -lt "$idle" ] && continue
  exec 9>>lock
  flock -x 9
  if [ $alive = 1 ] && ! flock -n -x users true; then quiet=0; exec 9>&-; continue; fi
  rm -f state
  kill -9 "$@" 2>/dev/null
  rm -rf data
  exit 0
done
"#;

/// Starts the keeper in the background of a short-lived `sh` (so that no child is left
/// unreaped here); the keeper's pid.
fn keeper(dir: &Path, pids: &[u32]) -> u32 {
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"sh -c "$0" leasekeeper-shared-keeper "$@" </dev/null >/dev/null 2>&1 & echo $!"#)
        .arg(KEEPER)
        .arg(dir)
        .arg(IDLE_SECS.to_string())
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .output()
        .expect("sh for the shared server's keeper");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the keeper's pid")
}

/// `cmd` made to outlive this process: no terminal signals of the test's process
/// group reach it (its keeper ends it).
pub fn detached(cmd: &mut Command) -> &mut Command {
    cmd.process_group(0)
}
