//! The guard: `leasekeeper __exec-guard <grace ms> <budget ms> <warn ms> -- CMD ARGS…`,
//! started by the supervisor for one run of CMD, ahead of the claim it runs in. Its
//! stdin is a socket to the sidecar: the tenure's environment for CMD (`E NAME=VALUE`)
//! and the lease's descriptor (`H`, the descriptor attached) before the first
//! deadline, claim deadlines (`D <CLOCK_MONOTONIC ns>`) and a stop (`T`) come in; one
//! record (`P` with a pidfd of CMD's init, `N` without proof, `X` not started) and at
//! the end one verdict line (`exited <code>`, `stopped`, `deadline`) go out.
//!
//! It starts CMD only once it holds a deadline, contained as [`super::contain`]
//! allows, and then enforces the deadline by itself: a stop or an unextended claim
//! gets CMD SIGTERM, then SIGKILL by the deadline less the kill budget; the
//! sidecar's death (the socket closes) counts as a stop. The verdict is written only
//! once nothing of CMD is left. The guard runs in a process group of its own with
//! CMD, so a stop of the sidecar's job (Ctrl-Z, `kill -STOP -PGID`) leaves the guard
//! awake to end CMD in time.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

use super::contain::{self, ContainError};
use crate::clock::monotonic_now_ns;
use crate::init::{exit_code, read_signal, signal_fd, Blocked};

/// The hidden first argument that makes the binary a guard.
pub const GUARD_ARG: &str = "__exec-guard";

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
        let options = args.get(3..).unwrap_or_default();
        let end = options
            .iter()
            .position(|a| a == "--")
            .unwrap_or(options.len());
        let cmd = options.get(end + 1..).unwrap_or_default().to_vec();
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

/// The guard's main (see the module's text); `--probe` only tells what containment
/// this host allows ([`contain::probe_main`]).
pub fn guard_main(args: Vec<OsString>) -> ExitCode {
    if args.first().is_some_and(|a| a == "--probe") {
        return contain::probe_main();
    }
    let args = match GuardArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: fd 0 is the socket the sidecar gave us as stdin, owned from here on.
    let channel = unsafe { UnixStream::from_raw_fd(0) };
    let mut verdicts = match channel.try_clone() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {GUARD_ARG}: stdin is not the sidecar's socket: {e}");
            return ExitCode::from(2);
        }
    };
    let sock = verdicts.as_raw_fd();
    // One write a line: the sidecar wakes once for it.
    let mut say = move |line: &str| {
        let _ = verdicts.write_all(format!("{line}\n").as_bytes());
    };
    let blocked = become_guard();
    let mut orders = Orders {
        sock: channel,
        buf: Vec::new(),
        gone: false,
        env: Vec::new(),
        hold: Hold::None,
    };
    let budget = ns(args.budget);
    let deadline = match orders.first_deadline() {
        // CMD never starts before the guard holds a deadline, nor too near one.
        Some(d) if monotonic_now_ns() + ns(args.warn) < d.saturating_sub(budget) => d,
        other => {
            let _ = contain::send_record(sock, b"X\n", None);
            say(if other.is_some() {
                "deadline"
            } else {
                "stopped"
            });
            return ExitCode::SUCCESS;
        }
    };
    let launch = contain::Launch {
        cmd: &args.cmd,
        env: &orders.env,
        hold: orders.hold.fd(),
    };
    let started = match orders.hold {
        Hold::Missing => Err(std::io::Error::other(
            "the lease's descriptor did not come with the deadline",
        )),
        Hold::None | Hold::Held(_) => start_cmd(&launch, sock, &blocked),
    };
    let first = match started {
        Ok(first) => first,
        Err(e) => {
            eprintln!("error: cannot run {}: {e}", args.cmd[0].to_string_lossy());
            let _ = contain::send_record(sock, b"X\n", None);
            say("exited 127");
            return ExitCode::from(127);
        }
    };
    let verdict = Guard::new(first, &args, deadline).supervise(&mut orders);
    // Nothing of CMD is left: the lease is no longer the guard's to keep, and the
    // sidecar releases it on the verdict, not on the guard's end.
    orders.hold = Hold::None;
    say(&verdict);
    ExitCode::SUCCESS
}

/// The sidecar's own signals (a Ctrl-C to the terminal's process group, say) are its
/// business: the guard stops CMD when the sidecar says so or is gone. Orphans of CMD
/// that are not in a namespace of their own are reparented to the guard, which
/// reaps them as they come.
///
/// The signals an init passes on are also blocked: CMD's init inherits that mask,
/// so a SIGTERM the guard sends it before it is ready waits instead of being lost.
fn become_guard() -> Blocked {
    // SAFETY: plain libc calls on this process, before any thread is started.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
    Blocked::block()
}

/// What the sidecar says: a new deadline, or stop (its going away says stop too).
enum Order {
    Deadline(u64),
    Stop,
}

/// The sidecar's lines, read without a thread of their own: once the guard made a
/// PID namespace for its children, it can start no thread.
struct Orders {
    sock: UnixStream,
    buf: Vec<u8>,
    gone: bool,
    /// The tenure's environment for CMD, as the `E` lines before the first deadline
    /// said it.
    env: Vec<(String, String)>,
    hold: Hold,
}

/// The lease's descriptor ([`crate::status::TenureHold`]), as the sidecar sends it.
enum Hold {
    /// None said (a store whose lease no descriptor holds).
    None,
    /// Said (`H`) without the descriptor attached: CMD must not start.
    Missing,
    Held(OwnedFd),
}

impl Hold {
    fn fd(&self) -> Option<RawFd> {
        match self {
            Hold::Held(fd) => Some(fd.as_raw_fd()),
            Hold::None | Hold::Missing => None,
        }
    }
}

impl Orders {
    /// The next order within `wait` (for ever without one); `None` if none came, or
    /// as soon as `also` turns readable.
    fn next(&mut self, wait: Option<Duration>, also: Option<RawFd>) -> Option<Order> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                if let Some(d) = line.strip_prefix("D ").and_then(|d| d.trim().parse().ok()) {
                    return Some(Order::Deadline(d));
                }
                if line.trim() == "T" {
                    return Some(Order::Stop);
                }
                if let Some((name, value)) = line
                    .strip_prefix("E ")
                    .and_then(|e| e.trim().split_once('='))
                {
                    self.env.push((name.to_owned(), value.to_owned()));
                }
                if line.trim() == "H" && matches!(self.hold, Hold::None) {
                    self.hold = Hold::Missing;
                }
                continue;
            }
            if self.gone {
                // Nothing more will come; do not spin.
                std::thread::sleep(wait.unwrap_or_default().min(RECHECK));
                return Some(Order::Stop);
            }
            let timeout = wait.map_or(-1, poll_ms);
            let mut fds = [self.sock.as_raw_fd(), also.unwrap_or(-1)].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            // SAFETY: poll(2) on two pollfds (a negative descriptor is skipped).
            if unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) } <= 0 || fds[1].revents != 0 {
                return None;
            }
            let mut chunk = [0u8; 512];
            match contain::recv_record(self.sock.as_raw_fd(), &mut chunk) {
                Ok((0, _)) => self.gone = true,
                Ok((n, fd)) => {
                    // The descriptor comes with the first bytes of the `H` line's
                    // record, so before that line is read.
                    if let (Some(fd), Hold::None) = (fd, &self.hold) {
                        self.hold = Hold::Held(fd);
                    }
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => self.gone = true,
            }
        }
    }

    /// The first deadline; `None` if the sidecar says stop or is gone first.
    fn first_deadline(&mut self) -> Option<u64> {
        match self.next(None, None)? {
            Order::Deadline(d) => Some(d),
            Order::Stop => None,
        }
    }
}

/// CMD's first process: the init of its namespace, or CMD itself.
struct First {
    pid: libc::pid_t,
    contained: bool,
}

/// Starts CMD as contained as this host allows, and tells the sidecar how (the
/// record goes out before CMD can run: the init waits for its go).
///
/// The lease's descriptor, open in the guard until CMD is gone, is inherited by
/// CMD's init, which ends its namespace before it closes it; without a namespace, by
/// CMD and everything CMD starts, so the lease stays held while any of them keeps it.
fn start_cmd(
    launch: &contain::Launch,
    sock: libc::c_int,
    blocked: &Blocked,
) -> std::io::Result<First> {
    if let Some(fd) = launch.hold {
        contain::set_cloexec(fd, false)?;
    }
    match contain::enter_pid_namespace() {
        Ok(_) => {
            let (pid, go) = contain::spawn_init(launch)?;
            // Without a pidfd (a kernel before 5.3) the sidecar cannot prove the end.
            match contain::pidfd_open(pid) {
                Ok(pidfd) => contain::send_record(sock, b"P\n", Some(pidfd.as_raw_fd()))?,
                Err(_) => contain::send_record(sock, b"N\n", None)?,
            }
            contain::go(go)?;
            Ok(First {
                pid,
                contained: true,
            })
        }
        Err(ContainError::Unavailable(_)) => {
            contain::send_record(sock, b"N\n", None)?;
            Ok(First {
                pid: contain::spawn_plain(launch, blocked)?,
                contained: false,
            })
        }
        Err(e @ ContainError::Broken(_)) => Err(std::io::Error::other(e.to_string())),
    }
}

/// The guard's watch over CMD: the deadline it was told last and, once stopping,
/// when SIGKILL is due.
struct Guard {
    first: First,
    /// The wait status of the first process, once it ended.
    status: Option<libc::c_int>,
    grace: u64,
    budget: u64,
    warn: u64,
    deadline: Option<u64>,
    kill_at: Option<u64>,
    why: &'static str,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Guard {
    fn new(first: First, args: &GuardArgs, deadline: u64) -> Guard {
        Guard {
            first,
            status: None,
            grace: ns(args.grace),
            budget: ns(args.budget),
            warn: ns(args.warn),
            deadline: Some(deadline),
            kill_at: None,
            why: "stopped",
        }
    }

    /// `sig` to all of CMD: in a namespace, to its init (which passes SIGTERM on to
    /// every process in it; a SIGKILL of the init ends them all); without one, to
    /// every process below the guard.
    fn signal_all(&self, sig: libc::c_int) {
        let targets = if self.first.contained {
            vec![self.first.pid]
        } else {
            // SAFETY: getpid cannot fail.
            contain::descendants(unsafe { libc::getpid() })
        };
        for pid in targets {
            // SAFETY: kill(2) on processes below us; errors (ESRCH) are fine.
            unsafe { libc::kill(pid, sig) };
        }
    }

    /// Reaps whatever ended below the guard, noting the first process's status.
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own children, without blocking.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if pid == self.first.pid {
                self.status = Some(status);
            }
        }
    }

    /// Until nothing of CMD is left; returns the verdict line. It wakes for an order,
    /// a child's end, and the next instant it acts at (see [`Guard::wait`]).
    fn supervise(&mut self, orders: &mut Orders) -> String {
        let ends = ChildEnds::open().ok();
        loop {
            if let Some(ends) = &ends {
                // Before the reap: an end after it turns the descriptor readable again.
                ends.drain();
            }
            self.reap();
            if let Some(status) = self.status {
                return self.finish(status);
            }
            let now = monotonic_now_ns();
            let hard = self.deadline.map(|d| d.saturating_sub(self.budget));
            if let Some(hard) = hard {
                if self.kill_at.is_none() && now + self.warn >= hard {
                    // The claim comes near its deadline unextended.
                    self.why = "deadline";
                    self.signal_all(libc::SIGTERM);
                    self.kill_at = Some(hard);
                }
            }
            if self.kill_at.is_some_and(|at| now >= at) {
                // Again on every round: a process forked meanwhile goes too.
                self.signal_all(libc::SIGKILL);
            }
            let wait = self.wait(now, hard, ends.is_some());
            let also = ends.as_ref().map(|e| e.0.as_raw_fd());
            if self.next_order(orders, wait, also) && self.kill_at.is_none() {
                self.signal_all(libc::SIGTERM);
                let by_grace = monotonic_now_ns().saturating_add(self.grace);
                self.kill_at = Some(hard.map_or(by_grace, |h| h.min(by_grace)));
            }
        }
    }

    /// The verdict once the first process has ended: in a namespace nothing else is
    /// left then; without one, the rest is killed first.
    fn finish(&mut self, status: libc::c_int) -> String {
        if !self.first.contained {
            kill_every_descendant();
        }
        if self.kill_at.is_none() {
            format!("exited {}", exit_code(status))
        } else {
            self.why.to_owned()
        }
    }

    /// How long the guard may sleep at `now` (with `hard`, the deadline less the
    /// budget): until the warning before `hard`, or until SIGKILL is due; once it is,
    /// [`RECHECK`] between its rounds. [`RECHECK`] too without a descriptor of
    /// children's ends, as then only a look finds them.
    fn wait(&self, now: u64, hard: Option<u64>, hears_ends: bool) -> Duration {
        let next = match self.kill_at {
            Some(at) => at,
            None => hard.map_or(u64::MAX, |h| h.saturating_sub(self.warn)),
        };
        if !hears_ends || next <= now {
            return RECHECK;
        }
        Duration::from_nanos(next - now).min(LONGEST_SLEEP)
    }

    /// Takes the sidecar's next order within `wait` (or until `also`, the children's
    /// ends, turns readable); true when it says stop (or is gone). A new deadline
    /// counts only before stopping.
    fn next_order(&mut self, orders: &mut Orders, wait: Duration, also: Option<RawFd>) -> bool {
        match orders.next(Some(wait), also) {
            Some(Order::Deadline(d)) => {
                if self.kill_at.is_none() {
                    self.deadline = Some(d);
                }
                false
            }
            Some(Order::Stop) => true,
            None => false,
        }
    }
}

/// Between two looks once SIGKILL is due (a process forked meanwhile goes too), or
/// when no child's end can be heard.
const RECHECK: Duration = Duration::from_millis(2);

/// The longest the guard sleeps with nothing due.
const LONGEST_SLEEP: Duration = Duration::from_secs(1);

/// `wait` as poll(2)'s timeout: whole milliseconds, rounded up, so that a wake is
/// never before the instant it is for.
fn poll_ms(wait: Duration) -> i32 {
    i32::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX)
}

/// A signalfd of SIGCHLD (blocked in the guard, [`Blocked`]): readable once a child
/// of the guard ended, so CMD's end is seen as it happens, not at the next look.
struct ChildEnds(OwnedFd);

impl ChildEnds {
    fn open() -> std::io::Result<ChildEnds> {
        signal_fd([libc::SIGCHLD]).map(ChildEnds)
    }

    /// Takes the ends heard so far (the reap that follows finds them).
    fn drain(&self) {
        while read_signal(self.0.as_fd()).is_ok() {}
    }
}

/// SIGKILL to every process below the guard until none is left, reaping the
/// orphans that come to this subreaper on the way.
fn kill_every_descendant() {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    loop {
        // SAFETY: waitpid with WNOHANG on our own children.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        let left = contain::descendants(me);
        if left.is_empty() {
            return;
        }
        for pid in left {
            // SAFETY: kill(2) on a process below us; ESRCH is fine.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
