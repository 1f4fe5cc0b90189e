//! Shared and exclusive holders (`--mode`) on every store with a read-write lock,
//! against the real servers: the scenario of `common/modes.rs` (three shared
//! holders, a writer that waits for them and keeps later readers out, an election's
//! candidate as a writer, kill -9, SIGTERM and SIGSTOP), checked on the transition
//! logs; and the settings refused.

mod common;

use std::time::Duration;

use common::modes::shared_and_exclusive;
use common::{run_to_exit, SidecarArgs};

const GRACEFUL: Duration = Duration::from_secs(2);

#[test]
fn shared_and_exclusive_on_file() {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path()).ttl("2s").election("rw");
    shared_and_exclusive(args, Duration::from_secs(2), GRACEFUL, false);
}

/// Bad `--mode` values, `--mode` with several slots, and `--mode` on a store without
/// a read-write lock are refused with one line naming the setting.
#[test]
fn bad_mode_settings_are_refused_with_one_line() {
    for (args, needle) in [
        (vec!["--mode", "read"], "--mode \"read\""),
        (
            vec!["--mode", "shared", "--holders", "2"],
            "--mode shared with --holders",
        ),
        (
            vec![
                "--backend",
                "redis",
                "--redis-url",
                "redis://127.0.0.1:1",
                "--mode",
                "exclusive",
            ],
            "--mode exclusive: the redis backend",
        ),
    ] {
        let (code, _, err) = run_to_exit(&args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
