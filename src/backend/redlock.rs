//! `redlock` backend: one lease over N ≥ 3 independent Redis masters, held while a
//! majority (N/2 + 1) of them hold it.
//!
//! Acquire runs in two phases, each on the nodes in parallel under a per-node timeout
//! far below the ttl:
//!
//! 1. **Take**: on every node one script does `SET NX PX ttl` of a pending value
//!    `<nonce>|pending|<identity>` and returns that node's fence counter. Success on a
//!    majority is needed to go on.
//! 2. **Confirm**: `token = max(fence counters of the nodes taken, highest token seen) + 1`
//!    is written, on every node taken, into the fence counter (never lowering it) and
//!    into the lock value `<nonce>|<token>|<identity>` (compare-nonce, `KEEPTTL`). The
//!    tenure exists only once a majority confirmed.
//!
//! Why tokens strictly grow: tenure k confirmed its token on a majority M while it held
//! the lock on each of them. A later tenure k+1 took a majority A; M and A share a node
//! X. On X, k+1's `SET NX` only succeeded after k's lock on X was gone, which is after
//! k's confirm on X (that confirm required k's lock). So k+1 read X's fence counter
//! after k wrote its token there, and k+1's token is greater.
//!
//! The local deadline is the elector's: send time of phase 1 + ttl × (1 − drift) −
//! margin, i.e. Redlock's validity `ttl − elapsed − drift` counted conservatively. A
//! failed campaign releases on *every* node (not only those that said yes) and retries
//! after a short random delay, so competing candidates do not split votes in lockstep.
//!
//! A node that lost its data (restart without persistence) is not trusted for one ttl:
//! a candidate that takes it and finds no fence counter there, while any answering
//! node (or its own memory) shows that tokens were handed out before, does not count
//! it, and fences its lock with a placeholder for one ttl (the same quarantine as the
//! single-node backend). A leader whose lock vanished there still holds the majority
//! elsewhere, or steps down. The token of a new tenure is one above the highest
//! counter any answering node reports, so it is also above what the amnesiac forgot.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use rand::Rng;
use redis::Script;
use tokio::sync::Notify;
use tokio::time::{timeout, Instant};

use super::redis::{new_nonce, parse_value, wait_for_notice, Keys, Node, RELEASE, RENEW};
use super::{Backend, BackendError, Campaign, Renewal, Wake};
use crate::config::RedisSettings;
use crate::status::{FencingToken, Holder};

/// Phase 1 on one node: take the lock with a pending value (or adopt our own value
/// left by a campaign whose answer was lost), report the fence counter and whether
/// it exists at all. Returns {taken, value, pttl of a held lock, fence, fence exists}.
const TAKE: &str = r#"
local cur = redis.call('GET', KEYS[1])
local raw = redis.call('GET', KEYS[2])
local fence = tonumber(raw or '0')
local exists = 0
if raw then exists = 1 end
if cur then
  if string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {1, cur, -1, fence, exists}
  end
  return {0, cur, redis.call('PTTL', KEYS[1]), fence, exists}
end
local value = ARGV[1] .. 'pending|' .. ARGV[2]
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
return {1, value, -1, fence, exists}
"#;

/// On a node that lost its data, while we hold its lock: fence the lock for one ttl
/// and restore the counter, so no claim can count this node until every claim that
/// counted it before has run out.
const QUARANTINE: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
  if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[2], ARGV[2])
  end
  redis.call('SET', KEYS[1], 'quarantine|' .. ARGV[2] .. '|', 'PX', ARGV[3])
  return 1
end
return 0
"#;

/// Phase 2 on one node: if the lock is still ours, record the token and announce it.
const CONFIRM: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
  local token = tonumber(ARGV[2])
  if tonumber(redis.call('GET', KEYS[2]) or '0') < token then
    redis.call('SET', KEYS[2], token)
  end
  redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
  redis.call('PUBLISH', ARGV[4], 'acquired|' .. ARGV[3])
  return 1
end
return 0
"#;

pub struct RedlockBackend {
    nodes: Vec<Node>,
    keys: Keys,
    identity: String,
    ttl: Duration,
    node_timeout: Duration,
    nonce: String,
    value: Option<String>,
    floor: FencingToken,
    wake: Arc<Notify>,
    expiry_hint: Option<Instant>,
    take: Script,
    quarantine: Script,
    confirm: Script,
    renew: Script,
    release: Script,
}

/// Answers of one parallel round: one entry per node, `None` for no answer in time.
type Round<T> = Vec<Option<T>>;

impl RedlockBackend {
    /// Connects lazily to every node; unreachable nodes are retried by the elector.
    pub fn new(
        settings: &[RedisSettings],
        election: &str,
        identity: &str,
        ttl: Duration,
        op_timeout: Duration,
    ) -> Result<Self, BackendError> {
        let keys = Keys::for_election(election);
        let wake = Arc::new(Notify::new());
        // Like redsync's timeout factor: a slow node must not eat the validity.
        // Two phases must fit in the elector's budget for one call, with room to spare.
        let node_timeout = (ttl / 10).min(op_timeout / 3).max(Duration::from_millis(5));
        let nodes = settings
            .iter()
            .map(|s| Node::connect(s, &keys, wake.clone(), node_timeout))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedlockBackend {
            nodes,
            keys,
            identity: identity.to_owned(),
            ttl,
            node_timeout,
            nonce: new_nonce(),
            value: None,
            floor: 0,
            wake,
            expiry_hint: None,
            take: Script::new(TAKE),
            quarantine: Script::new(QUARANTINE),
            confirm: Script::new(CONFIRM),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
        })
    }

    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn nonce_prefix(&self) -> String {
        format!("{}|", self.nonce)
    }

    /// Runs one script invocation per selected node, in parallel, each under the
    /// per-node timeout. Errors and timeouts both read as "no answer".
    async fn on_nodes<T: redis::FromRedisValue>(
        &self,
        selected: &[usize],
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Round<T> {
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let mut conn = node.conn.clone();
            let wanted = selected.contains(&i);
            async move {
                if !wanted {
                    return None;
                }
                match timeout(self.node_timeout, invocation.invoke_async::<T>(&mut conn)).await {
                    Ok(Ok(v)) => Some(v),
                    Ok(Err(e)) => {
                        tracing::debug!(node = i, error = %e, "redlock node failed");
                        None
                    }
                    Err(_) => None,
                }
            }
        });
        join_all(calls).await
    }

    fn all(&self) -> Vec<usize> {
        (0..self.nodes.len()).collect()
    }

    /// Releases our nonce on every node, whatever each said before.
    async fn release_everywhere(&mut self) -> usize {
        let prefix = self.nonce_prefix();
        self.nonce = new_nonce();
        self.value = None;
        let mut invocation = self.release.prepare_invoke();
        invocation
            .key(&self.keys.lock)
            .arg(&prefix)
            .arg(&self.keys.events);
        let all = self.all();
        let answers: Round<i64> = self.on_nodes(&all, &invocation).await;
        answers.iter().filter(|a| a.is_some()).count()
    }

    /// The holder a majority of nodes agree on, if any.
    fn majority_holder(&self, seen: &[String]) -> Option<Holder> {
        let mut counts: Vec<(&String, usize)> = Vec::new();
        for v in seen {
            match counts.iter_mut().find(|(s, _)| *s == v) {
                Some((_, n)) => *n += 1,
                None => counts.push((v, 1)),
            }
        }
        let (value, _) = counts.into_iter().find(|(_, n)| *n >= self.quorum())?;
        let parsed = parse_value(value);
        (!parsed.identity.is_empty()).then(|| Holder {
            identity: parsed.identity.to_owned(),
            token: parsed.token,
        })
    }
}

impl Backend for RedlockBackend {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        let prefix = self.nonce_prefix();
        let mut take = self.take.prepare_invoke();
        take.key(&self.keys.lock)
            .key(&self.keys.fence)
            .arg(&prefix)
            .arg(&self.identity)
            .arg(self.ttl_ms());
        let all = self.all();
        let answers: Round<(i64, String, i64, u64, i64)> = self.on_nodes(&all, &take).await;

        let answered = answers.iter().filter(|a| a.is_some()).count();
        // The highest token any answering node (or we) ever saw: every counter counts,
        // not only those of the nodes taken, so a node that lost its data is noticed
        // even by a candidate that has just started.
        for (_, value, _, fence, _) in answers.iter().flatten() {
            self.floor = self.floor.max(*fence);
            if let Some(t) = parse_value(value).token {
                self.floor = self.floor.max(t);
            }
        }
        let mut taken = Vec::new();
        let mut amnesiac = Vec::new();
        let mut seen = Vec::new();
        let mut soonest_expiry: Option<i64> = None;
        for (i, answer) in answers.iter().enumerate() {
            let Some((won, value, pttl, _, fence_exists)) = answer else {
                continue;
            };
            if *won == 1 && *fence_exists == 0 && self.floor > 0 {
                amnesiac.push(i);
            } else if *won == 1 {
                taken.push(i);
            } else {
                seen.push(value.clone());
                if *pttl > 0 {
                    soonest_expiry = Some(soonest_expiry.map_or(*pttl, |s| s.min(*pttl)));
                }
            }
        }
        if !amnesiac.is_empty() {
            tracing::warn!(nodes = ?amnesiac, "redlock nodes lost their data; fencing them for one ttl");
            let mut fence = self.quarantine.prepare_invoke();
            fence
                .key(&self.keys.lock)
                .key(&self.keys.fence)
                .arg(&prefix)
                .arg(self.floor)
                .arg(self.ttl_ms());
            let _: Round<i64> = self.on_nodes(&amnesiac, &fence).await;
        }

        if taken.len() >= self.quorum() {
            let token = self.floor + 1;
            let value = format!("{prefix}{token}|{}", self.identity);
            let mut confirm = self.confirm.prepare_invoke();
            confirm
                .key(&self.keys.lock)
                .key(&self.keys.fence)
                .arg(&prefix)
                .arg(token)
                .arg(&value)
                .arg(&self.keys.events);
            let confirmed: Round<i64> = self.on_nodes(&taken, &confirm).await;
            let yes = confirmed.iter().filter(|c| **c == Some(1)).count();
            if yes >= self.quorum() {
                self.floor = self.floor.max(token);
                self.value = Some(value);
                self.expiry_hint = None;
                return Ok(Campaign::Acquired { token });
            }
        }

        // No majority: give back whatever we took, everywhere, and retry soon but not
        // in step with the other candidates.
        if !taken.is_empty() {
            self.release_everywhere().await;
        }
        if answered < self.quorum() {
            return Err(BackendError::Store {
                op: "campaign",
                message: format!(
                    "only {answered} of {} redlock nodes answered; a majority of {} is needed",
                    self.nodes.len(),
                    self.quorum()
                ),
            });
        }
        let holder = self.majority_holder(&seen);
        let retry_in = match (&holder, soonest_expiry) {
            (Some(_), Some(pttl)) => Duration::from_millis(pttl as u64 + 2),
            (Some(_), None) => self.ttl,
            // A split vote or a fenced node: try again after a short random delay.
            (None, _) => Duration::from_millis(rand::rng().random_range(2..25)),
        };
        self.expiry_hint = Some(Instant::now() + retry_in);
        Ok(Campaign::Held(holder))
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let Some(value) = self.value.clone() else {
            return Ok(Renewal::Lost);
        };
        let mut renew = self.renew.prepare_invoke();
        renew.key(&self.keys.lock).arg(&value).arg(self.ttl_ms());
        let all = self.all();
        let answers: Round<i64> = self.on_nodes(&all, &renew).await;
        let kept = answers.iter().filter(|a| **a == Some(1)).count();
        let gone = answers.iter().filter(|a| **a == Some(0)).count();
        if kept >= self.quorum() {
            Ok(Renewal::Renewed)
        } else if self.nodes.len() - gone < self.quorum() {
            // Too many nodes say the lock is not ours: no majority can be ours again.
            Ok(Renewal::Lost)
        } else {
            Err(BackendError::Store {
                op: "renew",
                message: format!("renewed on {kept} of {} nodes", self.nodes.len()),
            })
        }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        let answered = self.release_everywhere().await;
        if answered == 0 {
            return Err(BackendError::Store {
                op: "release",
                message: "no redlock node answered".into(),
            });
        }
        Ok(())
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        wait_for_notice(&self.wake, &mut self.expiry_hint, max).await
    }
}
