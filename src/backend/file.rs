//! `file` backend: an exclusive `flock` on a lock file, for development and single hosts.
//!
//! The kernel holds the lock for as long as the process lives, so there is nothing
//! to renew and a crash frees the lock at once. The lock file also carries the
//! fencing counter and the holder's identity as one JSON line; only the lock holder
//! writes it, and it bumps the counter on every acquisition, so tokens strictly grow.
//!
//! Followers block on the lock in one background thread (the waiter); when the
//! holder goes away the waiter gets the lock and the next campaign finds it there.
//! Only one open file description per process ever competes for the lock: a second
//! one in the same process would conflict with the first and could be granted the
//! lock unnoticed after the first is dropped.
//!
//! **Switchover**: every candidate keeps a file of its own, named at random and holding
//! its identity, in the directory `<lock file>.candidates`, locked for as long as it
//! runs: a file nobody can lock is a live candidate's (a crash frees it; whoever lists
//! the candidates next removes it). `release_to(to)` writes `to` and a use-by a ttl
//! ahead into the record as it releases; a candidate that gets the lock meanwhile and
//! is not `to` lets go of it at once and stays away until the use-by (or until it
//! sees the record no longer reserved), so `to`, waiting on the lock too, gets it.
//!
//! **Shared and exclusive** (`--mode`): a shared holder holds a `LOCK_SH` on the lock
//! file, so shared holders coexist and any exclusive holder (`--mode exclusive` or
//! the election's, `LOCK_EX`) excludes them. Writers go first: a writer that must
//! wait holds the *gate* `<lock file>.gate` (`LOCK_EX`) while it waits for the lock,
//! and a shared candidate passes the gate (`LOCK_SH`) before it takes its lock, so
//! new shared holders stay out while a writer waits. The fencing counter stays in
//! the record: an exclusive holder bumps it alone; shared holders bump it under a
//! short `LOCK_EX` on `<lock file>.count` (never while waiting for anything else), so
//! every tenure gets its own token and a tenure that begins after another ended has a
//! greater one. A shared holder names no successor: a switchover is refused.

use std::convert::Infallible;
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

pub mod entry;

use super::protocol::{Own, Protocol, Transport, Waited};
use super::record::Seen;
use super::{BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::status::{FencingToken, Holder, Mode};

/// The file backend's flag.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "File backend")]
pub struct Args {
    /// Lock file [default: $XDG_RUNTIME_DIR or /tmp, then leasekeeper-<election>.lock].
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_FILE_PATH")]
    pub file_path: Option<PathBuf>,
}

impl Args {
    /// The lock file: the flag, else one per election in the runtime directory.
    pub fn path(&self, election: &str) -> PathBuf {
        self.file_path.clone().unwrap_or_else(|| {
            let dir = std::env::var_os("XDG_RUNTIME_DIR")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            dir.join(format!("leasekeeper-{election}.lock"))
        })
    }
}

/// The lock file of slot `slot` (`--holders`): slot 0 the path itself, slot `i`
/// with `-<i>` before the extension (`leasekeeper-e.lock` → `leasekeeper-e-2.lock`),
/// as the lease names of the other stores (`backend::slots::slot_election`).
pub fn slot_path(path: &Path, slot: u32) -> PathBuf {
    if slot == 0 {
        return path.to_owned();
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{slot}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{slot}"),
    };
    path.with_file_name(name)
}

#[derive(Serialize, Deserialize, Default, Debug)]
struct LockRecord {
    token: FencingToken,
    holder: String,
    #[serde(default)]
    pid: u32,
    #[serde(default)]
    acquired_unix_ms: u64,
    /// A switchover's candidate, which alone may take the lock until the use-by.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    reserved_for: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    reserved_until_unix_ms: u64,
    /// The holder named is a shared one (`--mode shared`), maybe among others.
    #[serde(default, skip_serializing_if = "is_false")]
    shared: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl LockRecord {
    /// How long the lock is still reserved for a candidate other than `identity`.
    fn reserved_against(&self, identity: &str, now_ms: u64) -> Option<Duration> {
        let other = !self.reserved_for.is_empty() && self.reserved_for != identity;
        (other && now_ms < self.reserved_until_unix_ms)
            .then(|| Duration::from_millis(self.reserved_until_unix_ms - now_ms))
    }
}

pub struct FileTransport {
    path: PathBuf,
    identity: String,
    ttl: Duration,
    mode: LockMode,
    /// The record's holder and how it held, as last read.
    observed: Option<(Holder, Mode)>,
    held: Option<File>,
    waiter: Option<oneshot::Receiver<std::io::Result<File>>>,
    /// What the waiter delivered while `wait_for_change` was listening.
    arrived: Option<std::io::Result<File>>,
    /// This candidate's own file among the candidates', locked while it runs.
    registered: Option<(PathBuf, File)>,
    /// Until when the lock is reserved for another candidate (a switchover).
    stay_away_until: Option<tokio::time::Instant>,
}

impl Drop for FileTransport {
    fn drop(&mut self) {
        if let Some((path, _)) = self.registered.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Why the lock file cannot be used, found before the election starts.
#[derive(Debug, thiserror::Error)]
pub enum LockPathError {
    #[error("--file-path {}: the directory {} does not exist; create it first", .path.display(), .dir.display())]
    NoDirectory { path: PathBuf, dir: PathBuf },
    #[error("--file-path {}: {} is not a directory", .path.display(), .dir.display())]
    NotADirectory { path: PathBuf, dir: PathBuf },
    #[error("--file-path {}: cannot create or open it: {cause}", .path.display())]
    Open {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("--file-path {}: cannot create files in {}: {cause}", .path.display(), .dir.display())]
    NotWritable {
        path: PathBuf,
        dir: PathBuf,
        cause: std::io::Error,
    },
}

/// Checks at start that the lock file can be created and opened and that its
/// directory takes the files kept beside it (`.candidates`, `.gate`, `.count`), so
/// that a bad path is one line before the election, not a retry loop. No directory
/// is created: a missing one is an error.
pub fn check_lock_path(path: &Path) -> Result<(), LockPathError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let (path_buf, dir_buf) = (path.to_owned(), dir.to_owned());
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(LockPathError::NotADirectory {
                path: path_buf,
                dir: dir_buf,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LockPathError::NoDirectory {
                path: path_buf,
                dir: dir_buf,
            })
        }
        Err(cause) => {
            return Err(LockPathError::Open {
                path: path_buf,
                cause,
            })
        }
    }
    open_lock_file(path).map_err(|cause| LockPathError::Open {
        path: path.to_owned(),
        cause,
    })?;
    writable(dir).map_err(|cause| LockPathError::NotWritable {
        path: path_buf,
        dir: dir_buf,
        cause,
    })
}

/// Whether this process may create files in `dir` (access(2) with W_OK: the
/// permission bits, and a read-only mount even for root).
fn writable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: access(2) reads a NUL-terminated path that lives across the call.
    match unsafe { libc::access(c.as_ptr(), libc::W_OK) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn open_lock_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Reads the record from offset 0, whatever the descriptor's cursor says.
fn read_record(file: &File) -> LockRecord {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        match file.read_at(&mut chunk, bytes.len() as u64) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            // A torn or unreadable record reads as "nobody known"; the lock is the truth.
            Err(_) => return LockRecord::default(),
        }
        if bytes.len() > 64 * 1024 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default()
}

/// `<lock file><suffix>`: the gate (`.gate`) and the counter's lock (`.count`).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Takes the lock file the blocking way (the waiter thread): a writer holds the gate
/// while it waits, so no new shared holder gets in meanwhile; a shared candidate
/// passes the gate first. The gate is let go of once the lock is ours.
fn lock_blocking(path: &Path, shared: bool) -> std::io::Result<File> {
    let gate = open_lock_file(&beside(path, ".gate"))?;
    let file = open_lock_file(path)?;
    if shared {
        gate.lock_shared()?;
        file.lock_shared()?;
    } else {
        gate.lock()?;
        file.lock()?;
    }
    drop(gate);
    Ok(file)
}

/// One try at the lock file, never waiting: `None` while it is taken, or, for a
/// shared candidate, while a writer waits at the gate.
fn try_lock(path: &Path, shared: bool) -> std::io::Result<Option<File>> {
    let got = |r: Result<(), TryLockError>| match r {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    };
    let file = open_lock_file(path)?;
    if !shared {
        return Ok(got(file.try_lock())?.then_some(file));
    }
    let gate = open_lock_file(&beside(path, ".gate"))?;
    if !got(gate.try_lock_shared())? {
        return Ok(None);
    }
    Ok(got(file.try_lock_shared())?.then_some(file))
}

/// The counter's lock, for a shared holder's read-modify-write of the record (held
/// for that alone: never while waiting for anything else).
fn lock_counter(path: &Path) -> std::io::Result<File> {
    let counter = open_lock_file(&beside(path, ".count"))?;
    counter.lock()?;
    Ok(counter)
}

fn read_record_at(path: &Path) -> LockRecord {
    match File::open(path) {
        Ok(f) => read_record(&f),
        Err(_) => LockRecord::default(),
    }
}

fn write_record(file: &File, record: &LockRecord) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    // One positioned write, then cut what a longer old record left behind: a reader
    // sees a whole first line either way.
    file.write_all_at(&line, 0)?;
    file.set_len(line.len() as u64)
}

/// True when `path` still names the inode `file` has open (nobody deleted or
/// replaced the lock file under us, which would let another process lock a new one).
fn still_the_lock_file(file: &File, path: &Path) -> std::io::Result<bool> {
    let ours = file.metadata()?;
    let found = match std::fs::metadata(path) {
        Ok(now) => Some((now.ino(), now.dev())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    Ok(Seen::of(found, (ours.ino(), ours.dev())).still_ours())
}

/// The lock file as a [`super::Backend`].
pub type FileBackend = Protocol<FileTransport>;

impl FileBackend {
    pub fn new(path: PathBuf, lease: &Candidacy) -> Self {
        Protocol::over(FileTransport::new(path, lease))
    }
}

impl FileTransport {
    /// A failed file operation, naming the lock file (a retried error must say where).
    fn io(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> BackendError {
        let path = self.path.clone();
        move |e| BackendError::Io {
            op,
            source: std::io::Error::new(e.kind(), format!("{}: {e}", path.display())),
        }
    }

    pub fn new(path: PathBuf, lease: &Candidacy) -> Self {
        FileTransport {
            path,
            identity: lease.identity.to_owned(),
            ttl: lease.timing.ttl,
            mode: lease.mode,
            observed: None,
            held: None,
            waiter: None,
            arrived: None,
            registered: None,
            stay_away_until: None,
        }
    }

    /// `<lock file>.candidates`.
    fn candidates_dir(&self) -> PathBuf {
        let mut dir = self.path.clone().into_os_string();
        dir.push(".candidates");
        PathBuf::from(dir)
    }

    /// Puts this candidate's own locked file among the candidates' (once).
    fn register(&mut self) -> std::io::Result<()> {
        if self.registered.is_some() {
            return Ok(());
        }
        let dir = self.candidates_dir();
        // Beside the lock file, whose directory exists (checked at start): never a
        // directory above it.
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let path = dir.join(format!("{:016x}", rand::random::<u64>()));
        let file = File::create(&path)?;
        file.lock()?;
        file.write_all_at(self.identity.as_bytes(), 0)?;
        self.registered = Some((path, file));
        Ok(())
    }

    /// Bookkeeping once the lock is ours: bump the counter and name ourselves.
    fn take(&mut self, file: File) -> Result<Campaign, BackendError> {
        if !still_the_lock_file(&file, &self.path).map_err(self.io("campaign"))? {
            // We locked a file that was unlinked meanwhile: worthless, try again.
            return Ok(Campaign::Held(None));
        }
        let shared = self.shared();
        let _counter = match shared {
            true => Some(lock_counter(&self.path).map_err(self.io("campaign"))?),
            false => None,
        };
        let previous = read_record(&file);
        if let Some(left) = previous.reserved_against(&self.identity, unix_ms()) {
            // Left to another candidate by a switchover: let go at once (dropping
            // the file unlocks it) and stay away until the reservation ends.
            drop(file);
            self.stay_away_until = Some(tokio::time::Instant::now() + left);
            return Ok(Campaign::Held(None));
        }
        let token = previous.token + 1;
        let record = LockRecord {
            token,
            holder: self.identity.clone(),
            pid: std::process::id(),
            acquired_unix_ms: unix_ms(),
            shared,
            ..LockRecord::default()
        };
        write_record(&file, &record).map_err(self.io("campaign"))?;
        self.held = Some(file);
        let mine = Holder {
            identity: self.identity.clone(),
            token: Some(token),
        };
        self.observed = Some((mine, self.mode.held_as()));
        Ok(Campaign::Acquired { token })
    }

    fn holder(&mut self) -> Option<Holder> {
        let record = read_record_at(&self.path);
        let mode = if record.shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        let holder = (!record.holder.is_empty()).then_some(Holder {
            identity: record.holder,
            token: Some(record.token),
        });
        self.observed = holder.clone().map(|h| (h, mode));
        holder
    }

    fn start_waiter(&mut self) {
        let (tx, rx) = oneshot::channel();
        let (path, shared) = (self.path.clone(), self.shared());
        std::thread::spawn(move || {
            let _ = tx.send(lock_blocking(&path, shared));
        });
        self.waiter = Some(rx);
    }

    fn shared(&self) -> bool {
        self.mode == LockMode::Shared
    }

    /// Unlocks our own lock, if held, emptying the holder (and reserving the lock for
    /// `to` for a ttl).
    fn release_for(&mut self, to: Option<&str>) -> Result<(), BackendError> {
        // A lock the waiter took, or may still take, is let go of too (a candidate
        // of several slots withdraws from the ones it does not hold this way).
        self.arrived = None;
        self.waiter = None;
        if let Some(file) = self.held.take() {
            let _counter = match self.shared() {
                true => Some(lock_counter(&self.path).map_err(self.io("release"))?),
                false => None,
            };
            let mut record = read_record(&file);
            // A shared holder leaves another shared holder's name in place.
            if !self.shared() || record.holder == self.identity {
                record.holder.clear();
            }
            if let Some(to) = to {
                record.reserved_for = to.to_owned();
                record.reserved_until_unix_ms = unix_ms() + self.ttl.as_millis() as u64;
            }
            let written = write_record(&file, &record);
            // Dropping the file closes our only descriptor and with it the lock.
            drop(file);
            written.map_err(self.io("release"))?;
        }
        Ok(())
    }
}

impl Transport for FileTransport {
    /// Nothing is heard of the lock: it cannot change behind its holder's back.
    type News = Infallible;
    type Look = Infallible;

    fn name(&self) -> &'static str {
        "file"
    }

    /// A shared holder has no successor to name; an exclusive one hands over.
    fn no_switchover(&self) -> Option<&'static str> {
        self.shared().then_some("shared")
    }

    async fn own_news(&mut self) -> Option<Infallible> {
        None
    }

    fn on_own(&mut self, _now: tokio::time::Instant, news: Infallible) -> Own<Infallible> {
        match news {}
    }

    async fn own_look(&mut self, look: Infallible) -> bool {
        match look {}
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        self.register().map_err(self.io("campaign"))?;
        if let Some(file) = self.held.take() {
            return self.take(file);
        }
        if let Some(until) = self.stay_away_until {
            let reserved = read_record_at(&self.path)
                .reserved_against(&self.identity, unix_ms())
                .is_some();
            if reserved && tokio::time::Instant::now() < until {
                return Ok(Campaign::Held(self.holder()));
            }
            self.stay_away_until = None;
        }
        match self.arrived.take() {
            Some(Ok(file)) => return self.take(file),
            Some(Err(e)) => return Err(self.io("campaign")(e)),
            None => {}
        }
        if let Some(waiter) = self.waiter.as_mut() {
            return match waiter.try_recv() {
                Ok(Ok(file)) => {
                    self.waiter = None;
                    self.take(file)
                }
                Ok(Err(e)) => {
                    self.waiter = None;
                    Err(self.io("campaign")(e))
                }
                Err(oneshot::error::TryRecvError::Empty) => Ok(Campaign::Held(self.holder())),
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.waiter = None;
                    Ok(Campaign::Held(self.holder()))
                }
            };
        }
        match try_lock(&self.path, self.shared()).map_err(self.io("campaign"))? {
            Some(file) => self.take(file),
            None => {
                self.start_waiter();
                Ok(Campaign::Held(self.holder()))
            }
        }
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        match &self.held {
            Some(file) if still_the_lock_file(file, &self.path).map_err(self.io("renew"))? => {
                Ok(Renewal::Renewed)
            }
            _ => Ok(Renewal::Lost),
        }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.release_for(None)
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.release_for(Some(to))
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        let dir = self.candidates_dir();
        let entries = std::fs::read_dir(&dir).map_err(self.io("candidates"))?;
        let mut live = Vec::new();
        for entry in entries.flatten() {
            let Ok(file) = File::open(entry.path()) else {
                continue;
            };
            match file.try_lock_shared() {
                Err(TryLockError::WouldBlock) => {
                    let mut identity = String::new();
                    let _ = std::io::Read::read_to_string(&mut &file, &mut identity);
                    live.push(identity);
                }
                // Nobody holds it: its candidate is gone.
                Ok(()) => {
                    let _ = std::fs::remove_file(entry.path());
                }
                Err(TryLockError::Error(_)) => {}
            }
        }
        Ok(Some(live))
    }

    async fn wait(&mut self, max: Duration) -> Waited {
        match self.waiter.as_mut() {
            Some(waiter) => {
                // The waiter resolving (with the lock or an error) is the change.
                if let Ok(answer) = tokio::time::timeout(max, waiter).await {
                    self.waiter = None;
                    self.arrived =
                        Some(answer.unwrap_or_else(|_| {
                            Err(std::io::Error::other("lock waiter vanished"))
                        }));
                }
            }
            None => {
                let wait = match self.stay_away_until {
                    Some(until) => {
                        max.min(until.saturating_duration_since(tokio::time::Instant::now()))
                    }
                    None => max,
                };
                tokio::time::sleep(wait).await
            }
        }
        Waited::Wake(Wake::Changed)
    }

    fn tenure_hold(&self) -> Option<std::os::fd::OwnedFd> {
        // A duplicate shares the open file description, and with it the lock.
        let file = self.held.as_ref()?.try_clone().ok()?;
        Some(file.into())
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        let observed = self.observed.clone()?;
        (observed.1 == Mode::Shared).then(|| crate::status::Slots::one_lock([observed]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_keeps_only_the_others_away_and_only_until_its_use_by() {
        let record = LockRecord {
            reserved_for: "b".into(),
            reserved_until_unix_ms: 1_000,
            ..LockRecord::default()
        };
        assert_eq!(
            record.reserved_against("a", 400),
            Some(Duration::from_millis(600))
        );
        assert_eq!(record.reserved_against("b", 400), None);
        assert_eq!(record.reserved_against("a", 1_000), None);
        assert_eq!(LockRecord::default().reserved_against("a", 0), None);
    }
}
