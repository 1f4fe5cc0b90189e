//! The ZooKeeper campaign's requests apart from its watches: our node (protected
//! create), the listing of the queue with the reservation and the announcement, the
//! proofs of our node through the ensemble's leader, the switchover's reservation, and
//! the leader's announcement. What their answers mean is the core's and the rules'.

use zookeeper_client::{Client, CreateOptions, MultiWriteError, MultiWriter, Stat};

use super::super::queue::{self, Entry};
use super::super::BackendError;
use super::core::{self, Follow};
use super::rules::{self, OWN_VERSION};
use super::session::zk;
use super::watches::{node_watch, Confirmation, NodeWatch};

/// The paths of one election: its node (the queue's parent), the switchover's
/// reservation and the leader's announcement beside it (see the module doc of
/// `super`).
pub(super) struct Paths {
    pub(super) dir: String,
    pub(super) reservation: String,
    pub(super) announcement: String,
}

impl Paths {
    pub(super) fn new(root: &str, election: &str) -> Paths {
        let dir = format!("{}/{election}", root.trim_end_matches('/'));
        Paths {
            reservation: format!("{dir}.switchover"),
            announcement: format!("{dir}.leader"),
            dir,
        }
    }

    /// The path of the latch node `name`.
    pub(super) fn node(&self, name: &str) -> String {
        format!("{}/{name}", self.dir)
    }

    /// What a follower reads and watches, by the nodes' paths.
    pub(super) fn of(&self, follow: Follow<String>) -> Follow<String> {
        let path = |name: String| self.node(&name);
        match follow {
            Follow::Head {
                head,
                predecessor,
                seen,
            } => Follow::Head {
                head: path(head),
                predecessor: predecessor.map(path),
                seen,
            },
            Follow::Announcement {
                head,
                predecessor,
                next,
                seen,
            } => Follow::Announcement {
                head: path(head),
                predecessor: path(predecessor),
                next: next.map(path),
                seen,
            },
        }
    }
}

/// A switchover's reservation: the name of the latch node it leaves the lease to, and
/// its version (it is deleted only as it was read).
pub(super) struct Reservation {
    pub(super) node: String,
    version: i32,
}

/// The reservation as a `get_data` of it found it.
pub(super) fn reservation_of(
    read: Result<(Vec<u8>, Stat), zookeeper_client::Error>,
) -> Result<Option<Reservation>, BackendError> {
    match read {
        Ok((data, stat)) => Ok(Some(Reservation {
            node: String::from_utf8_lossy(&data).into_owned(),
            version: stat.version,
        })),
        Err(zookeeper_client::Error::NoNode) => Ok(None),
        Err(e) => Err(zk("campaign")(e)),
    }
}

/// The announcement as a `get_data` of it found it: the node it names and its mzxid.
fn announced_of(
    read: Result<(Vec<u8>, Stat), zookeeper_client::Error>,
) -> Result<Option<(String, i64)>, BackendError> {
    match read {
        Ok((data, stat)) => Ok(Some((
            String::from_utf8_lossy(&data).into_owned(),
            stat.mzxid,
        ))),
        Err(zookeeper_client::Error::NoNode) => Ok(None),
        Err(e) => Err(zk("campaign")(e)),
    }
}

/// One listing of the queue, with the reservation and the announcement read beside it.
pub(super) struct Listing {
    pub(super) queue: Vec<Entry<String>>,
    pub(super) reserved: Option<Reservation>,
    pub(super) announced: Option<(String, i64)>,
}

/// The listing: the reservation first, then the children and the announcement, all
/// sent at once. A session's requests are served in order, so a named node that died
/// after the reservation was read is missing from the list (the reservation is void).
pub(super) async fn list(client: &Client, paths: &Paths) -> Result<Listing, BackendError> {
    let reserved = client.get_data(&paths.reservation);
    let listed = client.list_children(&paths.dir);
    let announced = client.get_data(&paths.announcement);
    let (reserved, listed, announced) = tokio::join!(reserved, listed, announced);
    Ok(Listing {
        reserved: reservation_of(reserved)?,
        queue: rules::queue_of(listed.map_err(zk("campaign"))?),
        announced: announced_of(announced)?,
    })
}

/// One latch node of the queue: its name and the identity it holds.
pub(super) struct Candidate {
    pub(super) name: String,
    pub(super) identity: String,
}

/// The latch nodes under `dir` with their identities, lowest sequence first. The data
/// requests all go out before the first answer is awaited (one round trip's wait); a
/// node gone in between is left out.
pub(super) async fn read_candidates(
    client: &Client,
    dir: &str,
    op: &'static str,
) -> Result<Vec<Candidate>, BackendError> {
    let names = rules::queue_of(client.list_children(dir).await.map_err(zk(op))?);
    let reads = (names.iter()).map(|e| client.get_data(&format!("{dir}/{}", e.name)));
    let reads = futures_util::future::join_all(reads.collect::<Vec<_>>()).await;
    candidates_of(names, reads, op)
}

/// The latch nodes `names` with the identities their reads (`reads`, in the same
/// order) found; a node gone in between is left out.
fn candidates_of(
    names: Vec<Entry<String>>,
    reads: Vec<Result<(Vec<u8>, Stat), zookeeper_client::Error>>,
    op: &'static str,
) -> Result<Vec<Candidate>, BackendError> {
    let mut entries = Vec::with_capacity(names.len());
    for (Entry { name, .. }, read) in names.into_iter().zip(reads) {
        match read {
            Ok((data, _)) => entries.push(Candidate {
                name,
                identity: String::from_utf8_lossy(&data).into_owned(),
            }),
            Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => return Err(zk(op)(e)),
        }
    }
    Ok(entries)
}

/// Our node under `dir`, found by its protection `prefix` (a create whose answer was
/// lost) or created, holding `identity`: its name.
pub(super) async fn ensure_node(
    client: &Client,
    dir: &str,
    (prefix, identity): (&str, &str),
    options: &CreateOptions<'_>,
) -> Result<String, BackendError> {
    let children = client.list_children(dir).await.map_err(zk("campaign"))?;
    if let Some(found) = children.into_iter().find(|c| c.starts_with(prefix)) {
        return Ok(found);
    }
    let path = format!("{dir}/{prefix}");
    let (_, sequence) =
        (client.create(&path, identity.as_bytes(), options).await).map_err(zk("campaign"))?;
    Ok(format!("{prefix}{sequence}"))
}

/// Deletes our node at `path` (a requeue): gone already is fine.
pub(super) async fn delete_node(client: &Client, path: &str) -> Result<(), BackendError> {
    match client.delete(path, None).await {
        Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
        Err(e) => Err(zk("campaign")(e)),
    }
}

/// Whether a session's answer says it is alive: `false` when it expired.
fn alive(
    answer: Result<(), zookeeper_client::Error>,
    op: &'static str,
) -> Result<bool, BackendError> {
    match answer {
        Ok(()) => Ok(true),
        Err(zookeeper_client::Error::SessionExpired) => Ok(false),
        Err(e) => Err(zk(op)(e)),
    }
}

/// Whether our node's `multi` check ran: `false` when the node is gone or changed,
/// or the session expired.
fn checked<T>(answer: Result<T, MultiWriteError>, op: &'static str) -> Result<bool, BackendError> {
    match answer.map_err(zookeeper_client::Error::from) {
        Ok(_) => Ok(true),
        Err(
            zookeeper_client::Error::NoNode
            | zookeeper_client::Error::BadVersion
            | zookeeper_client::Error::SessionExpired,
        ) => Ok(false),
        Err(other) => Err(zk(op)(other)),
    }
}

/// The claim's confirmation: the `multi` check of our node at `path`, sent now (after
/// whatever this session sent before), answered in the background.
fn confirmation(client: &Client, path: &str) -> Confirmation {
    let (confirming, check) = (client.clone(), path.to_owned());
    let confirmation = tokio::spawn(async move {
        let mut multi = confirming.new_multi_writer();
        if multi.add_check_version(&check, OWN_VERSION).is_err() {
            return false;
        }
        multi.commit().await.is_ok()
    });
    Box::pin(async move { confirmation.await.unwrap_or(false) })
}

/// A claim's proof, in one round trip without waiting for a disk write: a `sync`
/// (the server we are connected to passes it to the ensemble's leader, which checks
/// our session, and answers once it has applied what that leader committed before
/// it), then our node's stat with a watch, read behind it on the same session: there,
/// unwritten, and owned by this very session (`core::proves`). The `multi` check of
/// [`prove_own_node`] goes out right behind them, and its answer (a disk write later)
/// is the confirmation: the claim ends when it fails or its connection drops. That
/// covers the one case where a `sync` proves less than a transaction: a ZooKeeper
/// leader cut off from its quorum answers syncs until it steps down, and it closes
/// its client connections when it does, before a new leader can expire our session
/// (that takes a session timeout from the new leader's start).
pub(super) async fn sync_prove_and_watch(
    client: &Client,
    dir: &str,
    path: &str,
) -> Result<Option<(Stat, NodeWatch, Confirmation)>, BackendError> {
    let synced = client.sync(dir);
    let watched = client.check_and_watch_stat(path);
    // Sent after the two above (the session's requests are served in order, so
    // their answers never wait for this one's disk write).
    let confirmation = confirmation(client, path);
    let (synced, watched) = tokio::join!(synced, watched);
    if !alive(synced, "campaign")? {
        return Ok(None);
    }
    let (stat, watcher) = watched.map_err(zk("campaign"))?;
    Ok(claim_proof(stat, client.session_id().0).map(|s| (s, node_watch(watcher), confirmation)))
}

/// Our node's stat when it proves the claim (see `core::proves`).
fn claim_proof(stat: Option<Stat>, session: i64) -> Option<Stat> {
    let (owner, version) = (
        stat.as_ref().map(|s| s.ephemeral_owner),
        stat.as_ref().map(|s| s.version),
    );
    stat.filter(|_| core::proves(owner, version, session))
}

/// The proof below and a watch on our node, sent together (one round trip): the
/// node's stat and the watch when the proof holds and the node is there.
pub(super) async fn prove_and_watch(
    client: &Client,
    path: &str,
    op: &'static str,
) -> Result<Option<(Stat, NodeWatch)>, BackendError> {
    let proof = prove_own_node(client, path, op);
    let watched = client.check_and_watch_stat(path);
    let (proof, watched) = tokio::join!(proof, watched);
    let (stat, watcher) = watched.map_err(zk(op))?;
    Ok(match stat {
        Some(s) if proof? => Some((s, node_watch(watcher))),
        _ => None,
    })
}

/// One transaction through the ensemble's leader that checks our node is there,
/// unchanged (see the module doc of `super`), and a read of its stat sent right
/// behind it on the same session (so answered from a state at least as new as the
/// check's): owned by this very session (a node deleted and created again under our
/// name by another client has version 0 too). `Ok(false)`: it is gone or not ours.
pub(super) async fn prove_own_node(
    client: &Client,
    path: &str,
    op: &'static str,
) -> Result<bool, BackendError> {
    let mut multi = client.new_multi_writer();
    multi.add_check_version(path, OWN_VERSION).map_err(zk(op))?;
    let check = multi.commit();
    let stat = client.check_stat(path);
    if !checked(check.await, op)? {
        return Ok(false);
    }
    let found = stat.await.map_err(zk(op))?;
    let owner = found.map(|s| s.ephemeral_owner);
    Ok(rules::seen_node(owner, client.session_id().0).still_ours())
}

/// The switchover's `multi`: checks the named node is there, creates or rewrites
/// the reservation (at the version read: `existing`) to name it, and deletes our own
/// node. (`at`: the election's node, the reservation's, and how to create the latter.)
fn reservation_multi<'c>(
    client: &'c Client,
    (dir, reservation, options): (&str, &str, &CreateOptions<'_>),
    (named, ours): (&str, &str),
    existing: Option<Stat>,
) -> Result<MultiWriter<'c>, BackendError> {
    let mut multi = client.new_multi_writer();
    let path = |name: &str| format!("{dir}/{name}");
    (multi.add_check_version(&path(named), -1)).map_err(zk("release"))?;
    match existing {
        Some(stat) => multi.add_set_data(reservation, named.as_bytes(), Some(stat.version)),
        None => multi.add_create(reservation, named.as_bytes(), options),
    }
    .map_err(zk("release"))?;
    multi.add_delete(&path(ours), None).map_err(zk("release"))?;
    Ok(multi)
}

/// The switchover's reservation for the first live candidate named `to`: one
/// `multi` (see [`reservation_multi`]), so that no follower sees our node gone and
/// no reservation. The named node, or `None` when `to` is not queued (or it, or our
/// node, went meanwhile): nothing is written then.
pub(super) async fn reserve(
    client: &Client,
    at: (&str, &str, &CreateOptions<'_>),
    to: &str,
    ours: &str,
) -> Result<Option<String>, BackendError> {
    let (dir, reservation, _) = at;
    let queue = read_candidates(client, dir, "release").await?;
    let entries = (queue.iter()).map(|e| (e.name.as_str(), e.identity.as_bytes()));
    let Some(named) = queue::named_entry(entries, to, &ours).map(|i| &queue[i]) else {
        return Ok(None);
    };
    // Another switchover may write the reservation between our read of it and our
    // multi (its version check fails then): read it again and retry.
    for _ in 0..3 {
        let existing = client
            .check_stat(reservation)
            .await
            .map_err(zk("release"))?;
        let mut multi = reservation_multi(client, at, (&named.name, ours), existing)?;
        if let Some(written) = reservation_written(multi.commit().await)? {
            return Ok(written.then(|| named.name.clone()));
        }
    }
    Ok(None)
}

/// What the answer to a reservation's `multi` says: written (`Some(true)`), not
/// written because the named node or ours went (`Some(false)`), or to be tried again
/// because another switchover wrote the reservation since we read it (`None`).
fn reservation_written<T>(
    answer: Result<T, MultiWriteError>,
) -> Result<Option<bool>, BackendError> {
    match answer {
        Ok(_) => Ok(Some(true)),
        Err(MultiWriteError::OperationFailed { index: 1, .. }) => Ok(None),
        Err(MultiWriteError::OperationFailed { .. }) => Ok(Some(false)),
        Err(e) => Err(zk("release")(e.into())),
    }
}

/// Deletes the reservation at `path` that named us, now that we lead, unless it was
/// written again since it was read. In the background: it is only tidying (a
/// reservation naming the leader changes nothing, and it is void once our node goes).
pub(super) fn spend_reservation(client: &Client, path: &str, reserved: Option<Reservation>) {
    let Some(r) = reserved else {
        return;
    };
    let (client, path) = (client.clone(), path.to_owned());
    tokio::spawn(async move {
        if let Err(e) = client.delete(&path, Some(r.version)).await {
            tracing::debug!(error = %e, "switchover: the spent reservation stays");
        }
    });
}

/// Tells the followers behind the next in line that we lead now: our node's name
/// written to the announcement at `path` (`queue::HolderNews`). In the background,
/// after the claim: their looks follow this write, so they never compete with a claim.
pub(super) fn announce(client: &Client, path: &str, ours: &str, options: CreateOptions<'static>) {
    let (client, path, data) = (client.clone(), path.to_owned(), ours.as_bytes().to_vec());
    tokio::spawn(async move {
        // Created by the first leader of the election, rewritten by every next one.
        for _ in 0..2 {
            let done = match client.set_data(&path, &data, None).await {
                Err(zookeeper_client::Error::NoNode) => {
                    client.create(&path, &data, &options).await.map(|_| ())
                }
                written => written.map(|_| ()),
            };
            match done {
                Err(zookeeper_client::Error::NodeExists) => continue,
                Err(e) => tracing::debug!(error = %e, "the leader's announcement failed"),
                Ok(()) => {}
            }
            return;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_written_retried_or_given_up() {
        let failed = |index| MultiWriteError::OperationFailed {
            index,
            source: zookeeper_client::Error::BadVersion,
        };
        assert_eq!(reservation_written(Ok(())).ok(), Some(Some(true)));
        // The reservation's write failed its version check: another switchover wrote
        // it since our read.
        assert_eq!(reservation_written::<()>(Err(failed(1))).ok(), Some(None));
        // The named node (index 0) or ours (index 2) went.
        assert_eq!(
            reservation_written::<()>(Err(failed(0))).ok(),
            Some(Some(false))
        );
        assert_eq!(
            reservation_written::<()>(Err(failed(2))).ok(),
            Some(Some(false))
        );
        let lost = MultiWriteError::RequestFailed {
            source: zookeeper_client::Error::ConnectionLoss,
        };
        assert!(reservation_written::<()>(Err(lost)).is_err());
    }
}
