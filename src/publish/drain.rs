//! Drain before release (DESIGN §10, `--drain-url`): on a graceful step-down (SIGTERM,
//! `POST /release`) the elector first publishes "not leader", then marks the status
//! `draining` and waits, renewing the lease meanwhile, until this publisher says the app
//! is done: it POSTs the Status JSON to the app, with `drain_expires_in_ms` (the time
//! left before the sidecar releases anyway), and waits for a 2xx (retrying every
//! 250 ms), at most `--drain-timeout`, and only while the lease stays held (the elector
//! renews it meanwhile and ends the drain if it is lost). A drain that ends without
//! the app's 2xx is told to the app in one more POST (`"drain_lapsed": true`,
//! `drain_expires_in_ms` 0): it holds no claim any more. So the next leader starts only
//! after the app finished its leader work, or was told to stop. A tenure that ends by
//! a loss is not drained (the lease may be gone already).
//!
//! The acknowledgement is the label's mechanism: a `watch<bool>` that is `false` from
//! the start of a tenure until the drain is done, `true` otherwise.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep, Instant};

use super::hooks::{http_client, post_json, HttpClient};
use crate::settings::{duration_or, fmt_d, parse_http_url, ConfigError};
use crate::status::{Role, Status};

/// The drain flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Drain before release")]
pub struct Args {
    /// http:// URL POSTed on a graceful step-down, until it answers 2xx.
    #[arg(long, value_name = "URL", env = "LEASEKEEPER_DRAIN_URL")]
    pub drain_url: Option<String>,
    /// Longest wait for --drain-url, within the claim [default: 30s].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_DRAIN_TIMEOUT",
        allow_hyphen_values = true
    )]
    pub drain_timeout: Option<String>,
}

/// Where and how long to drain.
#[derive(Clone, Debug)]
pub struct DrainSettings {
    /// POSTed before a graceful release; none: no drain.
    pub url: Option<hyper::Uri>,
    pub timeout: Duration,
}

impl Args {
    pub fn settings(&self) -> Result<DrainSettings, ConfigError> {
        Ok(DrainSettings {
            url: self
                .drain_url
                .as_deref()
                .map(|u| parse_http_url("--drain-url", u))
                .transpose()?,
            timeout: duration_or(
                "--drain-timeout",
                self.drain_timeout.as_deref(),
                Duration::from_secs(30),
            )?,
        })
    }
}

pub struct Drain {
    url: hyper::Uri,
    limit: Duration,
    status: watch::Receiver<Status>,
    done: watch::Sender<bool>,
}

impl Drain {
    /// The publisher and its acknowledgement for the elector.
    pub fn new(
        url: hyper::Uri,
        limit: Duration,
        status: watch::Receiver<Status>,
    ) -> (Drain, watch::Receiver<bool>) {
        let (done, done_rx) = watch::channel(true);
        (
            Drain {
                url,
                limit,
                status,
                done,
            },
            done_rx,
        )
    }

    /// Runs until the status channel closes.
    pub async fn run(mut self) {
        let client = http_client();
        // Whether the current tenure still owes a drain.
        let mut owed = false;
        loop {
            let (leading, draining) = {
                let s = self.status.borrow_and_update();
                (s.role == Role::Leader, s.draining)
            };
            if leading && !draining && !owed {
                owed = true;
                self.done.send_replace(false);
            } else if draining && owed {
                owed = false;
                self.drain(&client).await;
                self.done.send_replace(true);
            } else if !leading && !draining && owed {
                // Lost, not handed over: nothing to drain.
                owed = false;
                self.done.send_replace(true);
            }
            if self.status.changed().await.is_err() {
                return;
            }
        }
    }

    /// POSTs the status, with the time the drain has left, until the app answers 2xx
    /// or the drain ends without it (its timeout, or the lease lost or run out: the
    /// elector ends it then); in that case one more POST tells the app that the claim
    /// it was draining under has lapsed.
    async fn drain(&mut self, client: &HttpClient) {
        let started = Instant::now();
        let fallback = started + self.limit;
        tracing::info!(url = %self.url, "draining: asking the app to finish its leader work");
        loop {
            let now = Instant::now();
            let until = {
                let s = self.status.borrow();
                s.drain_until.filter(|_| now < fallback)
            };
            let Some(until) = until.filter(|u| now < *u) else {
                return self.lapsed(client).await;
            };
            let body = {
                let s = self.status.borrow();
                drain_body(&s, now, Some(until))
            };
            let mut status = self.status.clone();
            let ended = async move {
                let _ = status.wait_for(|s| s.drain_until.is_none()).await;
            };
            let lapsed = tokio::select! {
                answer = post_json(client, &self.url, &body, until) => match answer {
                    Ok(()) => {
                        tracing::info!(took = %fmt_d(started.elapsed()), "drained");
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(error, "--drain-url: no success yet; asking again");
                        false
                    }
                },
                () = ended => true,
            };
            if lapsed {
                return self.lapsed(client).await;
            }
            let _ = tokio::time::timeout_at(until, sleep(Duration::from_millis(250))).await;
        }
    }

    /// Tells the app (once, best effort, within a second) that the drain ended without
    /// its acknowledgement: it holds no claim any more and must stop leader work now.
    async fn lapsed(&self, client: &HttpClient) {
        tracing::warn!(
            timeout = %fmt_d(self.limit),
            "--drain-url did not answer 2xx before the drain ended; releasing, and telling the app"
        );
        let body = {
            let s = self.status.borrow();
            drain_body(&s, Instant::now(), None)
        };
        let until = Instant::now() + Duration::from_secs(1);
        if let Err(error) = post_json(client, &self.url, &body, until).await {
            tracing::warn!(
                error,
                "--drain-url: the notice that the drain lapsed was not taken"
            );
        }
    }
}

/// The drain POST's body: the status (DESIGN §3) and `drain_expires_in_ms`, the time
/// the app has left to finish (until `until`), or `0` with `"drain_lapsed": true` once
/// the drain has ended without the app's acknowledgement (`until` = `None`).
fn drain_body(status: &Status, now: Instant, until: Option<Instant>) -> String {
    let mut body = serde_json::to_value(status.view_at(now)).unwrap_or_default();
    if let Some(fields) = body.as_object_mut() {
        let left = until.map_or(0, |u| {
            u64::try_from(u.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX)
        });
        fields.insert("drain_expires_in_ms".into(), left.into());
        fields.insert("drain_lapsed".into(), until.is_none().into());
    }
    body.to_string()
}
