//! The image run as a real container, as a Pod would run it: the runtime stage that the
//! Dockerfile describes (image/contents.txt: the binary, the libraries distroless `cc`
//! carries, the passwd entry of 65532, no shell) assembled as an OCI bundle and run by
//! `runc` as user 65532 with a read-only root, a writable tmpfs on /tmp, no
//! capabilities and an /etc/hosts as the kubelet mounts one. Most containers use the
//! host's network namespace (the test reaches the sidecar on loopback); one test runs
//! the sidecar in the network namespace of an "app" container, as a Pod's containers
//! share one, and the app asks `localhost:4040` from inside.
//!
//! Checked inside containers: `/leader` answers; SIGTERM (`runc kill`) releases and the
//! next sidecar (a second container on the same lock file, through a shared bind
//! mount) leads at once; `leasekeeper status` works through `runc exec` with no shell;
//! `leasekeeper run -- CMD` as the entry point (PID 1) reaps orphans and, when PID 1 is
//! killed with SIGKILL from outside, takes every process of the container with it (a
//! background worker that left CMD's process group included).
//!
//! runc needs root here (rootless runc needs user namespaces): as another user the
//! container steps are skipped, saying so. By hand: `cargo nextest run --no-capture -E
//! 'test(/^container::/)'` (docs/development.md, "The image as a container").

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{eventually, free_port, leasekeeper_bin, process_state};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// image/contents.txt, read.
#[derive(Debug, Default)]
struct Contents {
    base: String,
    libraries: BTreeSet<String>,
    files: Vec<String>,
    user: (String, u32, u32),
    copies: Vec<String>,
    expose: Vec<String>,
    entrypoint: String,
}

fn contents() -> Contents {
    let text = std::fs::read_to_string(Path::new(ROOT).join("image/contents.txt"))
        .expect("image/contents.txt");
    let mut c = Contents::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[0] {
            "base" => c.base = words[1].to_owned(),
            "carries" => c.libraries.extend(words[1..].iter().map(|w| w.to_string())),
            "carries-file" => c.files.push(words[1].to_owned()),
            "user" => {
                c.user = (
                    words[1].to_owned(),
                    words[2].parse().expect("uid"),
                    words[3].parse().expect("gid"),
                )
            }
            "copy" => c.copies.push(words[1].to_owned()),
            "expose" => c.expose.push(words[1].to_owned()),
            "entrypoint" => c.entrypoint = words[1].to_owned(),
            other => panic!("image/contents.txt: unknown entry {other:?}"),
        }
    }
    c
}

/// The Dockerfile's last stage says exactly what image/contents.txt lists.
#[test]
fn the_dockerfile_runs_what_the_contents_list() {
    let c = contents();
    let dockerfile =
        std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).expect("Dockerfile");
    let lines: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let last = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM");
    let stage = &lines[last..];
    assert_eq!(stage[0], format!("FROM {}", c.base), "the base image");
    let of = |word: &str| -> Vec<String> {
        stage
            .iter()
            .filter_map(|l| l.strip_prefix(word))
            .map(|rest| rest.trim().to_owned())
            .collect()
    };
    let copied: Vec<String> = of("COPY ")
        .iter()
        .map(|args| args.split_whitespace().last().unwrap_or("").to_owned())
        .collect();
    assert_eq!(copied, c.copies, "COPY destinations");
    assert_eq!(
        of("USER "),
        vec![format!("{}:{}", c.user.1, c.user.2)],
        "USER"
    );
    assert_eq!(of("EXPOSE "), c.expose, "EXPOSE");
    assert_eq!(
        of("ENTRYPOINT "),
        vec![format!("[\"{}\"]", c.entrypoint)],
        "ENTRYPOINT"
    );
    assert!(
        c.copies.contains(&c.entrypoint),
        "the entry point is copied in"
    );
    let allowed = ["FROM ", "COPY ", "USER ", "EXPOSE ", "ENTRYPOINT "];
    for line in stage {
        assert!(
            allowed.iter().any(|a| line.starts_with(a)),
            "the last stage does something image/contents.txt does not list: {line}"
        );
    }
}

/// The shared libraries a program needs (ldd), as host paths.
fn libraries_of(program: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(program).output().expect("ldd");
    assert!(out.status.success(), "ldd {}", program.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = match l.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The binary needs no library that distroless `cc` lacks.
#[test]
fn the_binary_needs_only_what_the_base_carries() {
    let c = contents();
    let libs = libraries_of(&leasekeeper_bin());
    assert!(!libs.is_empty(), "ldd found nothing");
    for lib in libs {
        let name = lib
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        assert!(
            c.libraries.contains(&name),
            "{name} is not in what the base image carries (image/contents.txt)"
        );
    }
}

/// Why a container step cannot run on this machine, if it cannot.
fn cannot_run_containers() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(
            "not root: runc without root needs user namespaces; skipping the container steps"
                .to_owned(),
        );
    }
    match Command::new("runc").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => panic!(
            "runc is not installed; scripts/install-test-deps installs it (Debian package runc)"
        ),
    }
}

/// A directory of bundles, the runc state and the shared lock-file folder; every
/// container started from here is deleted (runc delete -f) on drop.
struct Lab {
    dir: tempfile::TempDir,
    shared: PathBuf,
    ids: std::cell::RefCell<Vec<String>>,
}

/// The seccomp profile of an app container (exec mode: the runtime image and the app's
/// programs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seccomp {
    /// runc's own default: none; exec mode gives CMD a PID namespace of its own.
    None,
    /// As Kubernetes' RuntimeDefault often is: no new namespaces (`unshare` refused),
    /// so the container's PID 1 and the guard are the containment.
    NoNewNamespaces,
}

/// A container's network namespace.
#[derive(Clone, Copy, Debug)]
enum Network {
    /// The host's: the test reaches the sidecar on loopback.
    Host,
    /// One of its own (runc brings its loopback up), like a Pod's.
    Own,
    /// That of the container whose first process is this host PID, as a Pod's
    /// containers share one.
    Of(u32),
}

/// Adds a seccomp filter that refuses `unshare` (EPERM) to a bundle's config.json.
fn no_new_namespaces(path: &Path) {
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("config")).expect("json");
    config["linux"]["seccomp"] = serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]
    });
    std::fs::write(path, serde_json::to_vec_pretty(&config).expect("json")).expect("write");
}

/// Extra programs an app image adds to the runtime image (for exec mode's CMD).
const APP_PROGRAMS: &[(&str, &str)] = &[
    ("/usr/bin/dash", "/bin/sh"),
    ("/usr/bin/sleep", "/bin/sleep"),
];

impl Lab {
    fn new() -> Lab {
        let dir = tempfile::tempdir().expect("dir");
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("shared");
        set_mode(&shared, 0o777);
        Lab {
            dir,
            shared,
            ids: Default::default(),
        }
    }

    fn runc_root(&self) -> PathBuf {
        self.dir.path().join("runc")
    }

    fn runc(&self) -> Command {
        let mut cmd = Command::new("runc");
        cmd.arg("--root").arg(self.runc_root());
        cmd
    }

    /// A bundle of the runtime image (plus `app`'s programs) running `args` as the
    /// image's user.
    fn bundle(&self, name: &str, args: &[String], app: Option<Seccomp>, net: &Network) -> PathBuf {
        let c = contents();
        let bundle = self.dir.path().join(name);
        let rootfs = bundle.join("rootfs");
        for d in ["tmp", "proc", "dev", "sys", "shared", "etc"] {
            std::fs::create_dir_all(rootfs.join(d)).expect("mkdir");
        }
        let binary = leasekeeper_bin();
        for copy in &c.copies {
            place(&binary, &rootfs, copy);
        }
        let mut programs = vec![binary];
        if app.is_some() {
            for (host, inside) in APP_PROGRAMS {
                place(Path::new(host), &rootfs, inside);
                programs.push(PathBuf::from(host));
            }
        }
        for lib in programs.iter().flat_map(|p| libraries_of(p)) {
            place(&lib, &rootfs, lib.to_str().expect("utf8"));
        }
        for file in &c.files {
            if Path::new(file).exists() {
                place(Path::new(file), &rootfs, file);
            }
        }
        let (user, uid, gid) = &c.user;
        std::fs::write(
            rootfs.join("etc/passwd"),
            format!("root:x:0:0:root:/root:/sbin/nologin\n{user}:x:{uid}:{gid}:{user}:/home/{user}:/sbin/nologin\n"),
        )
        .expect("passwd");
        std::fs::write(
            rootfs.join("etc/group"),
            format!("root:x:0:\n{user}:x:{gid}:\n"),
        )
        .expect("group");
        let spec = Command::new("runc")
            .args(["spec", "--bundle"])
            .arg(&bundle)
            .status()
            .expect("runc spec");
        assert!(spec.success(), "runc spec");
        self.write_config(&bundle, args, (*uid, *gid), net);
        if app == Some(Seccomp::NoNewNamespaces) {
            no_new_namespaces(&bundle.join("config.json"));
        }
        bundle
    }

    /// config.json as a Pod runs the sidecar: non-root, read-only root, tmpfs on /tmp,
    /// no capabilities, the shared folder, the host's network.
    fn write_config(&self, bundle: &Path, args: &[String], (uid, gid): (u32, u32), net: &Network) {
        let path = bundle.join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("config")).expect("json");
        let process = &mut config["process"];
        process["terminal"] = false.into();
        process["user"] = serde_json::json!({"uid": uid, "gid": gid});
        process["args"] = serde_json::json!(args);
        process["env"] = serde_json::json!(["PATH=/usr/local/bin:/usr/bin:/bin", "RUST_LOG=info"]);
        for set in ["bounding", "effective", "permitted", "ambient"] {
            process["capabilities"][set] = serde_json::json!([]);
        }
        config["root"]["readonly"] = true.into();
        let mounts = config["mounts"].as_array_mut().expect("mounts");
        mounts.push(
            serde_json::json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777", "size=16m"]}),
        );
        mounts.push(serde_json::json!({"destination": "/shared", "type": "bind",
            "source": self.shared, "options": ["rbind", "rw"]}));
        // The kubelet mounts an /etc/hosts into every container (the image has none).
        let hosts = self.dir.path().join("hosts");
        std::fs::write(
            &hosts,
            "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n",
        )
        .expect("hosts");
        mounts.push(
            serde_json::json!({"destination": "/etc/hosts", "type": "bind",
            "source": hosts, "options": ["rbind", "ro"]}),
        );
        let namespaces = config["linux"]["namespaces"]
            .as_array_mut()
            .expect("namespaces");
        match net {
            Network::Host => namespaces.retain(|ns| ns["type"] != "network"),
            Network::Own => {}
            Network::Of(pid) => {
                for ns in namespaces.iter_mut().filter(|ns| ns["type"] == "network") {
                    ns["path"] = format!("/proc/{pid}/ns/net").into();
                }
            }
        }
        std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("write");
    }

    /// Starts a container (`runc run`, in the foreground: its exit is the container's).
    fn start(&self, name: &str, args: &[String], app: Option<Seccomp>) -> Container {
        self.start_in(name, args, app, Network::Host)
    }

    fn start_in(
        &self,
        name: &str,
        args: &[String],
        app: Option<Seccomp>,
        net: Network,
    ) -> Container {
        let bundle = self.bundle(name, args, app, &net);
        let id = format!(
            "lk-{}-{name}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        );
        self.ids.borrow_mut().push(id.clone());
        let log = bundle.join("output.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = self
            .runc()
            .args(["run", "--bundle"])
            .arg(&bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("runc run");
        Container {
            id,
            child,
            log,
            runc_root: self.runc_root(),
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for id in self.ids.borrow().iter() {
            let _ = self
                .runc()
                .args(["delete", "-f", id])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Puts host file `from` at `inside` in the rootfs (a hard link where it can: the
/// debug binary is large).
fn place(from: &Path, rootfs: &Path, inside: &str) {
    let to = rootfs.join(inside.trim_start_matches('/'));
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    if to.exists() {
        return;
    }
    let from = std::fs::canonicalize(from).expect("canonicalize");
    if std::fs::hard_link(&from, &to).is_err() {
        std::fs::copy(&from, &to).expect("copy");
    }
}

struct Container {
    id: String,
    child: Child,
    log: PathBuf,
    runc_root: PathBuf,
}

impl Container {
    fn runc(&self) -> Command {
        let mut cmd = Command::new("runc");
        cmd.arg("--root").arg(&self.runc_root);
        cmd
    }

    /// The host PID of the container's first process.
    /// The container's init, once `runc state` says it runs (asked for up to 5 s: a
    /// busy machine's `runc state` can fail while `runc run` still holds its state).
    fn running_pid(&self) -> Option<u32> {
        eventually(Duration::from_secs(5), || self.init_pid())
    }

    fn init_pid(&self) -> Option<u32> {
        let out = self.runc().args(["state", &self.id]).output().ok()?;
        let state: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let pid = state["pid"].as_u64()? as u32;
        (pid != 0 && state["status"] == "running").then_some(pid)
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `runc exec` of the image's own binary, as the image's user.
    fn exec(&self, args: &[&str]) -> std::process::Output {
        let c = contents();
        self.runc()
            .args([
                "exec",
                "--user",
                &format!("{}:{}", c.user.1, c.user.2),
                &self.id,
            ])
            .args(args)
            .output()
            .expect("runc exec")
    }

    /// Waits for `runc run` to end: the container's exit code.
    fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        eventually(limit, || self.child.try_wait().ok().flatten()).and_then(|s| s.code())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self
            .runc()
            .args(["delete", "-f", &self.id])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The container is up with the sidecar's `/leader` answering, or why not: a
/// container that runc cannot start here for a reason of this machine (cgroups,
/// namespaces) is a skipped step, anything else a failure.
fn await_leader_json(c: &mut Container, port: u16) -> Result<serde_json::Value, String> {
    let answer = eventually(Duration::from_secs(10), || {
        if let Ok(Some(_)) = c.child.try_wait() {
            return Some(None);
        }
        let (code, body) = common::harness::http::get(port, "/leader")?;
        (code == 200).then(|| serde_json::from_str(&body).ok())
    });
    match answer.flatten() {
        Some(v) => Ok(v),
        None => {
            let out = c.output();
            let machine = ["cgroup", "namespace", "operation not permitted"]
                .iter()
                .any(|w| out.to_lowercase().contains(w) && out.contains("runc"));
            if machine {
                Err(out)
            } else {
                panic!("container {}: /leader never answered: {out}", c.id)
            }
        }
    }
}

fn sidecar_args(identity: &str, port: u16, lock: &str) -> Vec<String> {
    [
        "/usr/local/bin/leasekeeper",
        "--backend",
        "file",
        "--file-path",
        lock,
        "--http-addr",
        &format!("127.0.0.1:{port}"),
        "--identity",
        identity,
        "--ttl",
        "5s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn is_leader(port: u16) -> Option<serde_json::Value> {
    let (_, body) = common::harness::http::get(port, "/leader")?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    (v["is_leader"] == true).then_some(v)
}

/// The first process's user and root mount, as the Pod would set them.
fn assert_runs_as_a_pod_would(pid: u32, uid: u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let uids = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("Uid line");
    assert!(
        uids.split_whitespace().all(|u| u == uid.to_string()),
        "not running as {uid}: {uids}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .expect("a root mount");
    let options = root.split_whitespace().nth(5).unwrap_or("");
    assert!(
        options.split(',').any(|o| o == "ro"),
        "root not read-only: {root}"
    );
}

#[test]
fn the_sidecar_in_a_container_answers_and_hands_over_on_sigterm() {
    if let Some(why) = cannot_run_containers() {
        eprintln!("{why}");
        return;
    }
    let lab = Lab::new();
    let (pa, pb) = (free_port(), free_port());
    let mut a = lab.start("a", &sidecar_args("a", pa, "/shared/lk.lock"), None);
    if let Err(why) = await_leader_json(&mut a, pa) {
        eprintln!("runc cannot run a container on this machine; skipping: {why}");
        return;
    }
    let first = eventually(Duration::from_secs(5), || is_leader(pa))
        .unwrap_or_else(|| panic!("a never led: {}", a.output()));
    assert_eq!(first["leader"], "a", "{first}");
    let pid = a.running_pid().expect("a runs");
    assert_runs_as_a_pod_would(pid, contents().user.1);
    let mut b = lab.start("b", &sidecar_args("b", pb, "/shared/lk.lock"), None);
    await_leader_json(&mut b, pb).expect("b answers");
    let follower = eventually(Duration::from_secs(5), || {
        let (_, body) = common::harness::http::get(pb, "/leader")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (v["state"] == "follower").then_some(v)
    })
    .unwrap_or_else(|| panic!("b never followed: {}", b.output()));
    assert_eq!(follower["leader"], "a", "{follower}");
    // No shell in the image: `leasekeeper status` is how to ask from inside.
    let status = a.exec(&[
        "/usr/local/bin/leasekeeper",
        "status",
        "--url",
        &format!("http://127.0.0.1:{pa}"),
    ]);
    let shown = String::from_utf8_lossy(&status.stdout);
    assert_eq!(
        status.status.code(),
        Some(0),
        "status: {shown} {:?}",
        status.stderr
    );
    assert!(shown.contains("a (leader)"), "{shown}");
    let shell = a.exec(&["/bin/sh", "-c", "true"]);
    assert!(!shell.status.success(), "the image has a shell");
    // SIGTERM to the container: a releases, b leads at once with the next token.
    let token = is_leader(pa).expect("a leads")["fencing_token"]
        .as_u64()
        .expect("token");
    let sent = Instant::now();
    let killed = a
        .runc()
        .args(["kill", &a.id, "TERM"])
        .status()
        .expect("runc kill");
    assert!(killed.success());
    let next = eventually(Duration::from_secs(3), || is_leader(pb))
        .unwrap_or_else(|| panic!("b did not lead within 3 s: {}", b.output()));
    let handover = sent.elapsed();
    assert!(
        next["fencing_token"].as_u64().expect("token") > token,
        "{next}"
    );
    assert_eq!(
        a.wait_exit(Duration::from_secs(5)),
        Some(0),
        "{}",
        a.output()
    );
    assert!(a.output().contains("left the election"), "{}", a.output());
    eprintln!("container a: SIGTERM to b leading in {handover:?}");
}

/// `pid` and every process descending from it (zombies included, which a look at
/// `/proc/P/ns` would miss): (host pid, state, command line).
fn processes_under(pid: u32) -> Vec<(u32, char, String)> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[after + 1..].split_whitespace().collect();
        let state = fields.first().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = fields
            .get(1)
            .and_then(|f| f.parse::<u32>().ok())
            .unwrap_or(0);
        parent_of.push((p, ppid, state));
    }
    let mut found: Vec<(u32, char, String)> = Vec::new();
    let mut wanted = vec![pid];
    while let Some(next) = wanted.pop() {
        for (p, ppid, state) in &parent_of {
            if *p == next || (*ppid == next && *p != pid) {
                if found.iter().any(|(q, _, _)| q == p) {
                    continue;
                }
                let cmdline = std::fs::read(format!("/proc/{p}/cmdline"))
                    .map(|b| {
                        String::from_utf8_lossy(&b)
                            .replace('\0', " ")
                            .trim()
                            .to_owned()
                    })
                    .unwrap_or_default();
                found.push((*p, *state, cmdline));
                if *p != next {
                    wanted.push(*p);
                }
            }
        }
    }
    found
}

#[test]
fn exec_mode_as_pid_1_reaps_and_takes_every_process_with_it() {
    exec_mode_as_pid_1(Seccomp::None);
}

#[test]
fn exec_mode_as_pid_1_without_new_namespaces_reaps_and_takes_every_process_with_it() {
    exec_mode_as_pid_1(Seccomp::NoNewNamespaces);
}

fn exec_mode_as_pid_1(seccomp: Seccomp) {
    if let Some(why) = cannot_run_containers() {
        eprintln!("{why}");
        return;
    }
    let lab = Lab::new();
    let port = free_port();
    let mut args = sidecar_args("c", port, "/shared/c.lock");
    args.insert(1, "run".to_owned());
    // A worker that leaves CMD's process (an orphan, as a daemon would), one that
    // becomes an orphan and exits (a zombie unless PID 1 reaps it), then CMD itself.
    args.extend(
        [
            "--",
            "/bin/sh",
            "-c",
            "(sleep 1001 &); (sleep 0.2 &); exec sleep 1002",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut c = lab.start("c", &args, Some(seccomp));
    if let Err(why) = await_leader_json(&mut c, port) {
        eprintln!("runc cannot run a container on this machine; skipping: {why}");
        return;
    }
    let init = c.running_pid().expect("c runs");
    let worker = eventually(Duration::from_secs(5), || {
        processes_under(init)
            .into_iter()
            .find(|(_, _, cmd)| cmd == "sleep 1001")
    })
    .unwrap_or_else(|| panic!("no worker: {:?} {}", processes_under(init), c.output()));
    // The orphan that exited is reaped: no zombie stays in the container.
    let reaped = eventually(Duration::from_secs(5), || {
        let procs = processes_under(init);
        let done = procs.iter().any(|(_, _, cmd)| cmd == "sleep 1002")
            && !procs
                .iter()
                .any(|(_, s, cmd)| *s == 'Z' || cmd == "sleep 0.2");
        done.then_some(())
    });
    assert!(
        reaped.is_some(),
        "a zombie or the short orphan stays: {:?}",
        processes_under(init)
    );
    // SIGKILL to PID 1 from outside: every process of the container ends with it.
    let inside = processes_under(init);
    eprintln!("container c ({seccomp:?}) before SIGKILL to its PID 1: {inside:?}");
    // CMD's own PID namespace: a process one namespace deeper than the container's.
    let own_namespace = inside
        .iter()
        .any(|(p, _, _)| pid_namespace_depth(*p) > pid_namespace_depth(init));
    assert_eq!(own_namespace, seccomp == Seccomp::None, "{}", c.output());
    common::send_signal(init, libc::SIGKILL);
    let gone = eventually(Duration::from_secs(5), || {
        inside
            .iter()
            .all(|(p, _, _)| matches!(process_state(*p), None | Some('Z') | Some('X')))
            .then_some(())
    });
    assert!(
        gone.is_some(),
        "processes outlived the container's PID 1: {:?} (worker {})",
        inside
            .iter()
            .map(|(p, _, cmd)| (p, process_state(*p), cmd))
            .collect::<Vec<_>>(),
        worker.0
    );
    let _ = c.wait_exit(Duration::from_secs(5));
}

/// How many PID namespaces `pid` is in (the pids of `NSpid` in its status).
fn pid_namespace_depth(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .map(|l| l.split_whitespace().count())
        })
        .unwrap_or(0)
}

/// As in a Pod: the app container has the network namespace, the sidecar container
/// joins it, and the app asks `localhost:4040` (the default address) from its own
/// container; the host cannot reach it.
#[test]
fn the_app_container_asks_the_sidecar_on_the_pods_localhost() {
    if let Some(why) = cannot_run_containers() {
        eprintln!("{why}");
        return;
    }
    let lab = Lab::new();
    let sleep = ["/bin/sleep", "1003"].map(String::from);
    let app = lab.start_in("app", &sleep, Some(Seccomp::None), Network::Own);
    let Some(app_pid) = eventually(Duration::from_secs(10), || app.init_pid()) else {
        let out = app.output();
        eprintln!("runc cannot run a container with its own network here; skipping: {out}");
        return;
    };
    let args = [
        "/usr/local/bin/leasekeeper",
        "--backend",
        "file",
        "--file-path",
        "/shared/pod.lock",
        "--identity",
        "pod-a",
    ]
    .map(String::from);
    let mut sidecar = lab.start_in("sidecar", &args, None, Network::Of(app_pid));
    let asked = eventually(Duration::from_secs(10), || {
        if let Ok(Some(_)) = sidecar.child.try_wait() {
            return Some(None);
        }
        let out = app.exec(&["/usr/local/bin/leasekeeper", "status", "--json"]);
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        // `status` exits 0 only when the sidecar it asked leads.
        (answer["is_leader"] == true && out.status.code() == Some(0)).then_some(Some(answer))
    })
    .flatten()
    .unwrap_or_else(|| panic!("the app never saw its sidecar lead: {}", sidecar.output()));
    assert_eq!(asked["identity"], "pod-a", "{asked}");
    let ns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/net")).expect("ns");
    let sidecar_pid = sidecar.running_pid().expect("sidecar runs");
    assert_eq!(ns(sidecar_pid), ns(app_pid), "one network namespace");
    assert_ne!(ns(sidecar_pid), ns(std::process::id()), "not the host's");
    let killed = sidecar
        .runc()
        .args(["kill", &sidecar.id, "TERM"])
        .status()
        .expect("runc kill");
    assert!(killed.success());
    assert_eq!(
        sidecar.wait_exit(Duration::from_secs(5)),
        Some(0),
        "{}",
        sidecar.output()
    );
    let _ = app.runc().args(["kill", &app.id, "KILL"]).status();
}
