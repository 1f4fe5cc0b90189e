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
use futures_util::{Stream, StreamExt};
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::WatchStream;

use super::metrics::Metrics;
use crate::elector::{Heartbeat, ReleaseRequest};
use crate::settings::{bad, parse_bool, ConfigError};
use crate::status::{Role, Status};

/// The HTTP flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "HTTP API")]
pub struct Args {
    /// Status and metrics listener [default: 0.0.0.0:4040].
    #[arg(long, env = "LEASEKEEPER_HTTP_ADDR")]
    pub http_addr: Option<String>,
    /// Allow POST /release from loopback.
    #[arg(long, env = "LEASEKEEPER_ENABLE_RELEASE_ENDPOINT", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub enable_release_endpoint: Option<String>,
}

/// Where the API listens and what it allows.
#[derive(Clone, Copy, Debug)]
pub struct HttpSettings {
    pub addr: SocketAddr,
    pub enable_release_endpoint: bool,
}

impl Args {
    pub fn settings(&self) -> Result<HttpSettings, ConfigError> {
        Ok(HttpSettings {
            addr: parse_http_addr(self.http_addr.as_deref().unwrap_or("0.0.0.0:4040"))?,
            enable_release_endpoint: parse_bool(
                "--enable-release-endpoint",
                self.enable_release_endpoint.as_deref(),
            )?,
        })
    }
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
        .with_state(state)
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
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // Renewals change the deadline every few seconds; subscribers want to hear about
    // who leads, not about each renewal, so only changes of these fields are sent.
    let mut last: Option<(Role, bool, Option<String>, Option<u64>)> = None;
    let stream = WatchStream::new(s.status.clone()).filter_map(move |status| {
        let view = status.view_at(Instant::now());
        let key = (
            view.state,
            view.is_leader,
            view.leader.clone(),
            view.fencing_token,
        );
        let changed = last.as_ref() != Some(&key);
        last = Some(key);
        let event = changed.then(|| {
            Ok(Event::default()
                .event("status")
                .json_data(view)
                .unwrap_or_else(|_| Event::default().event("status")))
        });
        std::future::ready(event)
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
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
    let cooldown = match query.get("cooldown") {
        Some(raw) => match humantime::parse_duration(raw.trim()) {
            Ok(d) => Some(d),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "cooldown is not a duration; write it like 30s or 2m",
                )
            }
        },
        None => None,
    };
    let (tx, rx) = oneshot::channel();
    let request = ReleaseRequest {
        reply: tx,
        cooldown,
    };
    if releases.send(request).await.is_err() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the elector is shutting down",
        );
    }
    match rx.await {
        Ok(true) => (StatusCode::OK, Json(json!({ "released": true }))).into_response(),
        Ok(false) => (
            StatusCode::CONFLICT,
            Json(json!({ "released": false, "error": "not leader" })),
        )
            .into_response(),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the elector is shutting down",
        ),
    }
}
