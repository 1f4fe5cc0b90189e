//! Exec mode (`leasekeeper run [flags] -- CMD ARGS…`, DESIGN §10): CMD runs only while
//! this candidate leads.
//!
//! The supervisor is a publisher: it reads [`Status`] and starts CMD when a tenure
//! begins, stops it when the tenure ends. CMD is not the sidecar's own child but the
//! child of a small *guard* process (this binary again, `__exec-guard`), which is told
//! every new claim deadline over a pipe and enforces it by itself:
//!
//! - a stop (step-down, shutdown, release): SIGTERM to CMD's process group at once,
//!   SIGKILL after `--kill-grace`, but never later than the deadline less a kill budget;
//! - a deadline that comes near without being extended (renewals failing, or the
//!   sidecar frozen by SIGSTOP): SIGTERM, then SIGKILL at the deadline less the budget;
//! - the sidecar gone (killed: the pipe closes): the same as a stop.
//!
//! So CMD's group is gone before the claim's deadline even when the sidecar cannot act,
//! and the guard exits only once the whole group is gone. The elector releases the lease
//! only after the guard has exited ([`Supervisor::stopped`] is one of the elector's
//! `must_stop` signals). CMD runs in its own process group with
//! `LEASEKEEPER_FENCING_TOKEN`, `LEASEKEEPER_ELECTION` and `LEASEKEEPER_IDENTITY`; its
//! stdout and stderr are the sidecar's, its stdin is empty (the guard's stdin is a
//! socket to the sidecar: deadlines in, one verdict line out). If the guard itself is
//! killed, CMD gets SIGKILL (parent-death signal).

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use crate::clock::{monotonic_now_ns, to_monotonic_ns};
use crate::settings::{bad, duration_or, parse_bool, ConfigError};
use crate::status::{FencingToken, Role, Status};

/// The hidden first argument that makes the binary a guard.
pub const GUARD_ARG: &str = "__exec-guard";

/// The flags of `run` (an error without it).
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Exec mode (leasekeeper run [flags] -- CMD)")]
pub struct Args {
    /// `run` only: longest time from SIGTERM to SIGKILL of the command; never past the claim's deadline [default: 10s].
    #[arg(long, env = "LEASEKEEPER_KILL_GRACE", allow_hyphen_values = true)]
    pub kill_grace: Option<String>,
    /// `run` only: campaign again when the command exits by itself, instead of exiting with its code.
    #[arg(long, env = "LEASEKEEPER_RESTART", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub restart: Option<String>,
}

impl Args {
    /// The settings for CMD, or `None` without `run`; a `run`-only flag without
    /// `run` is bad input.
    pub fn settings(
        &self,
        cmd: Option<Vec<OsString>>,
    ) -> Result<Option<ExecSettings>, ConfigError> {
        let Some(cmd) = cmd else {
            if self.kill_grace.is_some() || self.restart.is_some() {
                return Err(bad(
                    "--kill-grace and --restart are for `leasekeeper run [flags] -- CMD` only",
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
}

/// How a run of CMD ended, when the tenure did not end first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// CMD exited by itself with this code (128 + signal when a signal ended it).
    ByItself(i32),
    /// The guard stopped CMD because the claim's deadline came near unextended.
    Deadline,
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

    /// Runs until the status channel closes.
    pub async fn run(mut self) {
        loop {
            let (token, deadline) = loop {
                if let Some(leading) = self.leading() {
                    break leading;
                }
                if self.status.changed().await.is_err() {
                    return;
                }
            };
            let ended = self.one_run(token, deadline).await;
            let _ = self.stopped.send_replace(true);
            if let Some(ended) = ended {
                let _ = self.ended.send(ended).await;
            }
            // Never twice in one tenure: wait for it to end.
            while self.leading().is_some_and(|(t, _)| t == token) {
                if self.status.changed().await.is_err() {
                    return;
                }
            }
        }
    }

    /// One run of CMD under a guard, for the tenure with `token`. `None` when the
    /// tenure ended first (CMD was stopped).
    async fn one_run(
        &mut self,
        token: FencingToken,
        deadline: tokio::time::Instant,
    ) -> Option<Ended> {
        let (mut guard, channel) = match self.spawn_guard(token) {
            Ok(g) => g,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the command's guard");
                return Some(Ended::ByItself(127));
            }
        };
        let _ = self.stopped.send_replace(false);
        let (out, mut pipe) = channel.into_split();
        let verdict = tokio::io::BufReader::new(out).lines();
        let _ = pipe
            .write_all(format!("D {}\n", to_monotonic_ns(deadline)).as_bytes())
            .await;
        tracing::info!(token, "started the command");
        let (said, stop_sent) = self.converse(token, deadline, verdict, pipe).await;
        let _ = guard.wait().await;
        tracing::info!(token, guard = %said, "the command is gone");
        if stop_sent {
            return None;
        }
        match said.split_once(' ') {
            Some(("exited", code)) => Some(Ended::ByItself(code.trim().parse().unwrap_or(1))),
            _ if said == "deadline" => Some(Ended::Deadline),
            _ => None,
        }
    }

    /// Starts the guard (this binary again) with CMD for the tenure with `token`.
    fn spawn_guard(
        &self,
        token: FencingToken,
    ) -> std::io::Result<(tokio::process::Child, tokio::net::UnixStream)> {
        let (identity, election) = {
            let s = self.status.borrow();
            (s.identity.clone(), s.election.clone())
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
            .env("LEASEKEEPER_FENCING_TOKEN", token.to_string())
            .env("LEASEKEEPER_ELECTION", election)
            .env("LEASEKEEPER_IDENTITY", identity)
            .kill_on_drop(false);
        // The guard's stdin is one end of a socket pair: deadlines go in, its verdict
        // comes back, and CMD keeps the sidecar's stdout and stderr.
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        command.stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )));
        let guard = command.spawn();
        // Our copy of the guard's end must go, or its exit would never be seen.
        command.stdin(std::process::Stdio::null());
        let guard = guard?;
        ours.set_nonblocking(true)?;
        Ok((guard, tokio::net::UnixStream::from_std(ours)?))
    }

    /// Tells the guard every new deadline of the tenure, and to stop when it ends,
    /// until the guard is gone. Returns its last line and whether a stop was sent.
    async fn converse(
        &mut self,
        token: FencingToken,
        mut last: tokio::time::Instant,
        mut verdict: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>,
        mut pipe: tokio::net::unix::OwnedWriteHalf,
    ) -> (String, bool) {
        let mut stop_sent = false;
        let mut status_open = true;
        let mut said = None;
        loop {
            tokio::select! {
                line = verdict.next_line() => {
                    match line {
                        Ok(Some(line)) => {
                            said = Some(line);
                            continue;
                        }
                        // The guard is gone (its stdout closed): CMD's group is gone.
                        _ => break,
                    }
                }
                changed = self.status.changed(), if status_open => {
                    if changed.is_err() {
                        status_open = false;
                    }
                    match self.leading() {
                        Some((t, d)) if t == token && status_open => {
                            if d != last && !stop_sent {
                                last = d;
                                let _ = pipe
                                    .write_all(format!("D {}\n", to_monotonic_ns(d)).as_bytes())
                                    .await;
                            }
                        }
                        _ => {
                            if !stop_sent {
                                stop_sent = true;
                                tracing::info!(token, "stopping the command: the tenure ended");
                                let _ = pipe.write_all(b"T\n").await;
                            }
                        }
                    }
                }
            }
        }
        (said.unwrap_or_default(), stop_sent)
    }
}

/// The guard's arguments: `<grace ms> <budget ms> <warn ms> -- CMD ARGS…`.
struct GuardArgs {
    grace: Duration,
    budget: Duration,
    warn: Duration,
    cmd: Vec<OsString>,
}

impl GuardArgs {
    fn parse(args: Vec<OsString>) -> Result<GuardArgs, String> {
        let ms = |i: usize| {
            args.get(i)
                .and_then(|a| a.to_str())
                .and_then(|a| a.parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        let (Some(grace), Some(budget), Some(warn)) = (ms(0), ms(1), ms(2)) else {
            return Err(format!("{GUARD_ARG} is internal to `leasekeeper run`"));
        };
        let cmd = args.get(4..).unwrap_or_default().to_vec();
        if cmd.is_empty() {
            return Err(format!("{GUARD_ARG}: no command"));
        }
        Ok(GuardArgs {
            grace,
            budget,
            warn,
            cmd,
        })
    }
}

/// The guard's main: `__exec-guard <grace ms> <budget ms> <warn ms> -- CMD ARGS…`.
/// Prints one line when CMD's group is gone: `exited <code>`, `stopped` or `deadline`.
pub fn guard_main(args: Vec<OsString>) -> ExitCode {
    let args = match GuardArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: fd 0 is the socket the sidecar gave us as stdin, owned from here on.
    let channel = unsafe { std::os::unix::net::UnixStream::from_raw_fd(0) };
    let mut verdicts = match channel.try_clone() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {GUARD_ARG}: stdin is not the sidecar's socket: {e}");
            return ExitCode::from(2);
        }
    };
    let mut say = move |line: &str| {
        let _ = writeln!(verdicts, "{line}");
        let _ = verdicts.flush();
    };
    become_guard();
    let child = match spawn_cmd(&args.cmd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot run {}: {e}", args.cmd[0].to_string_lossy());
            say("exited 127");
            return ExitCode::from(127);
        }
    };
    let orders = read_orders(channel);
    say(&Guard::new(child, &args).supervise(&orders));
    ExitCode::SUCCESS
}

/// The sidecar's own signals (a Ctrl-C to the terminal's process group, say) are its
/// business: the guard stops CMD when the sidecar says so or is gone. Orphans of CMD
/// are reparented to the guard, which reaps them (a container's PID 1 may not).
fn become_guard() {
    // SAFETY: plain libc calls on this process, before any thread is started.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
}

/// CMD in a process group of its own, killed if the guard dies.
fn spawn_cmd(cmd: &[OsString]) -> std::io::Result<std::process::Child> {
    let mut command = std::process::Command::new(&cmd[0]);
    command
        .args(&cmd[1..])
        .stdin(std::process::Stdio::null())
        .process_group(0);
    // SAFETY: signal and prctl are async-signal-safe and touch only the child process.
    unsafe {
        command.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

/// The sidecar's lines, read on a thread of their own; `None` once it is gone.
fn read_orders(
    channel: std::os::unix::net::UnixStream,
) -> std::sync::mpsc::Receiver<Option<String>> {
    let (tx, rx) = std::sync::mpsc::channel::<Option<String>>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(channel).lines() {
            match line {
                Ok(l) => {
                    if tx.send(Some(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(None);
    });
    rx
}

/// The guard's watch over CMD: the deadline it was told last and, once stopping,
/// when SIGKILL is due.
struct Guard {
    child: std::process::Child,
    group: libc::pid_t,
    grace: u64,
    budget: u64,
    warn: u64,
    deadline: Option<u64>,
    kill_at: Option<u64>,
    killed: bool,
    why: &'static str,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Guard {
    fn new(child: std::process::Child, args: &GuardArgs) -> Guard {
        Guard {
            group: child.id() as libc::pid_t,
            child,
            grace: ns(args.grace),
            budget: ns(args.budget),
            warn: ns(args.warn),
            deadline: None,
            kill_at: None,
            killed: false,
            why: "stopped",
        }
    }

    fn signal_group(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's process group; errors (ESRCH) are fine.
        unsafe { libc::kill(-self.group, sig) };
    }

    /// Until CMD's whole group is gone; returns the verdict line.
    fn supervise(&mut self, orders: &std::sync::mpsc::Receiver<Option<String>>) -> String {
        loop {
            if let Some(verdict) = self.gone() {
                return verdict;
            }
            let now = monotonic_now_ns();
            let hard = self.deadline.map(|d| d.saturating_sub(self.budget));
            if let Some(hard) = hard {
                if self.kill_at.is_none() && now + self.warn >= hard {
                    // The claim comes near its deadline unextended.
                    self.why = "deadline";
                    self.signal_group(libc::SIGTERM);
                    self.kill_at = Some(hard);
                }
            }
            if let Some(at) = self.kill_at {
                if now >= at && !self.killed {
                    self.signal_group(libc::SIGKILL);
                    self.killed = true;
                }
            }
            if self.next_order(orders) && self.kill_at.is_none() {
                self.signal_group(libc::SIGTERM);
                let by_grace = monotonic_now_ns().saturating_add(self.grace);
                self.kill_at = Some(hard.map_or(by_grace, |h| h.min(by_grace)));
            }
        }
    }

    /// The verdict once CMD has exited (and then its whole group is killed).
    fn gone(&mut self) -> Option<String> {
        let status = match self.child.try_wait() {
            Ok(None) => return None,
            Ok(Some(status)) => Some(status),
            Err(_) => None,
        };
        // CMD is gone; nothing of its group may outlive it.
        self.signal_group(libc::SIGKILL);
        wait_group_gone(self.group);
        match status {
            Some(status) if self.kill_at.is_none() => {
                let code = status
                    .code()
                    .or_else(|| status.signal().map(|s| 128 + s))
                    .unwrap_or(1);
                Some(format!("exited {code}"))
            }
            _ => Some(self.why.to_owned()),
        }
    }

    /// Takes the sidecar's next line (waiting 2 ms at most); true when it says stop
    /// (or is gone). A new deadline counts only before stopping.
    fn next_order(&mut self, orders: &std::sync::mpsc::Receiver<Option<String>>) -> bool {
        match orders.recv_timeout(Duration::from_millis(2)) {
            Ok(Some(line)) => {
                if let Some(d) = line.strip_prefix("D ").and_then(|d| d.trim().parse().ok()) {
                    if self.kill_at.is_none() {
                        self.deadline = Some(d);
                    }
                    false
                } else {
                    line.trim() == "T"
                }
            }
            Ok(None) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => true,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
        }
    }
}

/// Waits until no process of the group is left (kill(-group, 0) fails), reaping the
/// orphans reparented to this subreaper on the way.
fn wait_group_gone(group: libc::pid_t) {
    loop {
        // SAFETY: waitpid with WNOHANG on our own children; kill with signal 0 only
        // checks for existence (a zombie counts until reaped).
        unsafe {
            while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
            if libc::kill(-group, 0) != 0 {
                return;
            }
            libc::kill(-group, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
