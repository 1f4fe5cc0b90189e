//! SIGTERM and SIGINT, taken on the sidecar's own runtime. They are blocked in every
//! thread from the start ([`block`]) and read from a `signalfd(2)` that the main
//! runtime polls: the signal wakes the thread that steps down, directly. (tokio's
//! handler writes to one pipe that every runtime of the process polls, so the HTTP
//! thread's runtime may take the signal first and only then wake the main one.)
//! Children start with no signal blocked: the standard library clears the mask of
//! every process it starts.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

/// The signals a graceful stop comes by.
const STOP: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

fn stop_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data that sigemptyset initialises.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in STOP {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Blocks SIGTERM and SIGINT in this thread and every thread it starts from now on:
/// call it before any other thread exists. One that comes before [`Signals::listen`]
/// stays pending and is answered then.
pub fn block() {
    let set = stop_set();
    // SAFETY: changes only this thread's signal mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// SIGTERM and SIGINT, each kept from the moment it is listened for (a signal that
/// came before `recv` is answered by it).
pub enum Signals {
    /// Read from a signalfd on this runtime.
    Fd(AsyncFd<OwnedFd>),
    /// tokio's handlers, when no signalfd could be had (the signals unblocked again).
    Handlers {
        term: Option<tokio::signal::unix::Signal>,
        int: Option<tokio::signal::unix::Signal>,
    },
}

impl Signals {
    pub fn listen() -> Self {
        match signal_fd() {
            Ok(fd) => Signals::Fd(fd),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read SIGTERM and SIGINT from a signalfd; taking them by handler");
                let set = stop_set();
                // SAFETY: changes only this thread's signal mask.
                unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
                handlers()
            }
        }
    }

    /// Raises `stop` on the first SIGTERM or SIGINT, from now on.
    pub fn raise(mut self, stop: watch::Sender<bool>) {
        tokio::spawn(async move {
            self.recv().await;
            let _ = stop.send(true);
        });
    }

    /// The next SIGTERM or SIGINT (Ctrl-C, without the handlers).
    pub async fn recv(&mut self) {
        match self {
            Signals::Fd(fd) => read_one(fd).await,
            Signals::Handlers {
                term: Some(term),
                int: Some(int),
            } => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            Signals::Handlers { .. } => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

fn signal_fd() -> std::io::Result<AsyncFd<OwnedFd>> {
    let set = stop_set();
    // SAFETY: a new descriptor for the set; the result is checked before use.
    let raw = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor just opened and owned by nobody else; the OwnedFd
    // keeps it open, unchanged, for as long as the AsyncFd holds it.
    unsafe { AsyncFd::register(OwnedFd::from_raw_fd(raw)) }.map_err(std::io::Error::from)
}

fn handlers() -> Signals {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    if let Err(e) = term.as_ref().and(int.as_ref()) {
        tracing::warn!(error = %e, "cannot listen for SIGTERM and SIGINT; only Ctrl-C stops the sidecar gracefully");
    }
    Signals::Handlers {
        term: term.ok(),
        int: int.ok(),
    }
}

/// Waits for one signal on `fd` and reads it.
async fn read_one(fd: &AsyncFd<OwnedFd>) {
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    loop {
        let Ok(mut ready) = fd.readable().await else {
            // The runtime is going away: no signal will come.
            return std::future::pending().await;
        };
        let mut info = std::mem::MaybeUninit::<libc::signalfd_siginfo>::uninit();
        let read = ready.try_io(|inner| {
            // SAFETY: reads at most one siginfo into a buffer of its size.
            let n = unsafe { libc::read(inner.as_raw_fd(), info.as_mut_ptr().cast(), size) };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n)
            }
        });
        match read {
            Ok(Ok(n)) if usize::try_from(n).is_ok_and(|n| n == size) => return,
            Ok(Err(e)) if e.kind() != std::io::ErrorKind::Interrupted => {
                tracing::warn!(error = %e, "cannot read SIGTERM and SIGINT; only SIGKILL stops the sidecar");
                return std::future::pending().await;
            }
            _ => {}
        }
    }
}
