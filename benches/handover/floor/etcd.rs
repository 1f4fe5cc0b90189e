//! etcd at the floor, on `concurrency.Election`'s layout as the `etcd` backend uses it:
//! each candidate's key `<election>/<lease id>` on a lease of its own, created only if
//! absent; the holder revokes its lease (which deletes its key), the next in line's
//! watch on that key tells it, and its read of the queue (the first key by create
//! revision, and its own) makes it the holder, the token its key's create revision.

use std::time::Instant;

use anyhow::{bail, Context};
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchStream,
};

use super::{block_on, Round, SETTLE};

const PREFIX: &str = "bench-floor/";

/// `rounds` handovers between two clients of the etcd at `endpoint`. The waiting client
/// wakes when its watch yields the holder's key's delete event.
pub fn handovers(endpoint: &str, rounds: usize) -> anyhow::Result<Vec<Round>> {
    block_on(async {
        // A series before this one leaves its two keys, leased for a while yet.
        let mut client = Client::connect([endpoint], None).await?;
        client
            .delete(PREFIX, Some(DeleteOptions::new().with_prefix()))
            .await?;
        let mut a = Member::join(endpoint, "floor-a").await?;
        let mut b = Member::join(endpoint, "floor-b").await?;
        let mut took = Vec::new();
        for round in 0..rounds {
            let (holder, waiter) = match round % 2 {
                0 => (&mut a, &mut b),
                _ => (&mut b, &mut a),
            };
            took.push(handover(holder, waiter).await?);
            *holder = Member::join(endpoint, holder.identity).await?;
        }
        Ok(took)
    })
}

/// The holder revokes; the waiter, watching the holder's key, reads the queue.
async fn handover(holder: &mut Member, waiter: &mut Member) -> anyhow::Result<Round> {
    let mut watch = waiter.watch(&holder.key).await?;
    let mut next = waiter.client.clone();
    let own = waiter.key.clone();
    let wait = tokio::spawn(async move {
        deleted(&mut watch).await?;
        let woke = Instant::now();
        let token = first_in_queue(&mut next, &own).await?;
        anyhow::Ok((token, woke, Instant::now()))
    });
    tokio::time::sleep(SETTLE).await;
    let t0 = Instant::now();
    holder.client.lease_revoke(holder.lease).await?;
    let answered = Instant::now();
    let (token, woke, t1) = wait.await??;
    if token < 1 {
        bail!("no fencing token");
    }
    Ok(Round::new(t0, answered, woke, t1))
}

/// Waits for a delete event on `watch`.
async fn deleted(watch: &mut WatchStream) -> anyhow::Result<()> {
    loop {
        let message = watch.message().await?.context("the watch ended")?;
        if message
            .events()
            .iter()
            .any(|e| e.event_type() == EventType::Delete)
        {
            return Ok(());
        }
    }
}

/// The candidate's read of the queue: its key's create revision when it is first.
async fn first_in_queue(client: &mut Client, own: &str) -> anyhow::Result<i64> {
    let first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(2);
    let read = Txn::new().and_then([TxnOp::get(PREFIX, Some(first)), TxnOp::get(own, None)]);
    let answer = client.txn(read).await?;
    let Some(TxnOpResponse::Get(queue)) = answer.op_responses().into_iter().next() else {
        bail!("the read answered no queue");
    };
    let head = queue.kvs().first().context("an empty queue")?;
    if head.key() != own.as_bytes() {
        bail!("another key leads");
    }
    Ok(head.create_revision())
}

/// One candidate: its client, lease and key.
struct Member {
    client: Client,
    identity: &'static str,
    lease: i64,
    key: String,
}

impl Member {
    /// Connects and puts the candidate's key at the end of the queue.
    async fn join(endpoint: &str, identity: &'static str) -> anyhow::Result<Member> {
        let mut client = Client::connect([endpoint], None).await?;
        let lease = client.lease_grant(15, None).await?.id();
        let key = format!("{PREFIX}{lease:x}");
        let put = PutOptions::new().with_lease(lease);
        let create = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), identity, Some(put))]);
        if !client.txn(create).await?.succeeded() {
            bail!("the key {key} exists");
        }
        Ok(Member {
            client,
            identity,
            lease,
            key,
        })
    }

    /// A watch on `key` from now, open at the server once this returns.
    async fn watch(&mut self, key: &str) -> anyhow::Result<WatchStream> {
        let now = self.client.get(key, None).await?;
        let from = now.header().context("no header")?.revision() + 1;
        let options = WatchOptions::new().with_start_revision(from);
        let mut watch = self.client.watch(key, Some(options)).await?;
        let created = watch.message().await?.context("the watch ended")?;
        if !created.created() {
            bail!("the watch was not created");
        }
        Ok(watch)
    }
}
