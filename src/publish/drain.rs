//! Drain before release (DESIGN §10, `--drain-url`): on a graceful step-down (SIGTERM,
//! `POST /release`) the elector first publishes "not leader", then marks the status
//! `draining` and waits, renewing the lease meanwhile, until this publisher says the app
//! is done: it POSTs the Status JSON to the app and waits for a 2xx (retrying every
//! 250 ms), at most `--drain-timeout` and never past the claim's deadline (the elector
//! bounds the wait). So the next leader starts only after the app finished its leader
//! work. A tenure that ends by a loss is not drained (the lease may be gone already).
//!
//! The acknowledgement is the label's mechanism: a `watch<bool>` that is `false` from
//! the start of a tenure until the drain is done, `true` otherwise.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep, Instant};

use super::hooks::{http_client, post_json, HttpClient};
use crate::settings::{duration_or, parse_http_url, ConfigError};
use crate::status::{Role, Status};

/// The drain flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Drain before release")]
pub struct Args {
    /// http:// URL POSTed before a graceful release; the lease is kept (and renewed) until it answers 2xx.
    #[arg(long, env = "LEASEKEEPER_DRAIN_URL")]
    pub drain_url: Option<String>,
    /// Longest wait for --drain-url, never past the claim's deadline [default: 30s].
    #[arg(long, env = "LEASEKEEPER_DRAIN_TIMEOUT", allow_hyphen_values = true)]
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
            let (leading, draining, json) = {
                let s = self.status.borrow_and_update();
                let view = s.view_at(Instant::now());
                (
                    s.role == Role::Leader,
                    s.draining,
                    serde_json::to_string(&view).unwrap_or_default(),
                )
            };
            if leading && !draining && !owed {
                owed = true;
                self.done.send_replace(false);
            } else if draining && owed {
                owed = false;
                self.drain(&client, json).await;
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

    async fn drain(&self, client: &HttpClient, json: String) {
        let started = Instant::now();
        let until = started + self.limit;
        tracing::info!(url = %self.url, "draining: asking the app to finish its leader work");
        loop {
            match post_json(client, &self.url, &json, until).await {
                Ok(()) => {
                    tracing::info!(took = ?started.elapsed(), "drained");
                    return;
                }
                Err(error) if Instant::now() >= until => {
                    tracing::warn!(
                        error,
                        timeout = %humantime::format_duration(self.limit),
                        "--drain-url did not answer 2xx in time; releasing anyway"
                    );
                    return;
                }
                Err(error) => tracing::warn!(error, "--drain-url: no success yet; asking again"),
            }
            if tokio::time::timeout_at(until, sleep(Duration::from_millis(250)))
                .await
                .is_err()
            {
                tracing::warn!("--drain-url did not answer 2xx in time; releasing anyway");
                return;
            }
        }
    }
}
