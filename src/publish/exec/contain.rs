//! How CMD is contained (DESIGN §10, "Containment"): a PID namespace of its own where
//! the host allows one (as root, or in a user namespace of the guard's own), with a
//! small init as its PID 1 (a fork of the guard, [`spawn_init`]) that learns of the
//! guard's death by its parent-death signal and then kills and reaps every other
//! process of the namespace before it ends itself ([`crate::init::serve`]). When that init ends for any other
//! reason (the guard killed it, an OOM kill), the kernel kills every other process of
//! the namespace before the init's end can be seen: either way, a pidfd of the init
//! that turns readable is proof that nothing of CMD is left.
//!
//! Where no namespace can be had, CMD runs directly under the guard ([`spawn_plain`]),
//! which as child subreaper still collects every orphan and signals every
//! descendant; only its own death can then leave processes behind.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use crate::init::{serve, Blocked, Forward};

/// The byte the guard sends its init to start CMD.
const GO: u8 = b'g';

/// What CMD is started with: its command line, the tenure's environment, and the
/// lease's descriptor (`hold`, [`crate::status::TenureHold`]) where the store has one.
pub struct Launch<'a> {
    pub cmd: &'a [OsString],
    pub env: &'a [(String, String)],
    pub hold: Option<RawFd>,
}

impl Launch<'_> {
    /// A command for CMD, with its environment and stdin from /dev/null.
    fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.cmd[0]);
        command
            .args(&self.cmd[1..])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null());
        command
    }
}

/// Marks `fd` close-on-exec (`true`) or inherited (`false`).
pub fn set_cloexec(fd: RawFd, cloexec: bool) -> std::io::Result<()> {
    // SAFETY: fcntl(2) on a descriptor number; a bad one is an error, not UB.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let flags = match cloexec {
        true => flags | libc::FD_CLOEXEC,
        false => flags & !libc::FD_CLOEXEC,
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Why CMD cannot have a PID namespace.
#[derive(Debug, thiserror::Error)]
pub enum ContainError {
    /// The host allows none: CMD may run without one.
    #[error("{0}")]
    Unavailable(String),
    /// A user namespace was entered but could not be set up: CMD must not run in it.
    #[error("cannot set up a user namespace: {0}")]
    Broken(String),
}

/// The namespaces entered for CMD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    /// A PID namespace (this process may create one: root, CAP_SYS_ADMIN).
    Pid,
    /// A user namespace (mapping only the own user and group), then a PID namespace.
    UserAndPid,
}

fn unshare(flags: libc::c_int) -> std::io::Result<()> {
    // SAFETY: unshare(2) changes only this process's namespaces.
    if unsafe { libc::unshare(flags) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes the children this process starts from now on members of a new PID
/// namespace (the first one its PID 1). Call while single-threaded.
pub fn enter_pid_namespace() -> Result<Namespace, ContainError> {
    let first = match unshare(libc::CLONE_NEWPID) {
        Ok(()) => return Ok(Namespace::Pid),
        Err(e) => e,
    };
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if let Err(e) = unshare(libc::CLONE_NEWUSER) {
        return Err(ContainError::Unavailable(format!(
            "CLONE_NEWPID: {first}; CLONE_NEWUSER: {e}"
        )));
    }
    let maps = [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ];
    for (file, text) in maps {
        std::fs::write(file, text).map_err(|e| ContainError::Broken(format!("{file}: {e}")))?;
    }
    unshare(libc::CLONE_NEWPID)
        .map_err(|e| ContainError::Broken(format!("CLONE_NEWPID in the user namespace: {e}")))?;
    Ok(Namespace::UserAndPid)
}

/// `__exec-guard --probe`: what [`enter_pid_namespace`] gives here, in one line
/// (`pid-namespace`, `user-namespace`, or `none: <why>`), with a first process
/// actually started in it.
pub fn probe_main() -> ExitCode {
    let line = match enter_pid_namespace() {
        Ok(ns) => match start_and_reap_one() {
            Ok(()) if ns == Namespace::Pid => "pid-namespace".to_owned(),
            Ok(()) => "user-namespace".to_owned(),
            Err(e) => format!("none: no process starts in a new PID namespace: {e}"),
        },
        Err(e) => format!("none: {e}"),
    };
    println!("{line}");
    ExitCode::SUCCESS
}

fn start_and_reap_one() -> std::io::Result<()> {
    // SAFETY: fork in the probe, which starts no thread; the child only ends.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(std::io::Error::last_os_error()),
        // SAFETY: _exit(2) ends the child at once.
        0 => unsafe { libc::_exit(0) },
        pid => {
            // SAFETY: waitpid(2) on our own child.
            match unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) } {
                -1 => Err(std::io::Error::last_os_error()),
                _ => Ok(()),
            }
        }
    }
}

/// SIGKILL at the guard's death and default signal dispositions for a child of the
/// guard (the guard ignores the terminal's signals; its children must not inherit
/// that). The guard's blocked signals stay blocked, and so pending, until CMD takes
/// them from its exec ([`spawn_plain`]); CMD's init, a fork, does as much itself
/// ([`spawn_init`]).
fn child_setup(command: &mut std::process::Command) {
    // SAFETY: signal, prctl and getppid are async-signal-safe and touch only the child.
    unsafe {
        command.pre_exec(move || {
            for sig in crate::init::FORWARDED {
                libc::signal(sig, libc::SIG_DFL);
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Starts the init of CMD's namespace, waiting for the go of [`go`]; its pid and
/// the guard's end of the go pipe. Until the go, CMD does not run; if the guard dies
/// before it, the pipe closes and the init ends without starting CMD. The init is a
/// fork of the guard, which starts no thread, not a program of its own: CMD starts
/// one exec sooner.
///
/// `hold` (the lease's descriptor, [`crate::status::TenureHold`]) stays open in the
/// init, which keeps it until every other process of the namespace has ended
/// ([`crate::init::serve`]); CMD does not see it. The init's parent-death signal is
/// [`crate::init::parent_gone`], which it takes to end the namespace itself.
pub fn spawn_init(launch: &Launch) -> std::io::Result<(libc::pid_t, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two new descriptors, owned right below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the guard has no other thread, so its child may run any code; the
    // child never returns from here.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            let code = init(read.as_raw_fd(), write.as_raw_fd(), launch);
            // SAFETY: the init ends here, with none of the guard's own ending run.
            unsafe { libc::_exit(code) }
        }
        pid => Ok((pid, write)),
    }
}

/// The init, in the guard's fork (PID 1 of CMD's namespace): takes default signal
/// dispositions and its parent-death signal, keeps only the `go` pipe (as its
/// stdin), stdout, stderr and `hold`, waits for the go, starts CMD, reaps every
/// process that ends in the namespace, passes the guard's SIGTERM to all of them,
/// and ends with CMD's exit code (the kernel then ends the rest).
fn init(go: RawFd, guard_end: RawFd, launch: &Launch) -> i32 {
    let hold = launch.hold;
    // SAFETY: signal, prctl, dup2 and close on this new process alone.
    let ready = unsafe {
        for sig in crate::init::FORWARDED {
            libc::signal(sig, libc::SIG_DFL);
        }
        libc::close(guard_end);
        libc::prctl(libc::PR_SET_PDEATHSIG, crate::init::parent_gone()) == 0
            && libc::dup2(go, 0) == 0
    };
    if !ready {
        return 1;
    }
    close_all_but(hold);
    // The init keeps the lease's descriptor; CMD never sees it.
    if let Some(Err(e)) = hold.map(|fd| set_cloexec(fd, true)) {
        eprintln!("error: the command's init: the lease's descriptor: {e}");
        return 2;
    }
    let blocked = Blocked::block();
    let mut byte = [0u8; 1];
    if !matches!(std::io::stdin().lock().read(&mut byte), Ok(1) if byte[0] == GO) {
        // The guard is gone (or stopped) before CMD started: nothing to do.
        return 0;
    }
    let mut command = launch.command();
    blocked.unblock_in(&mut command);
    match command.spawn() {
        Ok(child) => serve(pid_of(&child), Forward::Everyone, &blocked),
        Err(e) => {
            eprintln!("error: cannot run {}: {e}", launch.cmd[0].to_string_lossy());
            127
        }
    }
}

/// Closes every descriptor of this process but stdin, stdout, stderr and `hold`:
/// what the guard holds (its socket to the sidecar) is not the init's.
fn close_all_but(hold: Option<RawFd>) {
    let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for fd in open.into_iter().filter(|fd| *fd > 2 && Some(*fd) != hold) {
        // SAFETY: close(2) of a descriptor number; one already gone (the listing's
        // own) answers EBADF.
        unsafe { libc::close(fd) };
    }
}

/// Tells the init to start CMD.
pub fn go(pipe: OwnedFd) -> std::io::Result<()> {
    std::fs::File::from(pipe).write_all(&[GO])
}

/// CMD directly under the guard (no namespace), in the guard's process group.
pub fn spawn_plain(launch: &Launch, blocked: &Blocked) -> std::io::Result<libc::pid_t> {
    let mut command = launch.command();
    child_setup(&mut command);
    blocked.unblock_in(&mut command);
    // SAFETY: getpid cannot fail.
    let guard = unsafe { libc::getpid() };
    // SAFETY: getppid and _exit are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            // The guard died before the parent-death signal was set: end now.
            if libc::getppid() != guard {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    command.spawn().map(|c| pid_of(&c))
}

fn pid_of(child: &std::process::Child) -> libc::pid_t {
    libc::pid_t::try_from(child.id()).unwrap_or(libc::pid_t::MAX)
}

/// A pidfd of `pid` (a child of ours, not yet reaped: the pid cannot be reused).
pub fn pidfd_open(pid: libc::pid_t) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `bytes` on the socket `sock`, with `fd` attached (SCM_RIGHTS) when given.
pub fn send_record(sock: RawFd, bytes: &[u8], fd: Option<RawFd>) -> std::io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // Room for one descriptor, aligned for cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; zeroed is its empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_* compute sizes and positions inside `control`, which is
        // large and aligned enough for one header with one int.
        unsafe {
            msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        }
    }
    // SAFETY: `msg` points at live buffers for the duration of the call.
    let sent = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    match usize::try_from(sent) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) => Err(std::io::Error::other("short send")),
        Err(_) => Err(std::io::Error::last_os_error()),
    }
}

/// Receives up to `buf.len()` bytes from `sock` and the first descriptor attached
/// to them, if any (close-on-exec). `Ok((0, None))` at the end of the stream.
pub fn recv_record(sock: RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is its empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` points at live buffers for the duration of the call.
    let got = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    let Ok(got) = usize::try_from(got) else {
        return Err(std::io::Error::last_os_error());
    };
    let mut first = None;
    // SAFETY: the kernel filled `control` up to msg_controllen; CMSG_NXTHDR walks it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    // Any further descriptor is closed as it drops.
                    if first.is_none() {
                        first = Some(fd);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((got, first))
}

/// Every process below `root` now, from the parent links in /proc.
pub fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let links: Vec<(libc::pid_t, libc::pid_t)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for &(pid, _) in links.iter().filter(|(_, pp)| *pp == parent) {
            parents.push(pid);
            found.push(pid);
        }
    }
    found
}

fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rfind(')')?;
    stat[after + 1..].split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn records_carry_a_descriptor_or_none_and_a_pidfd_waits_while_its_process_runs() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let pidfd = pidfd_open(child.id() as libc::pid_t).unwrap();
        send_record(a.as_raw_fd(), b"P\n", Some(pidfd.as_raw_fd())).unwrap();
        drop(pidfd);
        send_record(a.as_raw_fd(), b"N\n", None).unwrap();
        let mut buf = [0u8; 2];
        let (n, fd) = recv_record(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fd.is_some()), (&b"P\n"[..], true));
        let (n, fd) = recv_record(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fd.is_some()), (&b"N\n"[..], false));
        let received = fd_readable(&recv_fd_again(&a, &b, child.id()), 0);
        assert!(!received, "readable before the process ended");
        child.wait().unwrap();
    }

    /// A fresh pidfd of `pid`, passed through the socket pair.
    fn recv_fd_again(
        a: &std::os::unix::net::UnixStream,
        b: &std::os::unix::net::UnixStream,
        pid: u32,
    ) -> OwnedFd {
        let pidfd = pidfd_open(pid as libc::pid_t).unwrap();
        send_record(a.as_raw_fd(), b"P\n", Some(pidfd.as_raw_fd())).unwrap();
        let mut buf = [0u8; 2];
        recv_record(b.as_raw_fd(), &mut buf).unwrap().1.unwrap()
    }

    fn fd_readable(fd: &OwnedFd, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        unsafe { libc::poll(&mut p, 1, timeout_ms) == 1 }
    }

    #[test]
    fn a_passed_pidfd_turns_readable_once_its_process_ended() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("0.1")
            .spawn()
            .unwrap();
        let fd = recv_fd_again(&a, &b, child.id());
        assert!(
            fd_readable(&fd, 5000),
            "not readable after the process ended"
        );
        child.wait().unwrap();
    }

    #[test]
    fn descendants_include_children_and_grandchildren() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let sh = child.id() as libc::pid_t;
        let mut below_sh = Vec::new();
        for _ in 0..500 {
            below_sh = descendants(sh);
            if !below_sh.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let below_me = descendants(unsafe { libc::getpid() });
        assert!(below_me.contains(&sh), "{below_me:?}");
        assert_eq!(below_sh.len(), 1, "{below_sh:?}");
        assert!(below_me.contains(&below_sh[0]), "{below_me:?}");
        for pid in below_sh.into_iter().chain([sh]) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        child.wait().unwrap();
    }
}
