//! SIGTERM and SIGINT, taken on the sidecar's own runtime. They are blocked in every
//! thread from the start ([`block`]) and read from a `signalfd(2)` that the main
//! runtime polls: the signal wakes the thread that steps down, directly. (tokio's
//! handler writes to one pipe that every runtime of the process polls, so the HTTP
//! thread's runtime may take the signal first and only then wake the main one.)
//! Children start with no signal blocked: the standard library clears the mask of
//! every process it starts.

use std::os::fd::{AsFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use crate::init::{mask, read_signal, signal_fd, sigset};

/// The signals a graceful stop comes by.
const STOP: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// Blocks SIGTERM and SIGINT in this thread and every thread it starts from now on:
/// call it before any other thread exists. One that comes before [`Signals::listen`]
/// stays pending and is answered then.
pub fn block() {
    mask(libc::SIG_BLOCK, &sigset(STOP));
}

/// SIGTERM and SIGINT, each kept from the moment it is listened for (a signal that
/// came before `recv` is answered by it).
pub enum Signals {
    /// Read from a signalfd on this runtime.
    Fd(AsyncFd<OwnedFd>),
    /// tokio's handlers, when no signalfd could be had (the signals unblocked again in
    /// this thread, which the kernel then picks to run the handler).
    Handlers {
        term: Option<tokio::signal::unix::Signal>,
        int: Option<tokio::signal::unix::Signal>,
    },
}

impl Signals {
    pub fn listen() -> Self {
        match stop_fd() {
            Ok(fd) => Signals::Fd(fd),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read SIGTERM and SIGINT from a signalfd; taking them by handler");
                mask(libc::SIG_UNBLOCK, &sigset(STOP));
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

/// A signalfd of [`STOP`], polled by this runtime.
fn stop_fd() -> std::io::Result<AsyncFd<OwnedFd>> {
    let fd = signal_fd(STOP)?;
    // SAFETY: the OwnedFd keeps its descriptor open, unchanged, for as long as the
    // AsyncFd holds it.
    unsafe { AsyncFd::register(fd) }.map_err(std::io::Error::from)
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

/// Waits for one signal on `fd` and takes it.
async fn read_one(fd: &AsyncFd<OwnedFd>) {
    loop {
        let Ok(mut ready) = fd.readable().await else {
            // The runtime is going away: no signal will come.
            return std::future::pending().await;
        };
        match ready.try_io(|inner| read_signal(inner.get_ref().as_fd())) {
            Ok(Ok(())) => return,
            Ok(Err(e)) if e.kind() != std::io::ErrorKind::Interrupted => {
                tracing::warn!(error = %e, "cannot read SIGTERM and SIGINT; only SIGKILL stops the sidecar");
                return std::future::pending().await;
            }
            _ => {}
        }
    }
}
