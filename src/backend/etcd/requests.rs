//! The etcd backend's requests: each transaction built by a plain function from the
//! keys and what was read, each answer read back into plain values, and the thin
//! `async` calls that send them. What the requests are, on the wire, is decided here
//! and nowhere else.

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, GetResponse, KeyValue, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::time::Instant;

use super::super::queue::{self, Entry};
use super::super::{BackendError, LockMode};
use super::rules;
use crate::status::Holder;

/// An etcd error as ours, for the operation `op`.
pub(super) fn etcd(op: &'static str) -> impl FnOnce(etcd_client::Error) -> BackendError {
    move |e| BackendError::Store {
        op,
        message: e.to_string(),
    }
}

/// A failure of our own finding, for the operation `op`.
pub(super) fn failed(op: &'static str, message: impl Into<String>) -> BackendError {
    BackendError::Store {
        op,
        message: message.into(),
    }
}

/// An error of our own making (a request cancelled by its timeout): what it carried may
/// still be on its way to the server.
pub(super) fn cancelled(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let code: i32 = status.code().into();
            // CANCELLED (1), DEADLINE_EXCEEDED (4).
            code == 1 || code == 4
        }
        _ => false,
    }
}

/// The keys of one election (see the module doc of `super`).
pub(super) struct Keys {
    /// `<election>/`: the queue.
    pub(super) prefix: String,
    /// Where our key goes: the prefix (the election), or its `write/` or `read/`
    /// directory (`--mode`, the layout of etcd's `recipes.RWMutex`).
    pub(super) dir: String,
    /// `<election>.switchover`: the switchover's reservation.
    pub(super) reservation: String,
    /// `<election>.leader`: the announcement a new leader puts.
    pub(super) announcement: String,
}

impl Keys {
    pub(super) fn new(election: &str, mode: LockMode) -> Keys {
        Keys {
            prefix: format!("{election}/"),
            dir: match mode {
                LockMode::Election => format!("{election}/"),
                LockMode::Exclusive => format!("{election}/write/"),
                LockMode::Shared => format!("{election}/read/"),
            },
            reservation: format!("{election}.switchover"),
            announcement: format!("{election}.leader"),
        }
    }

    /// The readers' directory, `<election>/read/`.
    pub(super) fn readers(&self) -> String {
        format!("{}read/", self.prefix)
    }
}

/// The queue as one consistent read saw it.
pub(super) struct Queue {
    /// The revision of the read.
    pub(super) at: i64,
    /// The first key (the leader's).
    pub(super) leader: Option<KeyValue>,
    /// The key just ahead of ours.
    pub(super) predecessor: Option<KeyValue>,
    /// The second key of the queue: the next in line.
    pub(super) next: Option<KeyValue>,
    /// The first keys of the queue (two; [`HOLDERS_SHOWN`] with `--mode`).
    pub(super) heads: Vec<KeyValue>,
    /// The announcement: its value is the key of the leader that put it.
    pub(super) announced: Option<KeyValue>,
    /// Whether our key is still there.
    pub(super) ours: bool,
    /// A switchover's reservation: its value is the key of the candidate named.
    pub(super) reserved: Option<KeyValue>,
}

impl Queue {
    /// The keys this read found, as entries of the queue in its order: the first
    /// ones, the one just ahead of ours (for a reader, the last key ahead that is not
    /// a reader's) and ours (`ours`: our key and its create revision). Every entry
    /// ahead of ours that decides where we stand is among them.
    pub(super) fn entries<'q>(
        &'q self,
        keys: &Keys,
        ours: (&'q [u8], i64),
    ) -> Vec<Entry<&'q [u8]>> {
        let readers = keys.readers();
        let (name, order) = ours;
        let ours = Entry {
            order,
            name,
            shared: name.starts_with(readers.as_bytes()),
        };
        let found = self.heads.iter().chain(&self.predecessor);
        let entries = found.map(|kv| entry_of(kv, &readers)).chain([ours]);
        queue::in_order(entries.collect())
    }
}

/// A key of the queue as an entry: ordered by its create revision, a reader's when it
/// lies under `readers` (`<election>/read/`).
pub(super) fn entry_of<'q>(kv: &'q KeyValue, readers: &str) -> Entry<&'q [u8]> {
    Entry {
        order: kv.create_revision(),
        name: kv.key(),
        shared: kv.key().starts_with(readers.as_bytes()),
    }
}

/// Who a key of the queue names, with its token.
pub(super) fn holder_of(kv: &KeyValue) -> Holder {
    Holder {
        identity: String::from_utf8_lossy(kv.value()).into_owned(),
        token: u64::try_from(kv.create_revision()).ok(),
    }
}

/// How many holders a read-write lock's candidate lists (`/leader`'s `holders`): the
/// first keys of the queue it reads, readers' while no other key is ahead.
const HOLDERS_SHOWN: i64 = 16;

/// One consistent read: the leader and the next in line, the key just ahead of ours
/// (for a shared candidate, `reader`: the last key ahead of ours that is not a
/// reader's), ours, the reservation and the announcement (`ours`: our key, its create
/// revision, and how we hold).
pub(super) fn queue_read(keys: &Keys, ours: (&str, i64, LockMode)) -> Txn {
    let prefix = keys.prefix.as_str();
    let (key, revision, mode) = ours;
    let reader = mode == LockMode::Shared;
    let first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(match mode {
            LockMode::Election => 2,
            _ => HOLDERS_SHOWN,
        });
    let ahead = || {
        GetOptions::new()
            .with_max_create_revision(revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
    };
    let (readers, end) = (keys.readers(), rules::prefix_end(prefix));
    let mut ops = vec![
        TxnOp::get(prefix, Some(first)),
        match reader {
            // The keys before the readers' directory, and those after it.
            true => TxnOp::get(prefix, Some(ahead().with_range(readers.clone()))),
            false => TxnOp::get(prefix, Some(ahead().with_prefix())),
        },
        TxnOp::get(key, None),
        TxnOp::get(keys.reservation.as_str(), None),
        TxnOp::get(keys.announcement.as_str(), None),
    ];
    if reader {
        let after = rules::prefix_end(&readers);
        ops.push(TxnOp::get(after, Some(ahead().with_range(end))));
    }
    Txn::new().and_then(ops)
}

/// The queue as the answer to [`queue_read`] shows it (`revision`: our key's create
/// revision).
pub(super) fn queue_of(answer: &TxnResponse, revision: i64) -> Queue {
    let responses = answer.op_responses();
    let second = |r: &TxnOpResponse| match r {
        TxnOpResponse::Get(g) => g.kvs().get(1).cloned(),
        _ => None,
    };
    let predecessor = [responses.get(1), responses.get(5)]
        .into_iter()
        .flatten()
        .filter_map(first_kv)
        .max_by_key(|kv| kv.create_revision());
    Queue {
        at: answer.header().map(|h| h.revision()).unwrap_or(0),
        leader: responses.first().and_then(first_kv).cloned(),
        next: responses.first().and_then(second),
        heads: match responses.first() {
            Some(TxnOpResponse::Get(g)) => g.kvs().to_vec(),
            _ => Vec::new(),
        },
        announced: responses.get(4).and_then(first_kv).cloned(),
        predecessor: predecessor.cloned(),
        ours: responses
            .get(2)
            .and_then(first_kv)
            .is_some_and(|kv| kv.create_revision() == revision),
        reserved: responses.get(3).and_then(first_kv).cloned(),
    }
}

/// Sends [`queue_read`] (`revision`: our key's create revision).
pub(super) async fn read_queue(
    client: &mut Client,
    read: Txn,
    revision: i64,
) -> Result<Queue, BackendError> {
    let answer = client.txn(read).await.map_err(etcd("campaign"))?;
    Ok(queue_of(&answer, revision))
}

/// Every key in the queue (each attached to a live lease), in queue order: the lowest
/// create revision first.
pub(super) async fn read_candidates(
    client: &mut Client,
    prefix: &str,
    op: &'static str,
) -> Result<Vec<KeyValue>, BackendError> {
    let all = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let answer = client.get(prefix, Some(all)).await.map_err(etcd(op))?;
    Ok(answer.kvs().to_vec())
}

fn first_kv(resp: &TxnOpResponse) -> Option<&KeyValue> {
    match resp {
        TxnOpResponse::Get(g) => g.kvs().first(),
        _ => None,
    }
}

/// Puts our key (`identity`, on `lease`) only if absent; else reads it, so that a
/// put whose answer was lost is found again.
pub(super) fn place(key: &str, identity: &str, lease: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            identity,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)])
}

/// Our key's create revision (our place in the queue) from the answer to [`place`].
pub(super) fn placed_revision(answer: &TxnResponse) -> Result<i64, BackendError> {
    let revision = if answer.succeeded() {
        answer.header().map(|h| h.revision()).unwrap_or(0)
    } else {
        let responses = answer.op_responses();
        let found = responses.first().and_then(first_kv);
        found.map(|kv| kv.create_revision()).unwrap_or(0)
    };
    match revision {
        0 => Err(failed("campaign", "could not place our key in the queue")),
        placed => Ok(placed),
    }
}

/// Deletes our key while it is still the one placed at `revision` (a switchover's
/// requeue).
pub(super) fn unqueue(key: &str, revision: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::delete(key, None)])
}

/// Deletes the reservation `key` unless it was written again since `mod_revision`.
pub(super) fn spend(key: &str, mod_revision: i64) -> Txn {
    Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, mod_revision)])
        .and_then([TxnOp::delete(key, None)])
}

/// The switchover's reservation `reservation` = the named key, attached to its lease,
/// and the delete of our key, in one transaction that holds only while both keys are
/// still the ones read (`ours`: our key and its create revision).
pub(super) fn hand_over(reservation: &str, named: &KeyValue, ours: (&str, i64)) -> Txn {
    let (key, revision) = ours;
    Txn::new()
        .when([
            Compare::create_revision(named.key(), CompareOp::Equal, named.create_revision()),
            Compare::create_revision(key, CompareOp::Equal, revision),
        ])
        .and_then([
            TxnOp::put(
                reservation,
                named.key(),
                Some(PutOptions::new().with_lease(named.lease())),
            ),
            TxnOp::delete(key, None),
        ])
}

/// Sends `txn` in the background, logging a failure at debug level only (`what`):
/// tidying that nothing waits for.
pub(super) fn in_background(mut client: Client, txn: Txn, what: &'static str) {
    tokio::spawn(async move {
        if let Err(e) = client.txn(txn).await {
            tracing::debug!(error = %e, "{what}");
        }
    });
}

/// Puts `ours` in the announcement `at`, with no lease (its delete would wake the
/// followers at the next release), in the background.
pub(super) fn announce(mut client: Client, at: String, ours: String) {
    tokio::spawn(async move {
        if let Err(e) = client.put(at, ours, None).await {
            tracing::debug!(error = %e, "the leader's announcement failed");
        }
    });
}

/// The first key of `queue` (in queue order) whose value is `to`, other than ours
/// (`ours`).
fn named_in<'q>(queue: &'q [KeyValue], to: &str, ours: &str) -> Option<&'q KeyValue> {
    let entries = queue.iter().map(|kv| (kv.key(), kv.value()));
    let named = queue::named_entry(entries, to, &ours.as_bytes());
    named.map(|i| &queue[i])
}

/// The switchover's reservation for the first live candidate named `to`, written with
/// the delete of our own key (see [`hand_over`]). The named key, or `None` when `to`
/// is not queued (or the queue moved meanwhile): nothing is written then.
pub(super) async fn reserve(
    client: &mut Client,
    keys: &Keys,
    to: &str,
    ours: (&str, i64),
) -> Result<Option<String>, BackendError> {
    let queue = read_candidates(client, &keys.prefix, "release").await?;
    let Some(named) = named_in(&queue, to, ours.0) else {
        return Ok(None);
    };
    let txn = hand_over(&keys.reservation, named, ours);
    let answer = client.txn(txn).await.map_err(etcd("release"))?;
    Ok(answer
        .succeeded()
        .then(|| String::from_utf8_lossy(named.key()).into_owned()))
}

/// Whether a switchover's reservation (read with the queue) names a live key queued
/// behind ours: then we must let it pass. A reservation naming our own key asks
/// nothing of us, and needs no read; else the named key is read.
pub(super) async fn ahead_of_reserved(
    client: &mut Client,
    reserved: &KeyValue,
    ours: (&str, i64),
) -> Result<bool, BackendError> {
    if reserved.value() == ours.0.as_bytes() {
        return Ok(false);
    }
    let named = client
        .get(reserved.value(), None)
        .await
        .map_err(etcd("campaign"))?;
    let named = named.kvs().first().map(|kv| kv.create_revision());
    Ok(rules::lets_named_pass(reserved.value(), named, ours))
}

/// The revision to watch our own key from, when a read of it (`answer`) shows it is
/// still ours (`revision`: its create revision; `lease`, `identity`: ours).
pub(super) fn own_key_read(
    answer: &GetResponse,
    revision: i64,
    lease: i64,
    identity: &str,
) -> Option<i64> {
    let at = answer.header().map(|h| h.revision()).unwrap_or(0);
    let found = answer
        .kvs()
        .first()
        .map(|kv| (kv.create_revision(), kv.lease(), kv.value()));
    let seen = rules::seen_in_read(found, revision, lease, identity);
    seen.still_ours().then_some(at + 1)
}

/// Revokes `lease` (a release), its first answer to `first`, and again while the store
/// does not answer, until `until`: a release whose answer is lost (the elector stopped
/// waiting for it, the link dropped it) would otherwise leave our key at its place in
/// the queue until the lease expires by itself, a ttl or more after the store is back
/// (a restarted etcd gives every lease its whole ttl again), and every candidate
/// behind it would wait that long. Each attempt has the client's request timeout.
pub(super) async fn revoke_until_gone(
    mut client: Client,
    lease: i64,
    until: Instant,
    first: tokio::sync::oneshot::Sender<Result<(), BackendError>>,
) {
    let mut first = Some(first);
    loop {
        let answer = client.lease_revoke(lease).await;
        let gone = answer
            .as_ref()
            .map_or_else(rules::lease_not_found, |_| true);
        if let Some(first) = first.take() {
            let _ = first.send(answer.map(drop).map_err(etcd("release")));
        }
        if gone || Instant::now() >= until {
            return;
        }
        tokio::time::sleep(rules::REVOKE_AGAIN_AFTER).await;
    }
}
