//! Redis and Redlock at the floor: the holder's compare-and-DEL with the baton pushed
//! (on one server, one script; over N nodes, the give-back on every node in parallel,
//! then the baton on the first), the waiting candidate's `BLPOP` of the baton, and its
//! take (one script: `INCR` of the fence and `SET … PX`; over N nodes, `SET NX PX` on
//! every node, then the token confirmed on every node taken).

use std::time::Instant;

use anyhow::{bail, Context};
use futures_util::future::join_all;
use leasekeeper::backend::redis::Keys;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};

use super::{between, block_on, Round, SETTLE};

/// A ttl far beyond a round.
const TTL_MS: u64 = 15_000;

/// One server: compare-and-DEL, the baton handed out, the release told.
const RELEASE: &str = "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], '1')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PUBLISH', KEYS[3], 'released')
return 1";

/// One server: the take with its fencing token (0: held).
const TAKE: &str = "\
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local token = redis.call('INCR', KEYS[2])
local value = ARGV[1] .. '|' .. token .. '|' .. ARGV[2]
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
redis.call('PUBLISH', KEYS[3], 'acquired|' .. value)
return token";

/// Redlock, each node: compare-and-DEL.
const GIVE_BACK: &str = "\
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1";

/// Redlock, the first node: the baton handed out.
const HAND_OUT: &str = "\
redis.call('DEL', KEYS[1])
redis.call('RPUSH', KEYS[1], '1')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1";

/// Redlock, each node: `SET NX PX` of the pending value and the node's fence (-1: held).
const PENDING: &str = "\
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
return -1";

/// Redlock, each node taken: the token into the fence (never lower) and the value.
const CONFIRM: &str = "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local token = tonumber(ARGV[3])
if tonumber(redis.call('GET', KEYS[2]) or '0') < token then redis.call('SET', KEYS[2], token) end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1";

/// `rounds` handovers between two clients of the Redis servers at `urls` (one: the
/// `redis` backend's; more: Redlock's). The waiting client wakes when its `BLPOP`
/// answers the baton.
pub fn handovers(urls: &[String], rounds: usize) -> anyhow::Result<Vec<Round>> {
    block_on(async {
        let keys = Keys::for_election("bench-floor");
        let mut a = Member::connect(urls, "floor-a").await?;
        let mut b = Member::connect(urls, "floor-b").await?;
        a.clear(&keys).await?;
        a.take(&keys).await?;
        let mut took = Vec::new();
        for round in 0..rounds {
            let (holder, waiter) = match round % 2 {
                0 => (&mut a, &mut b),
                _ => (&mut b, &mut a),
            };
            took.push(handover(holder, waiter, &keys).await?);
        }
        Ok(took)
    })
}

/// The holder releases; the waiter, blocked on the baton, takes.
async fn handover(holder: &mut Member, waiter: &mut Member, keys: &Keys) -> anyhow::Result<Round> {
    let mut next = waiter.clone();
    let task_keys = keys.clone();
    let wait = tokio::spawn(async move {
        let popped: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(&task_keys.baton)
            .arg(0)
            .query_async(&mut next.blocker)
            .await?;
        let woke = Instant::now();
        popped.context("BLPOP answered no baton")?;
        next.take(&task_keys).await?;
        anyhow::Ok((next, woke, Instant::now()))
    });
    tokio::time::sleep(SETTLE).await;
    let t0 = Instant::now();
    holder.release(keys).await?;
    let answered = Instant::now();
    let (next, woke, t1) = wait.await??;
    *waiter = next;
    Ok(Round::new(t0, answered, woke, t1))
}

/// One candidate: a connection to every node and its own for the `BLPOP` on the first.
#[derive(Clone)]
struct Member {
    nodes: Vec<MultiplexedConnection>,
    blocker: MultiplexedConnection,
    identity: &'static str,
    /// The lock's value while this one holds.
    value: String,
}

impl Member {
    async fn connect(urls: &[String], identity: &'static str) -> anyhow::Result<Member> {
        let mut nodes = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str())?;
            nodes.push(client.get_multiplexed_async_connection().await?);
        }
        let first = redis::Client::open(urls.first().context("no server")?.as_str())?;
        let unbounded = AsyncConnectionConfig::new().set_response_timeout(None);
        let blocker = first
            .get_multiplexed_async_connection_with_config(&unbounded)
            .await?;
        Ok(Member {
            nodes,
            blocker,
            identity,
            value: String::new(),
        })
    }

    async fn release(&mut self, keys: &Keys) -> anyhow::Result<()> {
        if let [node] = self.nodes.as_mut_slice() {
            let released: i64 = Script::new(RELEASE)
                .key(&keys.lock)
                .key(&keys.baton)
                .key(&keys.rw)
                .arg(&self.value)
                .arg(TTL_MS)
                .invoke_async(node)
                .await?;
            if released != 1 {
                bail!("the release found the lock not ours");
            }
            return Ok(());
        }
        let give_back = Script::new(GIVE_BACK);
        let given = self.nodes.iter_mut().map(|node| {
            let mut call = give_back.key(&keys.lock);
            call.arg(&self.value);
            async move { call.invoke_async::<i64>(node).await }
        });
        for answer in join_all(given).await {
            answer?;
        }
        let first = self.nodes.first_mut().context("no node")?;
        let _: i64 = Script::new(HAND_OUT)
            .key(&keys.baton)
            .arg(TTL_MS)
            .invoke_async(first)
            .await?;
        Ok(())
    }

    /// Frees the lock and takes back the baton on every node (a series before this
    /// one ends holding, its last baton handed out); the fence stays.
    async fn clear(&mut self, keys: &Keys) -> anyhow::Result<()> {
        for node in &mut self.nodes {
            let _: i64 = redis::cmd("DEL")
                .arg(&keys.lock)
                .arg(&keys.baton)
                .query_async(node)
                .await?;
        }
        Ok(())
    }

    /// Takes the free lock with the next fencing token.
    async fn take(&mut self, keys: &Keys) -> anyhow::Result<()> {
        let nonce = leasekeeper::clock::monotonic_now_ns().to_string();
        if let [node] = self.nodes.as_mut_slice() {
            let token: i64 = Script::new(TAKE)
                .key(&keys.lock)
                .key(&keys.fence)
                .key(&keys.events)
                .arg(&nonce)
                .arg(self.identity)
                .arg(TTL_MS)
                .invoke_async(node)
                .await?;
            if token < 1 {
                bail!("the take found the lock held");
            }
            self.value = format!("{nonce}|{token}|{}", self.identity);
            return Ok(());
        }
        self.take_majority(keys, &nonce).await
    }

    /// Redlock's two phases: pending on every node, then the token confirmed.
    async fn take_majority(&mut self, keys: &Keys, nonce: &str) -> anyhow::Result<()> {
        let quorum = self.nodes.len() / 2 + 1;
        let pending = format!("{nonce}|pending|{}", self.identity);
        let script = Script::new(PENDING);
        let asked = self.nodes.iter_mut().map(|node| {
            let mut call = script.key(&keys.lock);
            call.key(&keys.fence).arg(&pending).arg(TTL_MS);
            async move { call.invoke_async::<i64>(node).await }
        });
        let fences: Vec<i64> = join_all(asked)
            .await
            .into_iter()
            .map(|a| a.unwrap_or(-1))
            .collect();
        let taken = fences.iter().filter(|f| **f >= 0).count();
        if taken < quorum {
            bail!("the take got {taken} of {} nodes", fences.len());
        }
        let token = fences.iter().max().copied().unwrap_or(0) + 1;
        let value = format!("{nonce}|{token}|{}", self.identity);
        let script = Script::new(CONFIRM);
        let confirms = self.nodes.iter_mut().zip(&fences).filter(|(_, f)| **f >= 0);
        let confirms = confirms.map(|(node, _)| {
            let mut call = script.key(&keys.lock);
            call.key(&keys.fence).arg(&pending).arg(&value).arg(token);
            async move { call.invoke_async::<i64>(node).await }
        });
        let confirmed = join_all(confirms)
            .await
            .into_iter()
            .filter(|a| matches!(a, Ok(1)))
            .count();
        if confirmed < quorum {
            bail!("the token was confirmed on {confirmed} nodes");
        }
        self.value = value;
        Ok(())
    }
}

/// Redis, the last shared holder's release: its entry out of the readers' set, and the
/// read-write lock's followers told when none is left and the lock is free.
const SHARED_RELEASE: &str = "\
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZCARD', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('PUBLISH', KEYS[3], 'released')
end
return 1";

/// Redis, the exclusive take: refused while a live shared holder or a holder is there.
const EXCLUSIVE_TAKE: &str = "\
if redis.call('ZCOUNT', KEYS[1], ARGV[3], '+inf') > 0 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local token = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[2], ARGV[1] .. '|' .. token .. '|' .. ARGV[2], 'PX', ARGV[4])
return token";

/// `rounds` times on the Redis server at `url`: a shared holder holds, an exclusive
/// candidate waits on the read-write lock's channel; the shared holder's release → the
/// exclusive take's answer, ms.
pub fn exclusive_after_shared(url: &str, rounds: usize) -> anyhow::Result<Vec<f64>> {
    block_on(async {
        let keys = Keys::for_election("bench-floor-modes");
        let client = redis::Client::open(url)?;
        let mut reader = client.get_multiplexed_async_connection().await?;
        let mut writer = client.get_multiplexed_async_connection().await?;
        let mut listener = client.get_async_pubsub().await?;
        listener.subscribe(&keys.rw).await?;
        let mut took = Vec::new();
        for round in 0..rounds {
            let member = format!("{round}|{round}|floor-reader");
            let expiry = store_ms(&mut reader).await? + TTL_MS;
            let _: i64 = redis::cmd("ZADD")
                .arg(&keys.readers)
                .arg(expiry)
                .arg(&member)
                .query_async(&mut reader)
                .await?;
            let mut told = listener.on_message();
            tokio::time::sleep(SETTLE).await;
            let now = store_ms(&mut reader).await?;
            let release = Script::new(SHARED_RELEASE);
            let mut release = release.key(&keys.readers);
            release.key(&keys.lock).key(&keys.rw).arg(&member).arg(now);
            let t0 = Instant::now();
            let (released, heard) = tokio::join!(release.invoke_async::<i64>(&mut reader), async {
                futures_util::StreamExt::next(&mut told)
                    .await
                    .context("no message")?;
                let token: i64 = Script::new(EXCLUSIVE_TAKE)
                    .key(&keys.readers)
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .arg(round)
                    .arg("floor-writer")
                    .arg(now)
                    .arg(TTL_MS)
                    .invoke_async(&mut writer)
                    .await?;
                anyhow::Ok((token, Instant::now()))
            });
            released?;
            let (token, t1) = heard?;
            if token < 1 {
                bail!("the exclusive take was refused");
            }
            took.push(between(t0, t1));
            drop(told);
            let _: i64 = redis::cmd("DEL")
                .arg(&keys.lock)
                .query_async(&mut writer)
                .await?;
        }
        Ok(took)
    })
}

/// The server's clock, ms.
async fn store_ms(conn: &mut MultiplexedConnection) -> anyhow::Result<u64> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
    Ok(secs * 1000 + micros / 1000)
}
