//! The HTTP API of DESIGN §3.
//!
//! Every handler reads `Status` and decides "leader" with
//! [`Status::is_leader_at`] at the moment it answers (invariant 3).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::WatchStream;

mod server;
pub use server::{serve, Limits};

use super::metrics::Metrics;
use crate::elector::{Heartbeat, ReleaseRequest, Released};
use crate::settings::{bad, parse_bool, ConfigError};
use crate::status::{identity_is_usable, Role, Status, StatusView};

/// The HTTP flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "HTTP API")]
pub struct Args {
    /// API listener [default: 0.0.0.0:4040; for run: none].
    #[arg(long, value_name = "ADDR", env = "LEASEKEEPER_HTTP_ADDR")]
    pub http_addr: Option<String>,
    /// Allow POST /release from loopback.
    #[arg(long, value_name = "BOOL", env = "LEASEKEEPER_ENABLE_RELEASE_ENDPOINT", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub enable_release_endpoint: Option<String>,
    /// Most connections of the status port [default: 512].
    #[arg(long, value_name = "N", env = "LEASEKEEPER_HTTP_MAX_CONNECTIONS")]
    pub http_max_connections: Option<String>,
    /// Most GET /watch streams open at once [default: 64].
    #[arg(long, value_name = "N", env = "LEASEKEEPER_HTTP_MAX_WATCHERS")]
    pub http_max_watchers: Option<String>,
}

/// Where the API listens and what it allows.
#[derive(Clone, Copy, Debug)]
pub struct HttpSettings {
    /// `None`: no listener (`leasekeeper run` without `--http-addr`).
    pub addr: Option<SocketAddr>,
    pub enable_release_endpoint: bool,
    pub max_connections: usize,
    pub max_watchers: usize,
}

/// How long a client has to send a whole request head (also between the requests of
/// a kept-alive connection).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest request body accepted (nothing served takes one).
pub const MAX_BODY: u64 = 4096;

/// The sidecar's listener without `--http-addr`.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 4040);

impl Args {
    /// The API's settings; `exec` is `leasekeeper run`, which listens only where
    /// `--http-addr` says (a fixed default port would let only one `run` start per
    /// host).
    pub fn settings(&self, exec: bool) -> Result<HttpSettings, ConfigError> {
        let addr = match (self.http_addr.as_deref(), exec) {
            (Some(raw), _) => Some(parse_http_addr(raw)?),
            (None, false) => Some(DEFAULT_ADDR),
            (None, true) => None,
        };
        let enable_release_endpoint = parse_bool(
            "--enable-release-endpoint",
            self.enable_release_endpoint.as_deref(),
        )?;
        if enable_release_endpoint && addr.is_none() {
            return Err(bad(
                "--enable-release-endpoint needs --http-addr with `leasekeeper run`, which has no HTTP API without one",
            ));
        }
        Ok(HttpSettings {
            addr,
            enable_release_endpoint,
            max_connections: count(
                "--http-max-connections",
                self.http_max_connections.as_deref(),
                512,
                16,
            )?,
            max_watchers: count(
                "--http-max-watchers",
                self.http_max_watchers.as_deref(),
                64,
                0,
            )?,
        })
    }
}

/// A whole number of at least `min`.
fn count(
    setting: &str,
    raw: Option<&str>,
    default: usize,
    min: usize,
) -> Result<usize, ConfigError> {
    let Some(raw) = raw else {
        return Ok(default);
    };
    raw.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n >= min && *n <= 1_000_000)
        .ok_or_else(|| {
            bad(format!(
                "{setting} {raw:?} must be a whole number from {min} to 1000000"
            ))
        })
}

/// `host:port`, or `:port` for every address.
fn parse_http_addr(raw: &str) -> Result<SocketAddr, ConfigError> {
    let candidate = if raw.starts_with(':') {
        format!("0.0.0.0{raw}")
    } else {
        raw.to_owned()
    };
    candidate.parse().map_err(|_| {
        bad(format!(
            "--http-addr {raw:?} is not an address; write it like 0.0.0.0:4040 or 127.0.0.1:8080"
        ))
    })
}

/// What the handlers read.
#[derive(Clone)]
pub struct ApiState {
    pub status: watch::Receiver<Status>,
    pub heartbeat: Arc<Heartbeat>,
    pub metrics: Arc<Metrics>,
    /// `Some` only with `--enable-release-endpoint`.
    pub releases: Option<mpsc::Sender<ReleaseRequest>>,
    /// Who leads, changed only when the role, the leader or the token change (not at
    /// every renewal), for the `/watch` streams.
    pub changes: watch::Receiver<Status>,
    /// One permit per open `/watch` stream.
    pub watchers: Arc<tokio::sync::Semaphore>,
    /// How often a `/watch` stream sends at least a comment (shorter than the ttl).
    pub keep_alive: Duration,
}

/// The receiver of `/watch`: `status`, passed on only when who leads changes or the
/// claim's deadline moves (a renewal of our own claim), so that a follower's looks at
/// the store wake one task instead of every subscriber.
pub fn leadership_changes(mut status: watch::Receiver<Status>) -> watch::Receiver<Status> {
    let key = |s: &Status| pushed(s, Instant::now()).1;
    let (tx, rx) = watch::channel(status.borrow().clone());
    tokio::spawn(async move {
        let mut last = key(&status.borrow_and_update());
        loop {
            // A claim may also end by its deadline passing, without a new status.
            let deadline = status.borrow().claim.map(|c| c.deadline);
            tokio::select! {
                changed = status.changed() => if changed.is_err() { return },
                () = sleep_until_some(deadline) => {}
            }
            let now = status.borrow_and_update().clone();
            let k = key(&now);
            if k != last {
                last = k;
                if tx.send(now).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// What a `/watch` subscriber hears about: the role, whether it leads, the leader
/// and the token.
type WhoLeads = (Role, bool, Option<String>, Option<u64>);

/// A `/watch` event is sent when this changes: who leads, and our claim's deadline
/// (each renewal: the event carries the claim's new `lease_expires_in_ms`, so a
/// subscriber never holds a "leading" that outlives the claim it was told of).
type Pushed = (WhoLeads, Option<Instant>);

/// The view to send at `now`, and its key.
fn pushed(s: &Status, now: Instant) -> (StatusView, Pushed) {
    let view = s.view_at(now);
    let key = (who_leads(&view), s.claim.map(|c| c.deadline));
    (view, key)
}

fn who_leads(view: &StatusView) -> WhoLeads {
    (
        view.state,
        view.is_leader,
        view.leader.clone(),
        view.fencing_token,
    )
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/leader", get(leader))
        .route("/", get(compat_name))
        .route("/is-leader", get(is_leader))
        .route("/watch", get(watch_sse))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/release", post(release))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(refuse_bodies))
        .with_state(state)
}

/// Nothing served takes a body: a large one is refused before it is read.
async fn refuse_bodies(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let chunked = req.headers().contains_key(header::TRANSFER_ENCODING);
    if chunked || declared.is_some_and(|n| n > MAX_BODY) {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request bodies are not accepted here",
        );
    }
    next.run(req).await
}

fn error(code: StatusCode, message: &str) -> Response {
    (code, Json(json!({ "error": message }))).into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such path; see /leader, /is-leader, /watch, /healthz, /readyz, /metrics",
    )
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this path",
    )
}

async fn leader(State(s): State<ApiState>) -> Response {
    let view = s.status.borrow().view_at(Instant::now());
    Json(view).into_response()
}

/// Drop-in for the classic `leader-elector` sidecar: `{"name": "<leader>"}`.
async fn compat_name(State(s): State<ApiState>) -> Response {
    let view = s.status.borrow().view_at(Instant::now());
    Json(json!({ "name": view.leader.unwrap_or_default() })).into_response()
}

async fn is_leader(State(s): State<ApiState>) -> Response {
    let leads = s.status.borrow().is_leader_at(Instant::now());
    let code = if leads {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        if leads { "true" } else { "false" },
    )
        .into_response()
}

async fn watch_sse(
    State(s): State<ApiState>,
    mark: Option<axum::Extension<server::StreamMark>>,
) -> Response {
    let Ok(permit) = s.watchers.clone().try_acquire_owned() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many open /watch streams; try again later, or raise --http-max-watchers",
        );
    };
    if let Some(axum::Extension(mark)) = mark {
        mark.pin();
    }
    // An event when who leads changes, and at each renewal of our own claim (with its
    // new deadline); a follower's looks at the store send nothing.
    let mut last: Option<Pushed> = None;
    let stream = WatchStream::new(s.changes.clone()).filter_map(move |status| {
        // The permit lives as long as the stream.
        let _held = &permit;
        let (view, key) = pushed(&status, Instant::now());
        let changed = last.as_ref() != Some(&key);
        last = Some(key);
        let event = changed.then(|| {
            Ok::<_, Infallible>(
                Event::default()
                    .event("status")
                    .json_data(view)
                    .unwrap_or_else(|_| Event::default().event("status")),
            )
        });
        std::future::ready(event)
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(s.keep_alive))
        .into_response()
}

async fn healthz(State(s): State<ApiState>) -> Response {
    if s.heartbeat.is_alive_at(Instant::now()) {
        (StatusCode::OK, "ok").into_response()
    } else {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the elector loop has not made progress",
        )
    }
}

async fn readyz(State(s): State<ApiState>) -> Response {
    if s.status.borrow().ready {
        (StatusCode::OK, "ready").into_response()
    } else {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no round against the backend has completed yet",
        )
    }
}

async fn metrics(State(s): State<ApiState>) -> Response {
    let text = s.metrics.render(&s.status.borrow(), Instant::now());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn release(
    State(s): State<ApiState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let Some(releases) = s.releases else {
        return error(
            StatusCode::FORBIDDEN,
            "the release endpoint is off; start with --enable-release-endpoint",
        );
    };
    if !peer.ip().is_loopback() {
        return error(
            StatusCode::FORBIDDEN,
            "POST /release is answered only from loopback",
        );
    }
    let (reply, answer) = oneshot::channel();
    let request = match release_request(&query, reply) {
        Ok(request) => request,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let to = request.to.clone();
    if releases.send(request).await.is_err() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the elector is shutting down",
        );
    }
    match answer.await {
        Ok(released) => release_answer(released, to, &s.status.borrow()),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the elector is shutting down",
        ),
    }
}

/// `?cooldown=D&to=ID` as a request to the elector.
fn release_request(
    query: &std::collections::HashMap<String, String>,
    reply: oneshot::Sender<Released>,
) -> Result<ReleaseRequest, &'static str> {
    let cooldown = match query.get("cooldown") {
        Some(raw) => Some(
            humantime::parse_duration(raw.trim())
                .map_err(|_| "cooldown is not a duration; write it like 30s or 2m")?,
        ),
        None => None,
    };
    let to = match query.get("to") {
        Some(id) if identity_is_usable(id) => Some(id.clone()),
        Some(_) => {
            return Err("to names no candidate; give its identity (1 to 253 characters, no control characters or '|')")
        }
        None => None,
    };
    Ok(ReleaseRequest {
        reply,
        cooldown,
        to,
    })
}

fn release_answer(released: Released, to: Option<String>, status: &Status) -> Response {
    let (code, body) = match released {
        Released::Yes => (StatusCode::OK, json!({ "released": true, "to": to })),
        Released::NotLeader => (
            StatusCode::CONFLICT,
            json!({
                "released": false,
                "error": "not leader",
                "leader": status.holder.as_ref().map(|h| h.identity.as_str()),
            }),
        ),
        Released::ToSelf => (
            StatusCode::CONFLICT,
            json!({ "released": false, "error": "the named candidate is this leader itself" }),
        ),
        Released::NotACandidate { live } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({
                "released": false,
                "error": format!("{} is not a live candidate", to.unwrap_or_default()),
                "candidates": live,
            }),
        ),
        Released::Refused(why) => (
            StatusCode::CONFLICT,
            json!({ "released": false, "error": why }),
        ),
        Released::Unchecked(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({
                "released": false,
                "error": format!("the live candidates could not be listed: {why}"),
            }),
        ),
    };
    (code, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(pairs: &[(&str, &str)]) -> Result<ReleaseRequest, &'static str> {
        let query = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        release_request(&query, oneshot::channel().0)
    }

    #[test]
    fn release_queries() {
        let plain = parsed(&[]).expect("plain");
        assert_eq!((plain.cooldown, plain.to), (None, None));
        let both = parsed(&[("to", "pod-b"), ("cooldown", "30s")]).expect("both");
        assert_eq!(both.to.as_deref(), Some("pod-b"));
        assert_eq!(both.cooldown, Some(Duration::from_secs(30)));
        assert!(parsed(&[("to", "")]).is_err());
        assert!(parsed(&[("to", "a|b")]).is_err());
        assert!(parsed(&[("to", &"x".repeat(254))]).is_err());
        assert!(parsed(&[("cooldown", "soon")]).is_err());
    }
}
