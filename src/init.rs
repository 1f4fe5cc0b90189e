//! A minimal init: a process that starts one main child, reaps every process that
//! ends below it (its own children and the orphans the kernel hands it), forwards
//! the usual termination signals, and ends with the main child's exit code.
//!
//! Two users: exec mode's command runs under one as PID 1 of its own PID namespace
//! (`publish::exec`), and the sidecar becomes one when it is itself PID 1, as the
//! entry point of a container without `tini` ([`reap_as_pid_1`]). Signals are taken
//! synchronously (blocked, then `sigwaitinfo`), so nothing here runs in a handler.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

/// The signals an init passes on (SIGCHLD is its own business).
pub const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The parent-death signal of exec mode's init ([`crate::publish::exec`]): blocked
/// with the forwarded ones and taken by [`serve`], which then ends every process of
/// the namespace and reaps them all before the init itself ends. A SIGKILL as the
/// parent-death signal would end the init first, and the kernel closes a dying
/// process's descriptors before it kills the rest of its namespace: a lease the init
/// holds open (the file lock) would be free while CMD's processes still run.
pub fn parent_gone() -> libc::c_int {
    libc::SIGRTMIN()
}

/// Who gets a forwarded signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// The main child only (the sidecar under its PID 1).
    MainChild,
    /// Every other process of the PID namespace (`kill(-1, sig)`): CMD and whatever
    /// it started, as a process group's signal reached them before.
    Everyone,
}

/// The forwarded signals and SIGCHLD, blocked in this thread. A child inherits the
/// mask, also across exec: signals sent to it before it takes them stay pending
/// instead of being lost (a namespace's init drops a signal it has no handler for).
/// Start a child that must not inherit it with [`Blocked::unblock_in`].
pub struct Blocked {
    set: libc::sigset_t,
}

impl Blocked {
    /// Blocks them; SIGCHLD is set to its default first, so that ended children stay
    /// to be reaped (an inherited SIG_IGN would reap them unseen).
    pub fn block() -> Blocked {
        let set = sigset(FORWARDED.into_iter().chain([libc::SIGCHLD, parent_gone()]));
        // SAFETY: sets SIGCHLD's disposition to the default, nothing else.
        unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
        mask(libc::SIG_BLOCK, &set);
        Blocked { set }
    }

    /// Makes a child started by `command` begin with no signal blocked.
    pub fn unblock_in(&self, command: &mut std::process::Command) {
        // SAFETY: sigemptyset and pthread_sigmask are async-signal-safe and touch
        // only the child.
        unsafe {
            command.pre_exec(|| {
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                Ok(())
            });
        }
    }

    /// Unblocks them again in this thread.
    pub fn unblock(&self) {
        mask(libc::SIG_UNBLOCK, &self.set);
    }
}

/// The set of `signals`.
pub fn sigset(signals: impl IntoIterator<Item = libc::c_int>) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data that sigemptyset initialises.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in signals {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Changes this thread's signal mask by `set` (`how`: `SIG_BLOCK`, `SIG_UNBLOCK`).
pub fn mask(how: libc::c_int, set: &libc::sigset_t) {
    // SAFETY: changes only this thread's signal mask.
    unsafe { libc::pthread_sigmask(how, set, std::ptr::null_mut()) };
}

/// A non-blocking `signalfd(2)` of `signals` (blocked, or they never reach it).
pub fn signal_fd(signals: impl IntoIterator<Item = libc::c_int>) -> std::io::Result<OwnedFd> {
    let set = sigset(signals);
    // SAFETY: signalfd(2) returns a new descriptor or -1.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Takes one signal from the signalfd `fd`; an error when none was there
/// (`WouldBlock`) or the read failed.
pub fn read_signal(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: signalfd_siginfo is plain data, and read(2) fills at most its size of it.
    let read = unsafe {
        let mut info: libc::signalfd_siginfo = std::mem::zeroed();
        libc::read(
            fd.as_raw_fd(),
            (&mut info as *mut libc::signalfd_siginfo).cast(),
            size,
        )
    };
    match usize::try_from(read) {
        Ok(n) if n == size => Ok(()),
        Ok(_) => Err(std::io::ErrorKind::UnexpectedEof.into()),
        Err(_) => Err(std::io::Error::last_os_error()),
    }
}

/// The exit code of a wait status: the code, or 128 + the signal that ended it.
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Reaps every ended child; the exit code of `main` if it was among them.
fn reap(main: libc::pid_t) -> Option<i32> {
    let mut code = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own children, without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return code;
        }
        if pid == main {
            code = Some(exit_code(status));
        }
    }
}

/// SIGKILL to every other process of this PID namespace until none is left, each
/// reaped: as the namespace's init, every process in it is a descendant, so once
/// `waitpid` finds no child at all, every one has ended and closed its descriptors.
fn end_everyone() -> i32 {
    loop {
        // SAFETY: kill(2) of every process of the namespace but this init.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        loop {
            // SAFETY: waitpid on our own children, without blocking.
            let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
            if pid < 0 {
                return 128 + libc::SIGKILL;
            }
            if pid == 0 {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Serves as init for `main` (started after [`Blocked::block`]) until it ends:
/// reaps, forwards, and returns `main`'s exit code. As the init of a namespace
/// ([`Forward::Everyone`]), its parent's death ([`parent_gone`]) ends everyone first.
pub fn serve(main: libc::pid_t, forward: Forward, blocked: &Blocked) -> i32 {
    loop {
        // SAFETY: waits for one of the signals blocked in `blocked.set`.
        let sig = unsafe { libc::sigwaitinfo(&blocked.set, std::ptr::null_mut()) };
        if sig == libc::SIGCHLD {
            if let Some(code) = reap(main) {
                if forward == Forward::Everyone {
                    // Not left to the kernel: this init's end would close what it
                    // holds before the rest of the namespace is gone.
                    end_everyone();
                }
                return code;
            }
        } else if sig == parent_gone() {
            if forward == Forward::Everyone {
                return end_everyone();
            }
        } else if sig > 0 {
            let target = match forward {
                Forward::MainChild => main,
                Forward::Everyone => -1,
            };
            // SAFETY: kill(2); errors (nothing left to signal) are fine.
            unsafe { libc::kill(target, sig) };
        }
    }
}

/// Set in the child of [`reap_as_pid_1`]: its parent is the PID namespace's init.
static UNDER_OWN_INIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process runs under the init of [`reap_as_pid_1`]: then, when this
/// process ends, that init ends, and with it every process of the PID namespace.
pub fn under_own_init() -> bool {
    UNDER_OWN_INIT.load(std::sync::atomic::Ordering::Relaxed)
}

/// When this process is PID 1 (a container's entry point): fork, serve as init for
/// the child, and return the exit code to end with; the child (and every other
/// process) gets `None` and goes on as the sidecar. Call before any thread starts.
pub fn reap_as_pid_1() -> Option<ExitCode> {
    if std::process::id() != 1 {
        return None;
    }
    let blocked = Blocked::block();
    // SAFETY: fork in a process that has no other thread yet (nothing started one).
    let pid = unsafe { libc::fork() };
    if pid <= 0 {
        // The child (or no fork at all: run without an init rather than not at all).
        blocked.unblock();
        if pid == 0 {
            UNDER_OWN_INIT.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if pid < 0 {
            eprintln!(
                "warning: running as PID 1 without reaping orphans: fork failed: {}",
                std::io::Error::last_os_error()
            );
        }
        return None;
    }
    let code = serve(pid, Forward::MainChild, &blocked);
    Some(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_of_wait_statuses() {
        // Exited 7: the code in the second byte; killed by 9: the signal, low bits.
        assert_eq!(exit_code(7 << 8), 7);
        assert_eq!(exit_code(9), 137);
        assert_eq!(exit_code(0), 0);
    }
}
