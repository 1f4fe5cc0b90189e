//! Bad input ends in one clear line naming the setting and a non-zero exit,
//! before anything is touched — never a panic.

use crate::common;

/// docs/benchmarks.md's model and renderer (benches/handover/page.rs) and its tests
/// (page_tests.rs), here so that `make test` runs them; the bench uses the rest of it.
#[allow(dead_code)]
#[path = "../../benches/handover/page.rs"]
mod page;
#[path = "../../benches/handover/page_tests.rs"]
mod page_tests;

use common::run_to_exit;

fn assert_one_line_error(args: &[&str], env: &[(&str, &str)], mention: &str) {
    let (code, _out, err) = run_to_exit(args, env);
    assert_eq!(code, Some(2), "{args:?}: exit {code:?}, stderr {err:?}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line: {err:?}");
    assert!(lines[0].starts_with("error: "), "{args:?}: {err:?}");
    assert!(
        lines[0].contains(mention),
        "{args:?}: {err:?} does not mention {mention:?}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

#[test]
fn bad_flags_each_give_one_line() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("missing");
    let missing = missing.to_str().expect("utf8");
    let cases: &[(&[&str], &str)] = &[
        (&["--backend", "zookeepr"], "--backend"),
        (&["--ttl", "fast"], "--ttl"),
        (
            &["--ttl", "2s", "--renew-interval", "3s"],
            "--renew-interval",
        ),
        (&["--retry-interval", "-1s"], "--retry-interval"),
        (&["--backend", "redis"], "--redis-url"),
        (
            &["--backend", "redis", "--redis-url", "redis://[::1"],
            "--redis-url",
        ),
        (
            &[
                "--backend",
                "redis",
                "--redis-url",
                "redis://127.0.0.1:1",
                "--redis-password-file",
                missing,
            ],
            "--redis-password-file",
        ),
        (&["--http-addr", "localhost"], "--http-addr"),
        (&["--election", "UPPER"], "--election"),
        (&["--identity", ""], "--identity"),
        (&["--log-format", "yaml"], "--log-format"),
        (&["--config", missing], "--config"),
        (&["--frobnicate"], "--frobnicate"),
        (
            &["--backend", "zookeeper", "--zk-connect", "zk1:2181,:2181"],
            "--zk-connect",
        ),
        (
            &[
                "--backend",
                "zookeeper",
                "--zk-connect",
                "127.0.0.1:2181",
                "--zk-auth-file",
                missing,
            ],
            "--zk-auth-file",
        ),
        (
            &[
                "--backend",
                "redlock",
                "--redis-url",
                "redis://127.0.0.1:1,redis://127.0.0.1:2",
            ],
            "at least 3",
        ),
        (
            &[
                "--backend",
                "redlock",
                "--redis-url",
                "redis://127.0.0.1:1",
                "--redis-url",
                "redis://127.0.0.1:2",
                "--redis-url",
                "redis://127.0.0.1:1",
            ],
            "given twice",
        ),
        (
            &[
                "--backend",
                "redis",
                "--redis-url",
                "redis://:pw@127.0.0.1:1",
            ],
            "--redis-password-file",
        ),
    ];
    for (args, mention) in cases {
        assert_one_line_error(args, &[], mention);
    }
}

#[test]
fn environment_variables_are_read_and_checked() {
    assert_one_line_error(&[], &[("LEASEKEEPER_TTL", "soon")], "--ttl");
    assert_one_line_error(&[], &[("LEASEKEEPER_BACKEND", "consul")], "--backend");
}

#[test]
fn a_taken_port_is_reported_before_the_backend_is_touched() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let dir = tempfile::tempdir().expect("dir");
    let lock = dir.path().join("lock");
    let (code, _, err) = run_to_exit(
        &[
            "--http-addr",
            &addr,
            "--file-path",
            lock.to_str().expect("utf8"),
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--http-addr"), "{err}");
    assert!(!err.contains("panicked"));
    assert!(
        !lock.exists(),
        "the lock file was touched before the listener failed"
    );
}

#[test]
fn help_and_version_exit_zero() {
    let (code, out, _) = run_to_exit(&["--help"], &[]);
    assert_eq!(code, Some(0));
    for flag in [
        "--backend",
        "--election",
        "--ttl",
        "--redis-url",
        "--exit-on-loss",
        "--enable-release-endpoint",
        "--config",
    ] {
        assert!(out.contains(flag), "--help lacks {flag}");
    }
    let (code, out, _) = run_to_exit(&["--version"], &[]);
    assert_eq!(code, Some(0));
    assert!(out.contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn kubernetes_settings_that_cannot_work_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let home = dir.path().to_str().expect("utf8");
    let garbage = dir.path().join("kubeconfig");
    std::fs::write(&garbage, "clusters: [not a kubeconfig").expect("write");
    let garbage = garbage.to_str().expect("utf8");
    // The label needs the Pod's own name.
    assert_one_line_error(&["--pod-label"], &[("POD_NAME", "")], "POD_NAME");
    // A kubeconfig that is not one.
    assert_one_line_error(
        &["--backend", "kubernetes", "--kubeconfig", garbage],
        &[],
        "--kubeconfig",
    );
    // Out of a Pod, without any kubeconfig.
    assert_one_line_error(
        &["--backend", "kubernetes"],
        &[("HOME", home), ("KUBECONFIG", "")],
        "no usable API configuration",
    );
}

#[test]
fn run_without_a_runnable_command_is_refused_at_start() {
    // No `--`, nothing after it, a command that does not exist, one that is no program.
    assert_one_line_error(&["run", "--ttl", "2s"], &[], "after `--`");
    assert_one_line_error(&["run", "--"], &[], "no command");
    assert_one_line_error(
        &["run", "--", "no-such-command-anywhere", "x"],
        &[],
        "no-such-command-anywhere",
    );
    let dir = tempfile::tempdir().expect("dir");
    let plain = dir.path().join("notes.txt");
    std::fs::write(&plain, "not a program").expect("write");
    let plain = plain.to_str().expect("utf8");
    assert_one_line_error(&["run", "--", plain], &[], "not executable");
    // Exec-mode settings without `run`, and a bad grace.
    assert_one_line_error(&["--kill-grace", "3s"], &[], "--kill-grace");
    assert_one_line_error(&["--restart"], &[], "--restart");
    assert_one_line_error(
        &["run", "--kill-grace", "soon", "--", "true"],
        &[],
        "--kill-grace",
    );
    // The usual flags are checked as usual.
    assert_one_line_error(&["run", "--ttl", "fast", "--", "true"], &[], "--ttl");
}

#[test]
fn bad_hook_and_drain_settings_each_give_one_line() {
    for (args, mention) in [
        (&["--notify-url", "ftp://example.com/x"][..], "--notify-url"),
        (&["--notify-url", "not a url"][..], "--notify-url"),
        (
            &["--drain-url", "https://example.com/drain"][..],
            "--drain-url",
        ),
        (&["--drain-timeout", "forever"][..], "--drain-timeout"),
        (&["--hook-timeout", "0s"][..], "--hook-timeout"),
        (&["--on-change", " "][..], "--on-change"),
    ] {
        assert_one_line_error(args, &[], mention);
    }
}

/// `leasekeeper status` against real sidecars, a dead port and a fake Service that
/// answers for two leaders.
#[test]
fn status_subcommand_exit_codes() {
    use common::{eventually, free_port, Sidecar, SidecarArgs};
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path()).ttl("2s").build();
    let a = Sidecar::spawn("status-a", dir.path(), &args);
    a.settles_in("leader", Duration::from_secs(10));
    let b = Sidecar::spawn("status-b", dir.path(), &args);
    b.settles_in("follower", Duration::from_secs(10));
    let url = |s: &Sidecar| format!("http://127.0.0.1:{}", s.port);

    let (code, out, err) = run_to_exit(&["status", "--url", &url(&a)], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("status-a (leader)"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("leader") && l.ends_with("status-a")),
        "{out}"
    );
    let (code, out, err) = run_to_exit(&["status", "--url", &url(&b)], &[]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains("status-b (follower)"), "{out}");
    let (code, out, _) = run_to_exit(&["status", "--json", "--url", &url(&a)], &[]);
    assert_eq!(code, Some(0));
    let json: serde_json::Value = serde_json::from_str(out.trim()).expect("Status JSON");
    assert_eq!(json["leader"], "status-a");
    let (code, out, err) = run_to_exit(&["status", "--samples", "3", "--url", &url(&a)], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("3 answers, one leader: status-a"), "{out}");

    // Nothing listening: 1, one line.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (code, _, err) = run_to_exit(&["status", "--url", &dead], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("refused"), "{err}");

    // A sidecar that cannot reach its store: unknown, 4.
    let redis = format!("redis://127.0.0.1:{}", free_port());
    let c = Sidecar::spawn(
        "status-c",
        dir.path(),
        &SidecarArgs::redis(&redis)
            .ttl("2s")
            .election("status")
            .build(),
    );
    assert!(c.wait_listening(Duration::from_secs(10)));
    let seen = eventually(Duration::from_secs(5), || {
        let (code, _, _) = run_to_exit(&["status", "--url", &url(&c)], &[]);
        (code == Some(4)).then_some(())
    });
    assert!(seen.is_some(), "no unknown state from {}", c.stderr());

    // Two leaders behind one address: 5, naming both.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let who = if i % 2 == 0 { "pod-x" } else { "pod-y" };
            let body = format!(
                r#"{{"election":"e","identity":"{who}","backend":"redis","state":"leader","is_leader":true,"leader":"{who}","fencing_token":{},"lease_expires_in_ms":900,"transitions":1}}"#,
                i % 2 + 1
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let service = format!("http://127.0.0.1:{port}");
    let (code, out, err) = run_to_exit(&["status", "--samples", "4", "--url", &service], &[]);
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(
        err.contains("pod-x (token 1)") && err.contains("pod-y (token 2)"),
        "{err}"
    );
}

#[test]
fn status_subcommand_bad_input() {
    for (args, mention) in [
        (&["status", "--url", "https://127.0.0.1:4040"][..], "--url"),
        (&["status", "--url", "127.0.0.1:4040"][..], "--url"),
        (&["status", "--samples", "0"][..], "--samples"),
        (&["status", "--timeout", "soon"][..], "--timeout"),
        (&["status", "--bogus"][..], "--bogus"),
    ] {
        assert_one_line_error(args, &[], mention);
    }
}

#[test]
fn switchover_subcommand_bad_input() {
    for (args, mention) in [
        (&["switchover"][..], "--to"),
        (&["switchover", "--to", ""][..], "--to"),
        (&["switchover", "--to", "a|b"][..], "--to"),
        (
            &["switchover", "--to", "b", "--url", "https://127.0.0.1:4040"][..],
            "--url",
        ),
        (
            &["switchover", "--to", "b", "--timeout", "0s"][..],
            "--timeout",
        ),
        (
            &["switchover", "--to", "b", "--cooldown", "soon"][..],
            "--cooldown",
        ),
    ] {
        assert_one_line_error(args, &[], mention);
    }
    // Nobody listening: exit 1, one line.
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let (code, _, err) = run_to_exit(&["switchover", "--to", "b", "--url", &dead], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// The SQL backends' settings: each mistake is one line naming its setting, and a
/// password never shows up in it.
#[test]
fn bad_sql_settings_each_give_one_line() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("missing");
    let missing = missing.to_str().expect("utf8");
    let cases: &[(&[&str], &str)] = &[
        (&["--backend", "postgres"], "--postgres-url is required"),
        (&["--backend", "mysql"], "--mysql-url is required"),
        (
            &[
                "--backend",
                "postgres",
                "--postgres-url",
                "postgres://lk:s3cret@127.0.0.1/app",
            ],
            "--sql-password-file",
        ),
        (
            &[
                "--backend",
                "mysql",
                "--mysql-url",
                "mysql://lk:s3cret@127.0.0.1/app",
            ],
            "--sql-password-file",
        ),
        (
            &[
                "--backend",
                "postgres",
                "--postgres-url",
                "redis://127.0.0.1/app",
            ],
            "--postgres-url",
        ),
        (
            &[
                "--backend",
                "mysql",
                "--mysql-url",
                "mysql://lk@127.0.0.1:3306",
            ],
            "--mysql-url",
        ),
        (
            &[
                "--backend",
                "postgres",
                "--postgres-url",
                "postgres://lk@127.0.0.1/app",
                "--sql-table",
                "leases; drop table x",
            ],
            "--sql-table",
        ),
        (
            &[
                "--backend",
                "postgres",
                "--postgres-url",
                "postgres://lk@127.0.0.1/app",
                "--sql-password-file",
                missing,
            ],
            "--sql-password-file",
        ),
        (
            &[
                "--backend",
                "mysql",
                "--mysql-url",
                "mysql://lk@127.0.0.1/app",
                "--sql-ca-file",
                missing,
            ],
            "--sql-ca-file",
        ),
        (
            &[
                "--backend",
                "postgres",
                "--postgres-url",
                "postgres://lk@127.0.0.1/app",
                "--sql-key-file",
                missing,
            ],
            "--sql-key-file needs --sql-cert-file",
        ),
    ];
    for (args, mention) in cases {
        assert_one_line_error(args, &[], mention);
        let (_, _, err) = run_to_exit(args, &[]);
        assert!(!err.contains("s3cret"), "{args:?}: {err}");
    }
    // The same settings from the environment and from the YAML file.
    assert_one_line_error(
        &["--backend", "postgres"],
        &[(
            "LEASEKEEPER_POSTGRES_URL",
            "postgres://lk:s3cret@127.0.0.1/app",
        )],
        "--sql-password-file",
    );
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "backend: mysql\nmysql-url: mysql://lk@127.0.0.1/app\nsql-table: Bad.Table\n",
    )
    .expect("write");
    assert_one_line_error(
        &["--config", config.to_str().expect("utf8")],
        &[],
        "--sql-table",
    );
}

/// A setting is read from the flag, else the environment, else the `--config` file;
/// the keys that once were missing from the file (`on-change`, the drain, exec mode's
/// flags) are read like any other.
#[test]
fn flags_beat_the_environment_which_beats_the_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("lk.yaml");
    let config = path.to_str().expect("utf8");
    std::fs::write(&path, "http-addr: from-file\n").expect("write");
    let env = [("LEASEKEEPER_HTTP_ADDR", "from-env")];
    let with_flag = ["--config", config, "--http-addr", "from-flag"];
    assert_one_line_error(&with_flag, &env, "\"from-flag\"");
    assert_one_line_error(&["--config", config], &env, "\"from-env\"");
    assert_one_line_error(&["--config", config], &[], "\"from-file\"");
    let file_only: &[(&str, &str)] = &[
        ("on-change: \" \"\n", "--on-change is empty"),
        ("notify-url: nowhere\n", "--notify-url \"nowhere\""),
        ("hook-timeout: soon\n", "--hook-timeout"),
        ("drain-url: ftp://x\n", "--drain-url \"ftp://x\""),
        ("drain-timeout: 0s\n", "--drain-timeout"),
        (
            "kill-grace: 5s\n",
            "kill-grace is a key of `leasekeeper run",
        ),
        ("restart: true\n", "restart is a key of `leasekeeper run"),
        ("ttl: [1s, 2s]\n", "ttl: takes one value"),
        ("frobnicate: 1\n", "unknown key \"frobnicate\""),
    ];
    for (yaml, mention) in file_only {
        std::fs::write(&path, yaml).expect("write");
        assert_one_line_error(&["--config", config], &[], mention);
    }
}

const SUBCOMMANDS: [&str; 5] = ["run", "status", "switchover", "completions", "man"];

/// The lines of a help text's "Commands:" list.
fn command_lines(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_owned())
        .collect()
}

#[test]
fn help_lists_every_subcommand_with_one_line() {
    for args in [&["--help"][..], &["help"], &["-h"]] {
        let (code, out, err) = run_to_exit(args, &[]);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        let lines = command_lines(&out);
        for sub in SUBCOMMANDS {
            let line = lines
                .iter()
                .find(|l| l.split_whitespace().next() == Some(sub))
                .unwrap_or_else(|| panic!("{args:?}: {sub} not listed in {out}"));
            assert!(
                line.len() > sub.len() + 10,
                "{sub}: no description: {line:?}"
            );
        }
    }
}

#[test]
fn help_of_each_subcommand_exits_zero() {
    for sub in SUBCOMMANDS {
        for args in [vec!["help", sub], vec![sub, "--help"]] {
            let (code, out, err) = run_to_exit(&args, &[]);
            assert_eq!(code, Some(0), "{args:?}: {err}");
            assert!(
                out.contains(&format!("leasekeeper {sub}")),
                "{args:?}: usage does not name the subcommand: {out}"
            );
        }
    }
    // run's help: its own flags and the `-- CMD` form, not "no command".
    let (code, out, err) = run_to_exit(&["run", "--help"], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("leasekeeper run [OPTIONS] -- CMD"), "{out}");
    for flag in ["--kill-grace", "--restart", "--ttl", "--backend"] {
        assert!(out.contains(flag), "run --help lacks {flag}: {out}");
    }
    let (code, _, err) = run_to_exit(&["help", "no-such-subcommand"], &[]);
    assert_eq!(code, Some(2));
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn completions_for_each_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = run_to_exit(&["completions", shell], &[]);
        assert_eq!(code, Some(0), "{shell}: {err}");
        for word in ["switchover", "status", "election", "renew-interval"] {
            assert!(out.contains(word), "{shell}: no {word} in the script");
        }
    }
    // The bash script is bash.
    let dir = tempfile::tempdir().expect("dir");
    let script = dir.path().join("lk.bash");
    std::fs::write(&script, run_to_exit(&["completions", "bash"], &[]).1).expect("write");
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .expect("bash");
    assert!(checked.success(), "bash -n rejects the completion script");
    assert_one_line_error(&["completions", "tcsh"], &[], "tcsh");
    assert_one_line_error(&["completions"], &[], "SHELL");
}

#[test]
fn the_man_page_is_roff_from_the_same_definitions() {
    for args in [&["man"][..], &["man", "run"]] {
        let (code, out, err) = run_to_exit(args, &[]);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(
            out.starts_with(".ie") || out.starts_with(".TH"),
            "{args:?}: {out:.200}"
        );
        assert!(
            out.lines().any(|l| l.starts_with(".TH ")),
            "{args:?}: no .TH"
        );
        assert!(out.contains("election"), "{args:?}: no --election");
        // Rendered by the roff a man page reader uses, when it is installed.
        let Ok(mut nroff) = std::process::Command::new("nroff")
            .args(["-man", "-Tutf8", "-ww"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!("nroff is not installed: the man page is not rendered");
            continue;
        };
        use std::io::Write;
        nroff
            .stdin
            .take()
            .expect("stdin")
            .write_all(out.as_bytes())
            .expect("write");
        let shown = nroff.wait_with_output().expect("nroff");
        let text = String::from_utf8_lossy(&shown.stdout);
        let warnings = String::from_utf8_lossy(&shown.stderr);
        assert!(
            shown.status.success() && warnings.trim().is_empty(),
            "{warnings}"
        );
        assert!(
            text.contains("NAME") && text.contains("leasekeeper"),
            "{text}"
        );
    }
    let (_, top, _) = run_to_exit(&["man"], &[]);
    for sub in ["run", "status", "switchover"] {
        assert!(
            top.contains(&format!("leasekeeper\\-{sub}")) || top.contains(sub),
            "{sub}"
        );
    }
    assert_one_line_error(&["man", "bogus"], &[], "bogus");
}

/// `run` binds no port unless asked, so copies of a non-blocking `run` on one host do
/// not stand in each other's way: while one holds the lease, every other one exits 75
/// (with `--wait-timeout 0` as a flag or as `LEASEKEEPER_WAIT_TIMEOUT`), and none of
/// their commands runs.
#[test]
fn every_non_blocking_run_on_a_host_exits_75_while_the_lease_is_held() {
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("dir");
    let lock = dir.path().join("nightly.lock");
    let lock = lock.to_str().expect("utf8");
    let holding = dir.path().join("holding");
    let mut holder = Command::new(common::leasekeeper_bin())
        .args([
            "run",
            "--file-path",
            lock,
            "--identity",
            "holder",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!("touch {}; exec sleep 60", holding.display()))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    let held = common::eventually(Duration::from_secs(10), || holding.exists().then_some(()));
    if held.is_none() {
        let _ = holder.kill();
        let out = holder.wait_with_output().expect("holder");
        panic!(
            "the holder never ran its command: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let copies: Vec<_> = (0..3)
        .map(|i| {
            let ran = dir.path().join(format!("ran-{i}"));
            let mut c = Command::new(common::leasekeeper_bin());
            c.args([
                "run",
                "--file-path",
                lock,
                "--identity",
                &format!("copy-{i}"),
            ]);
            match i {
                0 => c.env("LEASEKEEPER_WAIT_TIMEOUT", "0"),
                _ => c.args(["--wait-timeout", "0"]),
            };
            c.args(["--", "touch"])
                .arg(&ran)
                .env_remove("KUBERNETES_SERVICE_HOST")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            (ran, c.spawn().expect("spawn a copy"))
        })
        .collect();
    for (ran, copy) in copies {
        let out = copy.wait_with_output().expect("a copy");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(75), "{}: {err}", ran.display());
        assert!(!ran.exists(), "{}: the command ran: {err}", ran.display());
    }
    common::send_signal(holder.id(), libc::SIGTERM);
    let out = holder.wait_with_output().expect("holder");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--kill-grace`, `--restart` and `--wait-timeout` are flags of `run`: listed by
/// `run --help` alone, refused at the top level with one line that says where they go.
#[test]
fn run_only_flags_are_flags_of_run_alone() {
    let run_only = ["--kill-grace", "--restart", "--wait-timeout"];
    let (code, top, _) = run_to_exit(&["--help"], &[]);
    assert_eq!(code, Some(0));
    let (code, run, _) = run_to_exit(&["run", "--help"], &[]);
    assert_eq!(code, Some(0));
    for flag in run_only {
        assert!(!top.contains(flag), "--help lists {flag}:\n{top}");
        assert!(run.contains(flag), "run --help lacks {flag}:\n{run}");
    }
    for args in [
        &["--kill-grace", "3s"][..],
        &["--restart"],
        &["--wait-timeout=0"],
    ] {
        assert_one_line_error(args, &[], "leasekeeper run");
    }
    // Without a listener there is no POST /release to allow.
    assert_one_line_error(
        &["run", "--enable-release-endpoint", "--", "true"],
        &[],
        "--enable-release-endpoint needs --http-addr",
    );
}

/// Every `--help` fits a terminal of 100 columns, whatever `COLUMNS` says, and is no
/// longer than it needs to be; the election's default is shown.
#[test]
fn help_lines_fit_a_terminal() {
    let mut pages: Vec<Vec<&str>> = vec![vec!["--help"], vec!["help"]];
    for sub in SUBCOMMANDS.iter().chain(&["inject"]) {
        pages.push(vec![sub, "--help"]);
    }
    for args in &pages {
        for columns in [None, Some("250")] {
            let env: Vec<(&str, &str)> = columns.iter().map(|c| ("COLUMNS", *c)).collect();
            let (code, out, err) = run_to_exit(args, &env);
            assert_eq!(code, Some(0), "{args:?}: {err}");
            let wide: Vec<&str> = out.lines().filter(|l| l.chars().count() > 100).collect();
            assert!(
                wide.is_empty(),
                "{args:?}: {} lines over 100 columns: {wide:#?}",
                wide.len()
            );
        }
    }
    let (_, top, _) = run_to_exit(&["--help"], &[]);
    let lines = top.lines().count();
    assert!(lines <= 120, "--help is {lines} lines");
    let election = top
        .lines()
        .skip_while(|l| !l.contains("--election"))
        .take(2)
        .collect::<String>();
    assert!(election.contains("[default: leasekeeper]"), "{election}");
}

/// `leasekeeper man` (and each subcommand's page) has EXIT STATUS, ENVIRONMENT and
/// EXAMPLES sections, drawn from the same tables as the docs.
#[test]
fn the_man_page_has_exit_status_environment_and_examples() {
    let sidecar_env = &["LEASEKEEPER_TTL", "POD_NAME", "POD_NAMESPACE", "RUST_LOG"][..];
    for (args, codes, vars) in [
        (&["man"][..], &["75", "CMD"][..], sidecar_env),
        (&["man", "run"], &["75", "CMD"], sidecar_env),
        (&["man", "status"], &["5"], &["LEASEKEEPER_STATUS_URL"]),
        (
            &["man", "inject"],
            &["1"],
            &["LEASEKEEPER_INJECT_LISTEN_ADDR"],
        ),
    ] {
        let (code, out, err) = run_to_exit(args, &[]);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        let sections: Vec<&str> = out.lines().filter(|l| l.starts_with(".SH")).collect();
        for want in ["EXIT STATUS", "ENVIRONMENT", "EXAMPLES"] {
            assert!(
                sections.iter().any(|s| s.contains(want)),
                "{args:?}: no {want} in {sections:?}"
            );
        }
        let exit_status: String = out
            .split(".SH")
            .find(|s| s.contains("EXIT STATUS"))
            .unwrap_or_default()
            .to_owned();
        for code in codes {
            assert!(
                exit_status.contains(code),
                "{args:?}: no {code} in {exit_status}"
            );
        }
        for var in vars {
            assert!(out.contains(var), "{args:?}: ENVIRONMENT lacks {var}");
        }
    }
}
