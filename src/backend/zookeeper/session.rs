//! The ZooKeeper session's I/O: opening it (through the session's own relay in
//! plaintext, see `transport`, or directly with TLS), the election's node, waiting
//! for a close, and the names and ACLs of the nodes a session creates.

use std::time::Duration;

use zookeeper_client::{
    Acls, Client, Connector, CreateMode, SessionState, StateWatcher, TlsOptions,
};

use super::super::{BackendError, LockMode};
use super::rules;
use super::settings::{ZkSettings, ZkTls};
use super::transport::Relay;
use crate::settings::fmt_d;

/// A library error as the backend's, for the operation `op`.
pub(super) fn zk(op: &'static str) -> impl FnOnce(zookeeper_client::Error) -> BackendError {
    move |e| BackendError::Store {
        op,
        message: e.to_string(),
    }
}

/// Nodes we create: open to anyone, or, with digest auth, only to that identity
/// (so a client without the credentials can neither join nor delete our nodes).
pub(super) fn acls(settings: &ZkSettings) -> Acls<'static> {
    if settings.digest.is_some() {
        Acls::creator_all()
    } else {
        Acls::anyone_all()
    }
}

/// Whether a session in `state` is over: a new one is needed.
pub(super) fn ended(state: SessionState) -> bool {
    matches!(
        state,
        SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
    )
}

/// A connector asking for the session timeout `requested`, with the digest auth.
fn connector(settings: &ZkSettings, requested: Duration) -> Connector {
    let mut connector = Client::connector().with_session_timeout(requested);
    if let Some((user, password)) = &settings.digest {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    connector
}

fn tls_options(tls: &ZkTls) -> Result<TlsOptions, BackendError> {
    let mut options = TlsOptions::new()
        .with_pem_ca(&tls.ca_pem)
        .map_err(zk("connect"))?;
    if let Some((cert, key)) = &tls.identity {
        options = options
            .with_pem_identity(cert, key)
            .map_err(zk("connect"))?;
    }
    Ok(options)
}

/// A new session. In plaintext, through a relay of its own, kept in `relay` before
/// the connect is awaited (a campaign dropped meanwhile leaves it for the backend's
/// `forget` to close).
pub(super) async fn connect(
    settings: &ZkSettings,
    requested: Duration,
    relay: &mut Option<Relay>,
) -> Result<Client, BackendError> {
    let connector = connector(settings, requested);
    let client = match &settings.tls {
        Some(tls) => {
            let options = tls_options(tls)?;
            let connector = connector.with_tls(options);
            connector.secure_connect(&settings.connect).await
        }
        None => {
            let opened = Relay::open(&settings.connect).await.map_err(no_relay)?;
            let connect = opened.connect.clone();
            *relay = Some(opened);
            connector.connect(&connect).await
        }
    };
    client.map_err(zk("connect"))
}

fn no_relay(e: std::io::Error) -> BackendError {
    BackendError::Store {
        op: "connect",
        message: format!("no loopback relay for the session: {e}"),
    }
}

/// The ttl of a new session: the timeout the server negotiated (logged when it is not
/// the one asked for), never more than asked.
pub(super) fn negotiated_ttl(requested: Duration, negotiated: Duration) -> Duration {
    if negotiated != requested {
        tracing::warn!(
            requested = %fmt_d(requested),
            negotiated = %fmt_d(negotiated),
            "zookeeper negotiated another session timeout; it is the ttl now"
        );
    }
    negotiated.min(requested)
}

/// The election's node, created when missing.
pub(super) async fn ensure_dir(
    client: &Client,
    dir: &str,
    settings: &ZkSettings,
) -> Result<(), BackendError> {
    let options = CreateMode::Persistent.with_acls(acls(settings));
    match client.mkdir(dir, &options).await {
        Ok(()) | Err(zookeeper_client::Error::NodeExists) => Ok(()),
        Err(e) => Err(zk("connect")(e)),
    }
}

/// Waits for the session to end; `true` when the library closed it (the server
/// answered the close), `false` when it ended otherwise (expired, or refused).
pub(super) async fn closed(events: &mut StateWatcher) -> bool {
    let mut state = events.peek_state();
    loop {
        if let Some(closed) = close_ended(state) {
            return closed;
        }
        state = events.changed().await;
    }
}

/// How a session in `state` ended after our close: closed (`true`), expired or refused
/// (`false`), or not yet (`None`).
fn close_ended(state: SessionState) -> Option<bool> {
    match state {
        SessionState::Closed => Some(true),
        SessionState::Expired | SessionState::AuthFailed => Some(false),
        _ => None,
    }
}

/// A release's answer: the close was answered (`closed`), or the session ended
/// otherwise and our node goes with its expiry.
pub(super) fn close_answer(closed: bool) -> Result<(), BackendError> {
    closed.then_some(()).ok_or_else(|| BackendError::Store {
        op: "release",
        message: "the session ended without closing; our node goes with its expiry".into(),
    })
}

/// A new session's protection prefix: `_c_<uuid>-latch-` (`__READ__` or `__WRIT__`
/// for `--mode`, as Curator's `InterProcessReadWriteLock` names them).
pub(super) fn new_prefix(mode: LockMode) -> String {
    let kind = match mode {
        LockMode::Election => "latch-",
        LockMode::Exclusive => rules::WRITE,
        LockMode::Shared => rules::READ,
    };
    let n: u128 = rand::random();
    let hex = format!("{n:032x}");
    // Curator: _c_<uuid>-latch- (the uuid in its usual 8-4-4-4-12 form), ours with
    // our tag as the first group (96 random bits left).
    format!(
        "_c_{}-{}-{}-{}-{}-{kind}",
        rules::OUR_TAG,
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_names_and_sequences() {
        let p = new_prefix(LockMode::Election);
        assert!(p.starts_with("_c_") && p.ends_with("-latch-"), "{p}");
        assert!(rules::announces(&format!("{p}0000000042")), "{p}");
        assert_eq!(p.len(), "_c_".len() + 36 + "-latch-".len());
        assert_eq!(rules::sequence_of(&format!("{p}0000000042")), Some(42));
    }

    #[test]
    fn a_close_ends_closed_expired_or_not_yet() {
        assert_eq!(close_ended(SessionState::Closed), Some(true));
        assert_eq!(close_ended(SessionState::Expired), Some(false));
        assert_eq!(close_ended(SessionState::AuthFailed), Some(false));
        assert_eq!(close_ended(SessionState::SyncConnected), None);
        assert_eq!(close_ended(SessionState::Disconnected), None);
    }
}
