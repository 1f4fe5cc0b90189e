//! One round on the nodes: a request to every node at once, each under the per-node
//! timeout, the answers gathered per node (errors and timeouts read as no answer), and
//! the nodes' clocks learned from the rounds that carry a use-by.

use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::ConnectionManager;
use tokio::time::{timeout, Instant};

use super::rules::Round;
use super::RedlockTransport;

/// One node's part of a round: its answer and when it came, or `None` for an error, a
/// timeout or no request at all.
async fn ask<T: redis::FromRedisValue>(
    limit: Duration,
    node: usize,
    mut conn: ConnectionManager,
    invocation: Option<redis::ScriptInvocation<'_>>,
) -> Option<(T, Instant)> {
    let invocation = invocation?;
    match timeout(limit, invocation.invoke_async::<T>(&mut conn)).await {
        Ok(Ok(v)) => Some((v, Instant::now())),
        Ok(Err(e)) => {
            tracing::debug!(node, error = %e, "redlock node failed");
            None
        }
        Err(_) => None,
    }
}

impl RedlockTransport {
    /// Runs one plain request on every node in parallel, each under the per-node
    /// timeout; errors and timeouts read as "no answer".
    pub(super) async fn on_each_plain<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Round<T> {
        join_all(self.nodes.iter().enumerate().map(|(i, node)| {
            let mut conn = node.conn.clone();
            async move {
                match timeout(self.node_timeout, pipe.query_async::<T>(&mut conn)).await {
                    Ok(Ok(v)) => Some(v),
                    Ok(Err(e)) => {
                        tracing::debug!(node = i, error = %e, "redlock node failed");
                        None
                    }
                    Err(_) => None,
                }
            }
        }))
        .await
    }

    /// Runs one script invocation per node that has one, in parallel, each under the
    /// per-node timeout. Errors and timeouts both read as "no answer".
    pub(super) async fn on_each<T: redis::FromRedisValue>(
        &self,
        invocations: Vec<Option<redis::ScriptInvocation<'_>>>,
    ) -> Round<T> {
        let answers = self.on_each_timed(invocations).await;
        answers.into_iter().map(|a| a.map(|(v, _)| v)).collect()
    }

    /// [`RedlockTransport::on_each`], with when each answer came.
    pub(super) async fn on_each_timed<T: redis::FromRedisValue>(
        &self,
        invocations: Vec<Option<redis::ScriptInvocation<'_>>>,
    ) -> Round<(T, Instant)> {
        let calls = self.nodes.iter().zip(invocations).enumerate();
        join_all(calls.map(|(i, (node, invocation))| {
            ask(self.node_timeout, i, node.conn.clone(), invocation)
        }))
        .await
    }

    /// Per node, the use-by of a request sent at `sent` (see
    /// [`StoreClock`](crate::backend::store_clock::StoreClock)): the round stops
    /// waiting for a node after the per-node timeout.
    pub(super) fn use_bys(&self, sent: Instant) -> Vec<u64> {
        self.clocks
            .iter()
            .map(|c| c.use_by(sent, self.node_timeout))
            .collect()
    }

    /// Learns each node's clock from a round sent at `sent`, and drops the answers of
    /// the nodes that refused the request as late (`refused`): they did nothing.
    pub(super) fn learn_clocks<T>(
        &mut self,
        sent: Instant,
        answers: Round<(T, Instant)>,
        store_ms: impl Fn(&T) -> u64,
        refused: impl Fn(&T) -> bool,
    ) -> Round<T> {
        answers
            .into_iter()
            .zip(self.clocks.iter_mut())
            .map(|(answer, clock)| {
                let (v, received) = answer?;
                clock.learn(sent, received, store_ms(&v));
                (!refused(&v)).then_some(v)
            })
            .collect()
    }
}
