//! ZooKeeper at the floor, on the `zookeeper` backend's queue: each candidate's
//! ephemeral-sequential node under the election's; the holder deletes its node, the
//! next in line's watch on it fires, and it lists the queue and claims on a `sync` and
//! a read of its node's stat behind it (the token its node's creation zxid).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use zookeeper_client::{Acls, Client, CreateMode};

use super::{block_on, Round, SETTLE};

const DIR: &str = "/bench-floor";

/// `rounds` handovers between two sessions on the ZooKeeper at `connect`. The waiting
/// session wakes when its watch on the holder's node fires.
pub fn handovers(connect: &str, rounds: usize) -> anyhow::Result<Vec<Round>> {
    block_on(async {
        let mut a = Member::connect(connect).await?;
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        if let Err(e) = a.client.create(DIR, b"", &persistent).await {
            if !matches!(e, zookeeper_client::Error::NodeExists) {
                return Err(e.into());
            }
        }
        let mut b = Member::connect(connect).await?;
        a.join().await?;
        b.join().await?;
        let mut took = Vec::new();
        for round in 0..rounds {
            let (holder, waiter) = match round % 2 {
                0 => (&mut a, &mut b),
                _ => (&mut b, &mut a),
            };
            took.push(handover(holder, waiter).await?);
            holder.join().await?;
        }
        Ok(took)
    })
}

/// The holder deletes its node; the waiter, watching it, lists and claims.
async fn handover(holder: &mut Member, waiter: &mut Member) -> anyhow::Result<Round> {
    let (stat, watcher) = waiter.client.check_and_watch_stat(&holder.path).await?;
    stat.context("the holder's node is gone")?;
    let client = waiter.client.clone();
    let own = waiter.path.clone();
    let wait = tokio::spawn(async move {
        watcher.changed().await;
        let woke = Instant::now();
        let children = client.list_children(DIR).await?;
        let first = children
            .iter()
            .min_by_key(|c| sequence(c))
            .context("an empty queue")?;
        if own != format!("{DIR}/{first}") {
            bail!("another node leads");
        }
        let (synced, stat) = tokio::join!(client.sync(DIR), client.check_stat(&own));
        synced?;
        let token = stat?.context("our node is gone")?.czxid;
        anyhow::Ok((token, woke, Instant::now()))
    });
    tokio::time::sleep(SETTLE).await;
    let t0 = Instant::now();
    holder.client.delete(&holder.path, None).await?;
    let answered = Instant::now();
    let (token, woke, t1) = wait.await??;
    if token < 1 {
        bail!("no fencing token");
    }
    Ok(Round::new(t0, answered, woke, t1))
}

/// A node's sequence, the queue's order.
fn sequence(name: &str) -> u64 {
    let digits = name.rsplit('-').next().unwrap_or("");
    digits.parse().unwrap_or(u64::MAX)
}

/// One candidate: its session and its node in the queue.
struct Member {
    client: Client,
    path: String,
}

impl Member {
    async fn connect(connect: &str) -> anyhow::Result<Member> {
        let client = Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .connect(connect)
            .await?;
        Ok(Member {
            client,
            path: String::new(),
        })
    }

    /// Puts a node of this session at the end of the queue.
    async fn join(&mut self) -> anyhow::Result<()> {
        let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let prefix = format!("{DIR}/n-");
        let (_, sequence) = self.client.create(&prefix, b"floor", &mode).await?;
        self.path = format!("{prefix}{sequence}");
        Ok(())
    }
}
