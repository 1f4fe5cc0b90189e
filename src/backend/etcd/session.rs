//! The etcd backend's connection and lease: one endpoint at a time, the lease with its
//! keep-alive stream, and the round trips of a keep-alive. When a keep-alive may go
//! out is `rules::Pace`'s to say; this module only sends it and waits.

use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, Identity, LeaseGrantOptions, LeaseKeepAliveResponse,
    LeaseKeepAliveStream, LeaseKeeper, TlsOptions,
};
use tokio::time::Instant;

use super::super::BackendError;
use super::requests::{cancelled, etcd};
use super::rules::{self, Before, Pace};
use super::settings::EtcdSettings;

/// The client's options: timeouts of `op_timeout`, HTTP/2 pings every
/// `renew_interval`, and the credentials and TLS material of `settings`.
fn connect_options(
    settings: &EtcdSettings,
    renew_interval: Duration,
    op_timeout: Duration,
) -> ConnectOptions {
    let mut options = ConnectOptions::new()
        .with_timeout(op_timeout)
        .with_connect_timeout(op_timeout)
        .with_keep_alive(renew_interval, op_timeout);
    if let Some((user, password)) = &settings.user {
        options = options.with_user(user.clone(), password.clone());
    }
    if let Some(ca) = &settings.ca_pem {
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        if let Some((cert, key)) = &settings.client_pem {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        options = options.with_tls(tls);
    }
    options
}

/// The connection: one endpoint at a time, so that a member that accepts connections
/// but never answers (SIGSTOPped, partitioned) is left for the next one.
pub(super) struct Link {
    endpoints: Vec<String>,
    options: ConnectOptions,
    client: Option<Client>,
    current: usize,
    /// Set while an operation runs; still set at the next one when the elector
    /// cancelled it on its timeout, which counts as a failure of this endpoint.
    in_flight: bool,
    pub(super) op_timeout: Duration,
}

impl Link {
    pub(super) fn new(
        settings: &EtcdSettings,
        renew_interval: Duration,
        op_timeout: Duration,
    ) -> Link {
        Link {
            endpoints: settings.endpoints.clone(),
            options: connect_options(settings, renew_interval, op_timeout),
            client: None,
            current: 0,
            in_flight: false,
            op_timeout,
        }
    }

    /// The client, connecting lazily (an unreachable cluster is retried by the elector).
    pub(super) async fn client(&mut self) -> Result<Client, BackendError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoint = self.endpoints[self.current % self.endpoints.len()].clone();
        let client = Client::connect([endpoint], Some(self.options.clone()))
            .await
            .map_err(etcd("connect"))?;
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Leaves the current endpoint: the next call connects to the next one.
    pub(super) fn next_endpoint(&mut self) {
        self.client = None;
        self.current = (self.current + 1) % self.endpoints.len();
    }

    /// Starts an operation; `true`: a previous one never finished (the elector
    /// cancelled it on its timeout), so this endpoint is to be left.
    pub(super) fn begin(&mut self) -> bool {
        std::mem::replace(&mut self.in_flight, true)
    }

    /// Ends an operation.
    pub(super) fn end(&mut self) {
        self.in_flight = false;
    }
}

/// Our place in the queue: a lease, its keep-alive stream and (once put) our key.
pub(super) struct Session {
    pub(super) lease: i64,
    /// The keep-alive stream; reopened after it broke with its connection.
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    pub(super) key: String,
    /// Create revision of our key; 0 until it is put.
    pub(super) revision: i64,
    /// The keep-alive in flight, and when a follower's next is due.
    pub(super) pace: Pace,
}

impl Session {
    /// The session of `lease`, its keep-alive stream opened at `at.0` (`at.1`: how
    /// often a follower keeps it alive); our key goes under `dir`, not placed yet.
    fn new(
        lease: i64,
        stream: (LeaseKeeper, LeaseKeepAliveStream),
        dir: &str,
        at: (Instant, Duration),
    ) -> Session {
        let (now, every) = at;
        Session {
            lease,
            stream: Some(stream),
            key: format!("{dir}{lease:x}"),
            revision: 0,
            pace: Pace::new(now, every),
        }
    }

    /// Whether the keep-alive stream is open.
    pub(super) fn has_stream(&self) -> bool {
        self.stream.is_some()
    }

    /// The connection went, and the stream with it; what it carried may still reach
    /// the server.
    pub(super) fn stream_lost(&mut self) {
        self.stream = None;
        self.pace.stream_lost();
    }
}

/// Grants a lease of `ttl_secs`, with a tagged id (see `rules::announces`; taken
/// already, 1 in 2^40, or refused: one that etcd picks), and opens its keep-alive
/// stream; our key goes under `dir`, and a follower keeps the lease alive `every` so
/// often. The session, and the ttl granted.
pub(super) async fn grant(
    client: &mut Client,
    ttl_secs: i64,
    dir: &str,
    every: Duration,
) -> Result<(Session, i64), BackendError> {
    let tagged = LeaseGrantOptions::new().with_id(rules::tagged_lease_id(rand::random()));
    let granted = match client.lease_grant(ttl_secs, Some(tagged)).await {
        Ok(g) => g,
        Err(_) => client
            .lease_grant(ttl_secs, None)
            .await
            .map_err(etcd("campaign"))?,
    };
    warn_of_another_ttl(ttl_secs, granted.ttl());
    let lease = granted.id();
    let stream = client
        .lease_keep_alive(lease)
        .await
        .map_err(etcd("campaign"))?;
    let session = Session::new(lease, stream, dir, (Instant::now(), every));
    Ok((session, granted.ttl()))
}

/// Warns when etcd granted another ttl than `requested`.
fn warn_of_another_ttl(requested: i64, granted: i64) {
    if granted != requested {
        tracing::warn!(requested, granted, "etcd granted another lease ttl");
    }
}

/// Why a keep-alive round trip gave no answer.
pub(super) enum Unanswered {
    /// No answer in time, or none may be sent yet (`Before::HoldBack`).
    Late,
    /// The stream failed (it is dropped: a new one next time).
    Store(etcd_client::Error),
}

/// One keep-alive round trip on the session's open stream, answered by `until`
/// (`renew`: a leader's; `ttl`: the lease's), as the session's pace allows: first the
/// answer still pending on this stream, if any (it proves nothing about this call).
/// The ttl answered (`None`: the stream ended).
pub(super) async fn exchange(
    s: &mut Session,
    renew: bool,
    until: Instant,
    ttl: Duration,
) -> Result<Option<i64>, Unanswered> {
    let Session { stream, pace, .. } = s;
    let Some((keeper, answers)) = stream.as_mut() else {
        return Err(Unanswered::Late);
    };
    let answer = async {
        match pace.before(renew, Instant::now(), ttl) {
            Before::Drain => {
                let drained = tokio::time::timeout_at(until, answers.message()).await;
                drained.map_err(|_| None)?.map_err(Some)?;
            }
            Before::HoldBack => return Err(None),
            Before::Send => {}
        }
        pace.answered();
        keeper.keep_alive().await.map_err(Some)?;
        pace.sent(Instant::now(), true);
        let answer = tokio::time::timeout_at(until, answers.message()).await;
        let answer = answer.map_err(|_| None)?.map_err(Some)?;
        pace.answered();
        Ok(answer)
    }
    .await;
    settle(stream, pace, answer)
}

/// What a keep-alive round trip's outcome leaves: the ttl answered, or why none came.
/// A stream that failed is dropped (a new one next time): one cancelled by our own
/// timeout may still deliver its keep-alive to the server, any other forgets it.
fn settle(
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    pace: &mut Pace,
    outcome: Result<Option<LeaseKeepAliveResponse>, Option<etcd_client::Error>>,
) -> Result<Option<i64>, Unanswered> {
    match outcome {
        Ok(answer) => Ok(answer.map(|a| a.ttl())),
        Err(None) => Err(Unanswered::Late),
        Err(Some(e)) => {
            *stream = None;
            pace.failed(cancelled(&e));
            Err(Unanswered::Store(e))
        }
    }
}

/// Opens the session's keep-alive stream. Opening one sends a keep-alive and waits
/// for its answer: until then, it is the one in flight.
pub(super) async fn open_stream(
    client: &mut Client,
    s: &mut Session,
) -> Result<(), etcd_client::Error> {
    s.pace.sent(Instant::now(), false);
    match client.lease_keep_alive(s.lease).await {
        Ok(stream) => {
            s.stream = Some(stream);
            s.pace.answered();
            Ok(())
        }
        Err(e) => {
            s.pace.failed(cancelled(&e));
            Err(e)
        }
    }
}
