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

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::watch;
use tokio::time::{sleep, timeout_at, Instant};

use crate::status::{Role, Status};

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
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
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

    async fn drain(
        &self,
        client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
        json: String,
    ) {
        let started = Instant::now();
        let until = started + self.limit;
        tracing::info!(url = %self.url, "draining: asking the app to finish its leader work");
        loop {
            let request = hyper::Request::post(self.url.clone())
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(json.clone())));
            let Ok(request) = request else {
                return;
            };
            let answer = timeout_at(until, async {
                let response = client.request(request).await?;
                let status = response.status();
                let _ = response.into_body().collect().await;
                Ok::<_, hyper_util::client::legacy::Error>(status)
            })
            .await;
            match answer {
                Ok(Ok(status)) if status.is_success() => {
                    tracing::info!(took = ?started.elapsed(), "drained");
                    return;
                }
                Ok(Ok(status)) => {
                    tracing::warn!(%status, "--drain-url answered without success; asking again");
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "--drain-url: POST failed; asking again"),
                Err(_) => {
                    tracing::warn!(
                        timeout = %humantime::format_duration(self.limit),
                        "--drain-url did not answer 2xx in time; releasing anyway"
                    );
                    return;
                }
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
