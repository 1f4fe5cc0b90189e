//! ZooKeeper at the floor, on the `zookeeper` backend's queue: each candidate's
//! ephemeral-sequential node under the election's; the holder deletes its node, the
//! next in line's watch on it fires, and it lists the queue and claims on a `sync` and
//! a read of its node's stat behind it (the token its node's creation zxid). The same
//! handover with the holder's release the close of its session (leasekeeper's: the
//! close deletes the session's own nodes only, where a delete deletes whichever node
//! has the name) shows what the close costs.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use zookeeper_client::{Acls, Client, CreateMode, SessionState};

use super::{block_on, Round, SETTLE};

/// How the holder lets go of its node.
#[derive(Clone, Copy)]
enum Release {
    /// It deletes the node.
    Delete,
    /// It closes its session, which deletes the node (a new session joins the queue
    /// for the next round).
    Close,
}

impl Release {
    /// The election's node of the rounds that release so (apart: the nodes of closed
    /// sessions go only once the server reads the close, after the rounds end).
    fn dir(self) -> &'static str {
        match self {
            Release::Delete => "/bench-floor",
            Release::Close => "/bench-floor-close",
        }
    }
}

/// `rounds` handovers between two sessions on the ZooKeeper at `connect`, the holder
/// deleting its node. The waiting session wakes when its watch on the holder's node
/// fires.
pub fn handovers(connect: &str, rounds: usize) -> anyhow::Result<Vec<Round>> {
    handovers_by(connect, rounds, Release::Delete)
}

/// `rounds` handovers as [`handovers`], the holder closing its session.
pub fn closing_handovers(connect: &str, rounds: usize) -> anyhow::Result<Vec<Round>> {
    handovers_by(connect, rounds, Release::Close)
}

/// `rounds` handovers, the holder releasing as `release` says.
fn handovers_by(connect: &str, rounds: usize, release: Release) -> anyhow::Result<Vec<Round>> {
    block_on(async {
        let dir = release.dir();
        let mut a = Member::connect(connect, dir).await?;
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        if let Err(e) = a.client.create(dir, b"", &persistent).await {
            if !matches!(e, zookeeper_client::Error::NodeExists) {
                return Err(e.into());
            }
        }
        // A series before this one that ended early leaves its nodes until the server
        // ends its sessions.
        for child in a.client.list_children(dir).await? {
            a.client.delete(&format!("{dir}/{child}"), None).await?;
        }
        let mut b = Member::connect(connect, dir).await?;
        a.join().await?;
        b.join().await?;
        let mut took = Vec::new();
        for round in 0..rounds {
            let (holder, waiter) = match round % 2 {
                0 => (&mut a, &mut b),
                _ => (&mut b, &mut a),
            };
            took.push(handover(holder, waiter, release).await?);
            holder.join().await?;
        }
        // Closed here, not left for the server to expire during the rounds after.
        end(a.client).await?;
        end(b.client).await?;
        Ok(took)
    })
}

/// The holder releases its node; the waiter, watching it, lists and claims.
async fn handover(
    holder: &mut Member,
    waiter: &mut Member,
    release: Release,
) -> anyhow::Result<Round> {
    let (stat, watcher) = waiter.client.check_and_watch_stat(&holder.path).await?;
    stat.context("the holder's node is gone")?;
    let client = waiter.client.clone();
    let own = waiter.path.clone();
    let dir = waiter.dir;
    let wait = tokio::spawn(async move {
        watcher.changed().await;
        let woke = Instant::now();
        let children = client.list_children(dir).await?;
        let first = children
            .iter()
            .min_by_key(|c| sequence(c))
            .context("an empty queue")?;
        if own != format!("{dir}/{first}") {
            bail!("another node leads");
        }
        let (synced, stat) = tokio::join!(client.sync(dir), client.check_stat(&own));
        synced?;
        let token = stat?.context("our node is gone")?.czxid;
        anyhow::Ok((token, woke, Instant::now()))
    });
    // A closing holder's next session, opened ahead of the timing.
    let next = match release {
        Release::Delete => None,
        Release::Close => Some(holder.session().await?),
    };
    tokio::time::sleep(SETTLE).await;
    let t0 = Instant::now();
    match next {
        None => holder.client.delete(&holder.path, None).await?,
        Some(next) => close(holder, next).await?,
    }
    let answered = Instant::now();
    let (token, woke, t1) = wait.await??;
    if token < 1 {
        bail!("no fencing token");
    }
    Ok(Round::new(t0, answered, woke, t1))
}

/// Closes the holder's session and waits for the server's answer; the holder goes on
/// in `next`.
async fn close(holder: &mut Member, next: Client) -> anyhow::Result<()> {
    end(std::mem::replace(&mut holder.client, next)).await
}

/// Closes `client`'s session (the library sends the close once the session's last
/// handle is gone) and waits for the server's answer.
async fn end(client: Client) -> anyhow::Result<()> {
    let mut events = client.state_watcher();
    drop(client);
    loop {
        match events.changed().await {
            SessionState::Closed => return Ok(()),
            state @ (SessionState::Expired | SessionState::AuthFailed) => {
                bail!("the session ended as {state:?}")
            }
            _ => {}
        }
    }
}

/// A session on the ZooKeeper at `connect`.
async fn session(connect: &str) -> anyhow::Result<Client> {
    let client = Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(connect)
        .await?;
    Ok(client)
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
    connect: String,
    /// The election's node.
    dir: &'static str,
}

impl Member {
    async fn connect(connect: &str, dir: &'static str) -> anyhow::Result<Member> {
        Ok(Member {
            client: session(connect).await?,
            path: String::new(),
            connect: connect.to_owned(),
            dir,
        })
    }

    /// A new session of this candidate's.
    async fn session(&self) -> anyhow::Result<Client> {
        session(&self.connect).await
    }

    /// Puts a node of this session at the end of the queue.
    async fn join(&mut self) -> anyhow::Result<()> {
        let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let prefix = format!("{}/n-", self.dir);
        let (_, sequence) = self.client.create(&prefix, b"floor", &mode).await?;
        self.path = format!("{prefix}{sequence}");
        Ok(())
    }
}
