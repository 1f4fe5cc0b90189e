//! Exec mode (`leasekeeper run [flags] -- CMD ARGS…`, DESIGN §10): CMD runs only while
//! this candidate leads.
//!
//! The supervisor is a publisher: it reads [`Status`] and starts CMD when a tenure
//! begins, stops it when the tenure ends. CMD is not the sidecar's own child but runs
//! under a *guard* process (this binary again, [`guard`], started while the candidate
//! follows, so that a claim does not wait for it), which is told every new claim
//! deadline over a socket and enforces it by itself:
//!
//! - a stop (step-down, shutdown, release): SIGTERM to all of CMD at once, SIGKILL
//!   after `--kill-grace`, but never later than the deadline less a kill budget;
//! - a deadline that comes near without being extended (renewals failing, or the
//!   sidecar frozen by SIGSTOP, alone or with its whole job): SIGTERM, then SIGKILL
//!   at the deadline less the budget;
//! - the sidecar gone (killed: the socket closes): the same as a stop.
//!
//! The guard starts CMD only once it holds a deadline. Where the host allows it, CMD
//! runs in a PID namespace of its own under a small init ([`contain`]) that ends every
//! process of CMD, then itself, when the guard dies: a kill -9 of the guard, of the
//! sidecar and the guard at once, or an OOM kill leaves nothing behind. The sidecar
//! holds a pidfd of that init, so it never takes the guard's end for CMD's end without
//! proof: a guard that vanishes is "CMD's end proven" only once that pidfd says the
//! namespace is gone; without a namespace it is unproven, and the sidecar stops
//! leading and exits (see [`Ended::GuardLost`]).
//!
//! On a store whose lease is an open descriptor (the file lock, freed by the kernel
//! the instant its last copy closes), the guard and CMD's init each hold a copy of it
//! ([`crate::status::TenureHold`], sent to the guard with the tenure): the guard
//! until CMD is gone, the init until every other process of its namespace has been
//! reaped. The lease then outlives every process of CMD whatever is killed, where a
//! store with a ttl keeps it by the ttl.
//!
//! The elector releases the lease only after CMD is proven gone
//! ([`Supervisor::stopped`] is one of the elector's `must_stop` signals) or the
//! claim's deadline has passed. CMD gets `LEASEKEEPER_FENCING_TOKEN`,
//! `LEASEKEEPER_ELECTION`, `LEASEKEEPER_IDENTITY`, and its slot of the election
//! (`LEASEKEEPER_SLOT` of `LEASEKEEPER_HOLDERS`, `LEASEKEEPER_MODE`); its stdout and stderr are the
//! sidecar's, its stdin is empty.

mod contain;
mod guard;

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};

pub use guard::{guard_main, GUARD_ARG};

use crate::clock::to_monotonic_ns;
use crate::settings::{bad, duration_or, parse_bool, parse_duration, ConfigError};
use crate::status::{FencingToken, Role, Status};

/// The flags of `run`, declared by its command alone (`leasekeeper run --help` lists
/// them, `leasekeeper --help` does not).
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Exec mode")]
pub struct Args {
    /// Longest time from SIGTERM to SIGKILL of CMD, never past the claim's deadline [default: 10s].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_KILL_GRACE",
        allow_hyphen_values = true
    )]
    pub kill_grace: Option<String>,
    /// Campaign again when CMD exits by itself, instead of exiting with its code.
    #[arg(long, value_name = "BOOL", env = "LEASEKEEPER_RESTART", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub restart: Option<String>,
    /// Exit 75 when no slot was taken within this time; 0: one try [default: wait for ever].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_WAIT_TIMEOUT",
        allow_hyphen_values = true
    )]
    pub wait_timeout: Option<String>,
}

/// The long names of `run`'s own flags (also its keys of the `--config` file).
pub const FLAGS: [&str; 3] = ["kill-grace", "restart", "wait-timeout"];

/// `--wait-timeout`: a duration, or 0 (one try).
fn wait_timeout(raw: &str) -> Result<Duration, ConfigError> {
    let zero =
        raw.trim() == "0" || humantime::parse_duration(raw.trim()).is_ok_and(|d| d.is_zero());
    if zero {
        return Ok(Duration::ZERO);
    }
    parse_duration("--wait-timeout", raw)
}

/// `leasekeeper run`'s exit code when `--wait-timeout` passed without a slot taken
/// (EX_TEMPFAIL: try again later).
pub const GAVE_UP: u8 = 75;

impl Args {
    /// Whether `command` declares these flags (`run`'s does, the sidecar's not).
    pub fn declared_in(command: &clap::Command) -> bool {
        command
            .get_arguments()
            .any(|a| a.get_long().is_some_and(|long| FLAGS.contains(&long)))
    }

    /// The settings for CMD, or `None` without `run`; a `run`-only flag without
    /// `run` is bad input.
    pub fn settings(
        &self,
        cmd: Option<Vec<OsString>>,
    ) -> Result<Option<ExecSettings>, ConfigError> {
        let Some(cmd) = cmd else {
            if self.kill_grace.is_some() || self.restart.is_some() || self.wait_timeout.is_some() {
                return Err(bad(
                    "--kill-grace, --restart and --wait-timeout are for `leasekeeper run [flags] -- CMD` only",
                ));
            }
            return Ok(None);
        };
        Ok(Some(ExecSettings {
            cmd,
            kill_grace: duration_or(
                "--kill-grace",
                self.kill_grace.as_deref(),
                Duration::from_secs(10),
            )?,
            restart: parse_bool("--restart", self.restart.as_deref())?,
            wait_timeout: self.wait_timeout.as_deref().map(wait_timeout).transpose()?,
        }))
    }
}

/// What `run` needs beyond the usual settings.
#[derive(Clone, Debug)]
pub struct ExecSettings {
    /// CMD and its arguments (at least CMD).
    pub cmd: Vec<OsString>,
    /// SIGTERM to SIGKILL, at most (the deadline may cut it short).
    pub kill_grace: Duration,
    /// Campaign again after CMD exits by itself (else exit with its code).
    pub restart: bool,
    /// Give up when no tenure began within this time (`Some(0)`: after one round).
    pub wait_timeout: Option<Duration>,
}

/// Resolves when `run --wait-timeout` should give up: no tenure began, and either the
/// first round against the store was answered and `wait` has passed, or `wait` plus
/// `unanswered` passed without an answer. Never resolves once a tenure began.
pub async fn gave_up_waiting(
    mut status: watch::Receiver<Status>,
    wait: Duration,
    unanswered: Duration,
) {
    let start = tokio::time::Instant::now();
    let (limit, hard) = (start + wait, start + wait + unanswered);
    loop {
        let (led, ready) = {
            let s = status.borrow_and_update();
            (s.own_tenures > 0, s.ready)
        };
        if led {
            return std::future::pending().await;
        }
        let now = tokio::time::Instant::now();
        if (ready && now >= limit) || now >= hard {
            return;
        }
        let until = if ready { limit } else { hard };
        tokio::select! {
            changed = status.changed() => {
                if changed.is_err() {
                    return std::future::pending().await;
                }
            }
            () = tokio::time::sleep_until(until) => {}
        }
    }
}

/// How a run of CMD ended, when the tenure did not end first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// CMD exited by itself with this code (128 + signal when a signal ended it).
    ByItself(i32),
    /// The guard stopped CMD because the claim's deadline came near unextended.
    Deadline,
    /// The guard vanished without its verdict (killed). `proven`: CMD's namespace is
    /// known to be gone with it (or CMD never started). Unproven, CMD's processes
    /// may still run, and this sidecar must not lead again.
    GuardLost { proven: bool },
}

/// How long before the claim's deadline CMD's group must be gone: a twentieth of the
/// claim, at least 20 ms.
pub fn kill_budget(claim: Duration) -> Duration {
    (claim / 20).max(Duration::from_millis(20))
}

pub struct Supervisor {
    settings: ExecSettings,
    status: watch::Receiver<Status>,
    stopped: watch::Sender<bool>,
    ended: mpsc::Sender<Ended>,
    /// Kill budget before the deadline.
    budget: Duration,
    /// How long before the deadline an unextended claim gets CMD a SIGTERM.
    warn_before: Duration,
}

impl Supervisor {
    /// `claim` is the claim length, `quiet` the longest a healthy renewal may take
    /// (renew interval plus backend timeout): a claim renewed in time never comes
    /// near enough to its deadline to stop CMD.
    pub fn new(
        settings: ExecSettings,
        status: watch::Receiver<Status>,
        claim: Duration,
        quiet: Duration,
    ) -> (Supervisor, watch::Receiver<bool>, mpsc::Receiver<Ended>) {
        let (stopped, stopped_rx) = watch::channel(true);
        let (ended, ended_rx) = mpsc::channel(4);
        let budget = kill_budget(claim);
        let warn_before = settings
            .kill_grace
            .min(claim.saturating_sub(quiet + budget));
        (
            Supervisor {
                settings,
                status,
                stopped,
                ended,
                budget,
                warn_before,
            },
            stopped_rx,
            ended_rx,
        )
    }

    fn leading(&self) -> Option<(FencingToken, tokio::time::Instant)> {
        let s = self.status.borrow();
        match (&s.role, &s.claim) {
            (Role::Leader, Some(c)) => Some((c.token, c.deadline)),
            _ => None,
        }
    }

    /// Runs until the status channel closes. While it follows, a guard waits started
    /// for the next tenure ([`Supervisor::spare`]): a claim starts CMD without first
    /// starting this binary again.
    pub async fn run(mut self) {
        announce_containment().await;
        let mut spare_after = Duration::ZERO;
        loop {
            let Some((token, deadline, spare)) = self.next_tenure(spare_after).await else {
                return;
            };
            let (ended, gone) = self.one_run(token, deadline, spare).await;
            // Unproven, the release waits for the claim's deadline instead.
            if gone {
                let _ = self.stopped.send_replace(true);
            }
            if let Some(ended) = ended {
                let _ = self.ended.send(ended).await;
            }
            // Never twice in one tenure: wait for it to end.
            while self.leading().is_some_and(|(t, _)| t == token) {
                if self.status.changed().await.is_err() {
                    return;
                }
            }
            spare_after = SPARE_AFTER;
        }
    }

    /// Waits for a tenure; starts the guard for it `after` from now if none began by
    /// then. `None` once the status channel closes.
    async fn next_tenure(
        &mut self,
        after: Duration,
    ) -> Option<(FencingToken, tokio::time::Instant, Option<Spare>)> {
        let spare_at = tokio::time::Instant::now() + after;
        let mut spare = None;
        let mut tried = false;
        loop {
            if let Some((token, deadline)) = self.leading() {
                return Some((token, deadline, spare));
            }
            tokio::select! {
                changed = self.status.changed() => changed.ok()?,
                () = tokio::time::sleep_until(spare_at), if !tried => {
                    tried = true;
                    spare = self.spare();
                }
            }
        }
    }

    /// One run of CMD under a guard, for the tenure with `token`: how it ended
    /// (`None` when the tenure ended first and CMD was stopped) and whether CMD is
    /// proven gone.
    async fn one_run(
        &mut self,
        token: FencingToken,
        deadline: tokio::time::Instant,
        spare: Option<Spare>,
    ) -> (Option<Ended>, bool) {
        let started = match spare.map(|s| self.start(s, token, deadline)) {
            Some(Ok(started)) => Ok(started),
            // No spare, or it is gone: a guard of its own for this tenure.
            _ => self
                .spawn_guard()
                .and_then(|fresh| self.start(fresh, token, deadline)),
        };
        let (mut guard, channel) = match started {
            Ok(g) => g,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the command's guard");
                return (Some(Ended::ByItself(127)), true);
            }
        };
        let _ = self.stopped.send_replace(false);
        let (out, pipe) = channel.into_split();
        let (tx, events) = mpsc::channel(8);
        tokio::spawn(listen(out, tx));
        let talk = self
            .converse(token, deadline, events, pipe, &mut guard)
            .await;
        if talk.said.is_none() {
            let _ = guard.wait().await;
        }
        let gone = talk.said.is_some() || talk.run.proves_the_end().await;
        if gone {
            tracing::info!(
                token,
                guard = talk.said.as_deref().unwrap_or("killed"),
                "the command is gone"
            );
        }
        let ended = match talk.said.as_deref() {
            Some(_) if talk.stop_sent => None,
            Some("deadline") => Some(Ended::Deadline),
            Some(said) => said
                .strip_prefix("exited ")
                .map(|code| Ended::ByItself(code.trim().parse().unwrap_or(1))),
            None if talk.stop_sent && gone => None,
            None => Some(Ended::GuardLost { proven: gone }),
        };
        (ended, gone)
    }

    /// A guard started for the next tenure, none if it cannot be (the claim then
    /// tries again and says why).
    fn spare(&self) -> Option<Spare> {
        self.spawn_guard().ok()
    }

    /// Starts a guard (this binary again) with CMD, in a process group of its own
    /// (CMD's too): a stop of the sidecar's job leaves the guard awake to end CMD by
    /// the deadline. It waits for its tenure ([`Supervisor::start`]).
    fn spawn_guard(&self) -> std::io::Result<Spare> {
        let (identity, election, mode) = {
            let s = self.status.borrow();
            (s.identity.clone(), s.election.clone(), s.mode)
        };
        let exe = std::env::current_exe()
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot find this binary: {e}")))?;
        let mut command = tokio::process::Command::new(exe);
        command
            .arg(GUARD_ARG)
            .arg(self.settings.kill_grace.as_millis().to_string())
            .arg(self.budget.as_millis().to_string())
            .arg(self.warn_before.as_millis().to_string())
            .arg("--")
            .args(&self.settings.cmd)
            .env("LEASEKEEPER_ELECTION", election)
            .env("LEASEKEEPER_IDENTITY", identity)
            .env("LEASEKEEPER_MODE", mode.as_str())
            .process_group(0)
            .kill_on_drop(false);
        // The guard's stdin is one end of a socket pair: the tenure and its deadlines
        // go in, its verdict comes back, and CMD keeps the sidecar's stdout and stderr.
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        command.stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )));
        let guard = command.spawn();
        // Our copy of the guard's end must go, or its exit would never be seen.
        command.stdin(std::process::Stdio::null());
        Ok(Spare {
            guard: guard?,
            channel: ours,
        })
    }

    /// Gives the guard `spare` the tenure with `token`: CMD's environment of it, the
    /// lease's descriptor where the store has one, and the first deadline, in one
    /// record (the descriptor attached), so the guard has them all before it starts
    /// CMD. An error if the guard is gone, and never once the record is sent: a
    /// guard that has it starts CMD, so the claim must not start another.
    fn start(
        &self,
        mut spare: Spare,
        token: FencingToken,
        deadline: tokio::time::Instant,
    ) -> std::io::Result<(tokio::process::Child, tokio::net::UnixStream)> {
        if spare.guard.try_wait()?.is_some() {
            return Err(std::io::Error::other("the guard started ahead has ended"));
        }
        let (slot, holders) = {
            let s = self.status.borrow();
            (s.slots.own.unwrap_or(0), s.slots.count())
        };
        let hold = self.status.borrow().tenure_hold.upgrade();
        let mut record = format!(
            "E LEASEKEEPER_FENCING_TOKEN={token}\nE LEASEKEEPER_SLOT={slot}\nE LEASEKEEPER_HOLDERS={holders}\n"
        );
        if hold.is_some() {
            record.push_str("H\n");
        }
        record.push_str(&format!("D {}\n", to_monotonic_ns(deadline)));
        spare.channel.set_nonblocking(true)?;
        let channel = tokio::net::UnixStream::from_std(spare.channel)?;
        let fd = hold.as_ref().map(|h| h.as_raw_fd());
        // The last thing that can fail: on a fresh socket the record fits whole.
        contain::send_record(channel.as_raw_fd(), record.as_bytes(), fd)?;
        drop(hold);
        Ok((spare.guard, channel))
    }

    /// Tells the guard every new deadline of the tenure, and to stop when it ends,
    /// until the guard is gone. A guard still there when it should have killed CMD
    /// (the last deadline less the kill budget) is killed: in a namespace, its init
    /// and CMD go with it, and the pidfd proves it.
    async fn converse(
        &mut self,
        token: FencingToken,
        mut last: tokio::time::Instant,
        mut events: mpsc::Receiver<FromGuard>,
        mut pipe: OwnedWriteHalf,
        guard: &mut tokio::process::Child,
    ) -> Talk {
        let mut talk = Talk {
            said: None,
            stop_sent: false,
            run: Run::Unknown,
        };
        let mut status_open = true;
        let mut guard_killed = false;
        loop {
            let overdue = last.checked_sub(self.budget).unwrap_or(last);
            tokio::select! {
                // What the guard said first: a verdict may already be waiting.
                biased;
                event = events.recv() => match event {
                    // The verdict is the guard's last word, written once nothing of
                    // CMD is left: the guard's own end adds nothing to wait for.
                    Some(event) => if talk.take(event) {
                        return talk;
                    },
                    // The guard is gone (its socket closed).
                    None => return talk,
                },
                () = tokio::time::sleep_until(overdue), if talk.run.provable() && !guard_killed => {
                    guard_killed = true;
                    if matches!(guard.try_wait(), Ok(None)) {
                        tracing::warn!(token, "the command's guard is still there at the claim's deadline; killing it");
                        let _ = guard.start_kill();
                        // A frozen init would not take its parent's death: it goes too.
                        talk.run.kill_init();
                    }
                }
                changed = self.status.changed(), if status_open => {
                    if changed.is_err() {
                        status_open = false;
                    }
                    match self.leading() {
                        Some((t, d)) if t == token && status_open => {
                            if d != last && !talk.stop_sent {
                                last = d;
                                let _ = pipe
                                    .write_all(format!("D {}\n", to_monotonic_ns(d)).as_bytes())
                                    .await;
                            }
                        }
                        _ => {
                            if !talk.stop_sent {
                                talk.stop_sent = true;
                                tracing::info!(token, "stopping the command: the tenure ended");
                                let _ = pipe.write_all(b"T\n").await;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Says at start, in one line, which containment this host gives CMD.
async fn announce_containment() {
    let probe = match std::env::current_exe() {
        Ok(exe) => tokio::process::Command::new(exe)
            .args([GUARD_ARG, "--probe"])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .await
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()),
        Err(e) => Err(e),
    };
    match probe.as_deref() {
        Ok("pid-namespace") => tracing::info!(
            "exec mode: the command runs in a PID namespace of its own; when its guard ends, every process of it ends"
        ),
        Ok("user-namespace") => tracing::info!(
            "exec mode: the command runs in a user and PID namespace of its own; when its guard ends, every process of it ends"
        ),
        other => {
            let why = match other {
                Ok(line) => line.strip_prefix("none: ").unwrap_or(line).to_owned(),
                Err(e) => format!("cannot probe: {e}"),
            };
            if crate::init::under_own_init() {
                // The container's PID namespace is ours: it ends when this sidecar does.
                tracing::info!(
                    "exec mode: no PID namespace of its own for the command ({why}), but this sidecar is its container's PID 1: when the sidecar ends, every process of the container ends"
                );
                return;
            }
            tracing::warn!(
                "exec mode: no PID namespace for the command ({why}): processes it starts can outlive the claim if its guard is killed (kill -9, an OOM kill); see docs/operations.md"
            );
        }
    }
}

/// How long after a tenure ends its candidate starts the guard for the next one: not
/// during the handover it takes part in, nor when it is stopping.
const SPARE_AFTER: Duration = Duration::from_millis(200);

/// A guard started, waiting for its tenure ([`Supervisor::start`]); dropped, it
/// sees its socket close and ends without starting CMD.
struct Spare {
    guard: tokio::process::Child,
    channel: std::os::unix::net::UnixStream,
}

/// What came back from the guard by the time it was gone.
struct Talk {
    /// Its verdict line (`exited <code>`, `stopped`, `deadline`), if it wrote one.
    said: Option<String>,
    stop_sent: bool,
    run: Run,
}

impl Talk {
    /// Takes what the guard said; true for its verdict.
    fn take(&mut self, event: FromGuard) -> bool {
        match event {
            FromGuard::Started(pidfd) => self.run = Run::Started(pidfd),
            FromGuard::NotStarted => self.run = Run::NotStarted,
            FromGuard::Line(line) => {
                let line = line.trim();
                if line.starts_with("exited ") || line == "stopped" || line == "deadline" {
                    self.said = Some(line.to_owned());
                }
            }
        }
        self.said.is_some()
    }
}

/// What the guard said about how CMD runs.
enum Run {
    /// Nothing yet: CMD has not started (the guard tells before it starts CMD).
    Unknown,
    NotStarted,
    /// Started, with a pidfd of its namespace's init where one proves its end.
    Started(Option<OwnedFd>),
}

impl Run {
    /// SIGKILL to the init of CMD's namespace (the kernel then ends the rest), when
    /// there is one.
    fn kill_init(&self) {
        if let Run::Started(Some(pidfd)) = self {
            // SAFETY: pidfd_send_signal(2) on our own pidfd; errors (gone) are fine.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd.as_raw_fd(),
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
        }
    }

    /// Whether the end of CMD can be proven (a pidfd, or nothing started).
    fn provable(&self) -> bool {
        !matches!(self, Run::Started(None))
    }

    /// Once the guard is gone without a verdict: whether CMD is proven gone. The
    /// init of CMD's namespace has the guard's death as its own, and the kernel
    /// ends the whole namespace before the init's pidfd turns readable.
    async fn proves_the_end(self) -> bool {
        match self {
            Run::Unknown | Run::NotStarted => true,
            Run::Started(None) => false,
            // SAFETY: the AsyncFd owns the pidfd from here until it drops.
            Run::Started(Some(pidfd)) => match unsafe { tokio::io::unix::AsyncFd::register(pidfd) }
            {
                Ok(fd) => fd.readable().await.is_ok(),
                Err(_) => false,
            },
        }
    }
}

/// One thing the guard said, in order.
enum FromGuard {
    Started(Option<OwnedFd>),
    NotStarted,
    Line(String),
}

/// Reads the guard's socket: its record, then its lines; the channel closes when
/// the guard's end of the socket does.
async fn listen(out: OwnedReadHalf, events: mpsc::Sender<FromGuard>) {
    let first = match first_record(&out).await {
        Ok(Some(record)) => record,
        _ => return,
    };
    if events.send(first).await.is_err() {
        return;
    }
    let mut lines = tokio::io::BufReader::new(out).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if events.send(FromGuard::Line(line)).await.is_err() {
            return;
        }
    }
}

/// The guard's two-byte record with the descriptor attached to it; `None` at the
/// end of the stream.
async fn first_record(out: &OwnedReadHalf) -> std::io::Result<Option<FromGuard>> {
    let mut got = Vec::with_capacity(2);
    let mut pidfd = None;
    while got.len() < 2 {
        out.readable().await?;
        let mut buf = [0u8; 2];
        let want = 2 - got.len();
        let sock: &tokio::net::UnixStream = out.as_ref();
        match sock.try_io(tokio::io::Interest::READABLE, || {
            contain::recv_record(sock.as_raw_fd(), &mut buf[..want])
        }) {
            Ok((0, _)) => return Ok(None),
            Ok((n, fd)) => {
                got.extend_from_slice(&buf[..n]);
                pidfd = pidfd.or(fd);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(Some(match got.as_slice() {
        b"P\n" => FromGuard::Started(pidfd),
        b"X\n" => FromGuard::NotStarted,
        // `N` and anything unknown: started, without proof of its end.
        _ => FromGuard::Started(None),
    }))
}
