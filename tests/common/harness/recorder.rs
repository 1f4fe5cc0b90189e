//! Ground truth from the store: a recorder follows the store's own change stream for
//! one election (an etcd watch on the prefix, a ZooKeeper child watch, the Redis
//! events channel and keyspace events) and timestamps every change of holder on
//! CLOCK_MONOTONIC as it *arrives* here. The arrival is after the real change, so the
//! checks below can only be too lenient, never wrong:
//!
//! - a claim must correspond to a change that made that tenure (identity, token) the
//!   holder (on etcd and ZooKeeper a candidate becomes head of the queue before it
//!   campaigns, so the change may arrive before the claim's request was sent);
//! - a claim must end no later than the arrival of the next change that gave the
//!   lease to another tenure.
//!
//! Each recorder runs on its own thread with its own tokio runtime, reconnects when
//! its store restarts, and stops on drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use leasekeeper::clock::monotonic_now_ns;

use crate::common::checks::checker::LoggedClaim;
use crate::common::eventually;

/// One tenure as the store names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenure {
    pub identity: String,
    pub token: u64,
}

/// A change of holder, stamped on arrival (CLOCK_MONOTONIC ns).
#[derive(Clone, Debug)]
pub struct HolderChange {
    pub at_ns: u64,
    pub holder: Option<Tenure>,
    /// The recorder lost its view here (its session ended or was cut): what happens
    /// until its next change is unseen. A claim whose tenure falls in such a gap
    /// cannot be judged against the store (the other checks still judge it).
    pub blind: bool,
}

type Changes = Arc<Mutex<Vec<HolderChange>>>;

pub struct Recorder {
    changes: Changes,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Starts `run(changes, stop, looked)` on a thread of its own, and returns once it
    /// has set `looked` (its first look taken, its watch open: nothing the sidecars
    /// write from here on is missed).
    fn spawn<F>(
        run: impl FnOnce(Changes, Arc<AtomicBool>, Arc<AtomicBool>) -> F + Send + 'static,
    ) -> Recorder
    where
        F: std::future::Future<Output = ()>,
    {
        let changes: Changes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let looked = Arc::new(AtomicBool::new(false));
        let (c, s, l) = (changes.clone(), stop.clone(), looked.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("recorder runtime");
            rt.block_on(run(c, s, l));
        });
        let first_look = || looked.load(Ordering::SeqCst).then_some(());
        eventually(Duration::from_secs(30), first_look)
            .expect("the store recorder took its first look within 30 s");
        Recorder {
            changes,
            stop,
            thread: Some(thread),
        }
    }

    /// Everything recorded so far, in the store's order.
    pub fn changes(&self) -> Vec<HolderChange> {
        self.changes.lock().expect("changes").clone()
    }

    /// Stops recording (a recorder that polls takes one last look first) and returns
    /// everything recorded.
    pub fn finish(mut self) -> Vec<HolderChange> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.changes()
    }

    /// An etcd watch on `<election>/`: the key with the lowest create revision leads.
    pub fn etcd(endpoints: Vec<String>, election: &str) -> Recorder {
        let prefix = format!("{election}/");
        Recorder::spawn(move |changes, stop, looked| async move {
            use etcd_client::{EventType, GetOptions, WatchOptions};
            use std::collections::BTreeMap;
            while !stop.load(Ordering::SeqCst) {
                let Ok(mut client) = etcd_client::Client::connect(&endpoints, None).await else {
                    // Pause: before the next try.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let Ok(read) = client
                    .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
                    .await
                else {
                    // Pause: before the next try.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let at = read.header().map_or(0, |h| h.revision());
                // key → (create revision, value)
                let mut queue: BTreeMap<Vec<u8>, (i64, String)> = read
                    .kvs()
                    .iter()
                    .map(|kv| {
                        let value = String::from_utf8_lossy(kv.value()).into_owned();
                        (kv.key().to_vec(), (kv.create_revision(), value))
                    })
                    .collect();
                note(&changes, head(&queue));
                let Ok(mut stream) = client
                    .watch(
                        prefix.as_str(),
                        Some(
                            WatchOptions::new()
                                .with_prefix()
                                .with_start_revision(at + 1),
                        ),
                    )
                    .await
                else {
                    continue;
                };
                looked.store(true, Ordering::SeqCst);
                loop {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let msg =
                        tokio::time::timeout(Duration::from_millis(200), stream.message()).await;
                    let resp = match msg {
                        Err(_) => continue,
                        Ok(Ok(Some(resp))) => resp,
                        Ok(_) => {
                            note_blind(&changes);
                            break;
                        }
                    };
                    if resp.canceled() {
                        note_blind(&changes);
                        break;
                    }
                    for e in resp.events() {
                        let Some(kv) = e.kv() else { continue };
                        match e.event_type() {
                            EventType::Put => {
                                let value = String::from_utf8_lossy(kv.value()).into_owned();
                                queue.insert(kv.key().to_vec(), (kv.create_revision(), value));
                            }
                            EventType::Delete => {
                                queue.remove(kv.key());
                            }
                        }
                    }
                    note(&changes, head(&queue));
                }
            }
        })
    }

    /// A ZooKeeper child watch on the election's directory: the lowest sequence leads.
    pub fn zookeeper(connect: String, dir: String) -> Recorder {
        use std::collections::BTreeMap;
        use zookeeper_client::{AddWatchMode, EventType};
        // A persistent recursive watch (ZooKeeper 3.6+) on the election's parent: every
        // creation and deletion of a queue node arrives, in order, with no gap to re-arm
        // a one-shot watch in, so a tenure that lasts less than a re-list still shows
        // (a loaded machine made the one-shot child watch miss a 72 ms tenure). A
        // node's identity and token are read when it is created (a candidate queues
        // long before it leads); the head of the queue is the holder.
        Recorder::spawn(move |changes, stop, looked| async move {
            let prefix = format!("{dir}/");
            let seq = |name: &str| name[name.len().saturating_sub(10)..].to_owned();
            while !stop.load(Ordering::SeqCst) {
                let Ok(client) = zookeeper_client::Client::connector()
                    .with_session_timeout(Duration::from_secs(4))
                    .connect(&connect)
                    .await
                else {
                    // Pause: before the next try.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let Ok(mut watcher) = client.watch(&dir, AddWatchMode::PersistentRecursive).await
                else {
                    // Pause: before the next try.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let read = |name: String| {
                    let client = &client;
                    let path = format!("{dir}/{name}");
                    async move {
                        client
                            .get_data(&path)
                            .await
                            .ok()
                            .map(|(data, stat)| Tenure {
                                identity: String::from_utf8_lossy(&data).into_owned(),
                                token: u64::try_from(stat.czxid).unwrap_or(0),
                            })
                    }
                };
                // The queue as it stands (events from here on are already watched).
                let mut queue: BTreeMap<String, Option<Tenure>> = BTreeMap::new();
                if let Ok(children) = client.list_children(&dir).await {
                    for name in children.into_iter().filter(|c| c.len() >= 10) {
                        let tenure = read(name.clone()).await;
                        queue.insert(seq(&name), tenure);
                    }
                }
                looked.store(true, Ordering::SeqCst);
                loop {
                    note(&changes, queue.values().next().cloned().flatten());
                    let event = tokio::select! {
                        event = watcher.changed() => event,
                        _ = async {
                            while !stop.load(Ordering::SeqCst) {
                                // Pause: between looks at the stop flag.
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                        } => return,
                    };
                    let child = event
                        .path
                        .strip_prefix(&prefix)
                        .filter(|c| !c.contains('/') && c.len() >= 10)
                        .map(str::to_owned);
                    match (event.event_type, child) {
                        (EventType::NodeCreated, Some(name)) => {
                            let tenure = read(name.clone()).await;
                            queue.insert(seq(&name), tenure);
                        }
                        (EventType::NodeDeleted, Some(name)) => {
                            queue.remove(&seq(&name));
                        }
                        (EventType::NodeDeleted, None) if event.path == dir => queue.clear(),
                        // A session event: changes may be missed until the list
                        // after reconnecting; start again.
                        (EventType::Session, _) => {
                            note_blind(&changes);
                            break;
                        }
                        _ => {}
                    }
                }
                // Pause: before the next try.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    /// The Redis events channel (`acquired|…`, `released|…`, published by the scripts
    /// in the same step as the change) plus keyspace events for a deleted or expired
    /// lock (turned on here on the test's own server).
    pub fn redis(port: u16, election: &str) -> Recorder {
        let lock = format!("leasekeeper:{{{election}}}:lock");
        let events = format!("leasekeeper:{{{election}}}:events");
        Recorder::spawn(move |changes, stop, looked| async move {
            use futures_util::StreamExt;
            let url = format!("redis://127.0.0.1:{port}");
            while !stop.load(Ordering::SeqCst) {
                let subscribed = async {
                    let client = redis::Client::open(url.as_str())?;
                    let mut conn = client.get_multiplexed_async_connection().await?;
                    let _: () = redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("notify-keyspace-events")
                        .arg("Egx")
                        .query_async(&mut conn)
                        .await?;
                    let mut pubsub = client.get_async_pubsub().await?;
                    pubsub.subscribe(&events).await?;
                    pubsub.subscribe("__keyevent@0__:del").await?;
                    pubsub.subscribe("__keyevent@0__:expired").await?;
                    Ok::<_, redis::RedisError>(pubsub)
                };
                let Ok(mut pubsub) = subscribed.await else {
                    // Pause: before the next try.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                looked.store(true, Ordering::SeqCst);
                let mut messages = pubsub.on_message();
                loop {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let msg = tokio::time::timeout(Duration::from_millis(200), messages.next());
                    let msg = match msg.await {
                        Err(_) => continue,
                        Ok(Some(m)) => m,
                        Ok(None) => {
                            note_blind(&changes);
                            break;
                        }
                    };
                    let payload: String = msg.get_payload().unwrap_or_default();
                    if msg.get_channel_name() == events {
                        let mut parts = payload.splitn(4, '|');
                        let kind = parts.next().unwrap_or("");
                        let _nonce = parts.next();
                        let token = parts.next().and_then(|t| t.parse().ok());
                        let identity = parts.next().unwrap_or("").to_owned();
                        match (kind, token) {
                            ("acquired", Some(token)) => {
                                note(&changes, Some(Tenure { identity, token }))
                            }
                            ("released", _) => note(&changes, None),
                            _ => {}
                        }
                    } else if payload == lock {
                        note(&changes, None);
                    }
                }
                // Pause: before the next try.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    }

    /// A watch on one Lease through the API server (the fake one here), resumed from
    /// the last version seen, so no change is missed: the holder is `holderIdentity`
    /// with `leaseTransitions` as the token; an empty holder or a deleted Lease, none.
    pub fn kubernetes(kubeconfig: String, namespace: String, lease: String) -> Recorder {
        // The client is built with rustls (plain HTTP here, but it wants a provider).
        let _ = rustls::crypto::ring::default_provider().install_default();
        Recorder::spawn(move |changes, stop, looked| async move {
            use futures_util::StreamExt;
            use k8s_openapi::api::coordination::v1::Lease;
            use kube::api::{Api, ListParams, WatchEvent, WatchParams};
            let holder = |l: &Lease| {
                let spec = l.spec.as_ref()?;
                let identity = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
                let token = u64::try_from(spec.lease_transitions.unwrap_or(0)).unwrap_or(0);
                Some(Tenure { identity, token })
            };
            let fields = format!("metadata.name={lease}");
            let mut from: Option<String> = None;
            while !stop.load(Ordering::SeqCst) {
                let client = async {
                    let file = kube::config::Kubeconfig::read_from(&kubeconfig).ok()?;
                    let options = kube::config::KubeConfigOptions::default();
                    let config = kube::Config::from_custom_kubeconfig(file, &options)
                        .await
                        .ok()?;
                    kube::Client::try_from(config).ok()
                };
                let Some(client) = client.await else {
                    // Pause: before the next try.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let api: Api<Lease> = Api::namespaced(client, &namespace);
                if from.is_none() {
                    let Ok(list) = api.list(&ListParams::default().fields(&fields)).await else {
                        // Pause: before the next try.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    note(&changes, list.items.first().and_then(holder));
                    from = list.metadata.resource_version;
                }
                let version = from.clone().unwrap_or_else(|| "0".to_owned());
                let params = WatchParams::default().fields(&fields).timeout(30);
                let Ok(stream) = api.watch(&params, &version).await else {
                    // Pause: before the next try.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let mut stream = stream.boxed();
                looked.store(true, Ordering::SeqCst);
                loop {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let event =
                        tokio::time::timeout(Duration::from_millis(200), stream.next()).await;
                    let event = match event {
                        Err(_) => continue,
                        Ok(Some(Ok(event))) => event,
                        Ok(_) => break,
                    };
                    let (lease, gone) = match event {
                        WatchEvent::Added(l) | WatchEvent::Modified(l) => (l, false),
                        WatchEvent::Deleted(l) => (l, true),
                        WatchEvent::Bookmark(_) => continue,
                        WatchEvent::Error(_) => {
                            // Our version is gone: read the state again.
                            note_blind(&changes);
                            from = None;
                            break;
                        }
                    };
                    from = lease.metadata.resource_version.clone().or(from);
                    note(&changes, if gone { None } else { holder(&lease) });
                }
            }
        })
    }
}

/// Where a store that records itself (the fake Kubernetes API) notes its changes.
#[derive(Clone)]
pub struct RecordSink {
    changes: Changes,
}

impl RecordSink {
    /// Notes `holder` now, if it differs from the last one noted.
    pub fn note(&self, holder: Option<Tenure>) {
        note(&self.changes, holder);
    }
}

/// The holder of a SQL lease row: none when free or fenced (see `backend::sql`).
fn sql_holder(holder: String, tenure: String, token: i64) -> Option<Tenure> {
    (!tenure.is_empty() && tenure != "quarantine").then(|| Tenure {
        identity: holder,
        token: u64::try_from(token).unwrap_or(0),
    })
}

/// The lease table (as the backends create it) and a history of every change to it,
/// written by a trigger in the same transaction as the change, in the row's own order:
/// the recorder reads the history, so no tenure goes unseen however short (polling the
/// row itself missed a 1.7 ms tenure at teardown). Test-only: leasekeeper needs no
/// trigger.
const PG_HISTORY: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS leasekeeper_leases (
       election text PRIMARY KEY, holder text NOT NULL, tenure text NOT NULL,
       token bigint NOT NULL, acquired_at timestamptz NOT NULL,
       renewed_at timestamptz NOT NULL, expires_at timestamptz NOT NULL)",
    "CREATE TABLE IF NOT EXISTS lk_history (
       id bigserial PRIMARY KEY, election text, holder text, tenure text, token bigint)",
    "CREATE OR REPLACE FUNCTION lk_record() RETURNS trigger AS $$ BEGIN
       IF TG_OP = 'DELETE' THEN
         INSERT INTO lk_history (election, holder, tenure, token) VALUES (OLD.election, '', '', OLD.token);
         RETURN OLD;
       END IF;
       INSERT INTO lk_history (election, holder, tenure, token) VALUES (NEW.election, NEW.holder, NEW.tenure, NEW.token);
       RETURN NEW;
     END $$ LANGUAGE plpgsql",
    "CREATE OR REPLACE TRIGGER lk_record AFTER INSERT OR UPDATE OR DELETE ON leasekeeper_leases
       FOR EACH ROW EXECUTE FUNCTION lk_record()",
];

const MYSQL_HISTORY: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS leasekeeper_leases (
       election VARCHAR(253) NOT NULL PRIMARY KEY, holder VARCHAR(253) NOT NULL,
       tenure VARCHAR(64) NOT NULL, token BIGINT NOT NULL, acquired_at DATETIME(6) NOT NULL,
       renewed_at DATETIME(6) NOT NULL, expires_at DATETIME(6) NOT NULL
     ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    "CREATE TABLE IF NOT EXISTS lk_history (
       id BIGINT AUTO_INCREMENT PRIMARY KEY, election VARCHAR(253), holder VARCHAR(253),
       tenure VARCHAR(64), token BIGINT) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    "CREATE TRIGGER IF NOT EXISTS lk_ins AFTER INSERT ON leasekeeper_leases FOR EACH ROW
       INSERT INTO lk_history (election, holder, tenure, token) VALUES (NEW.election, NEW.holder, NEW.tenure, NEW.token)",
    "CREATE TRIGGER IF NOT EXISTS lk_upd AFTER UPDATE ON leasekeeper_leases FOR EACH ROW
       INSERT INTO lk_history (election, holder, tenure, token) VALUES (NEW.election, NEW.holder, NEW.tenure, NEW.token)",
    "CREATE TRIGGER IF NOT EXISTS lk_del AFTER DELETE ON leasekeeper_leases FOR EACH ROW
       INSERT INTO lk_history (election, holder, tenure, token) VALUES (OLD.election, '', '', OLD.token)",
];

/// Reads the history (see [`PG_HISTORY`]) every few milliseconds, resuming after the
/// last entry seen across reconnects.
macro_rules! sql_recorder {
    ($conn:ty, $url:expr, $setup:expr, $newest:expr, $select:expr) => {{
        let url: String = $url;
        let select: String = $select;
        Recorder::spawn(move |changes, stop, looked| async move {
            use sqlx::Connection;
            let mut last: i64 = 0;
            let mut ready = false;
            while !stop.load(Ordering::SeqCst) {
                let connected =
                    tokio::time::timeout(Duration::from_secs(1), <$conn>::connect(&url)).await;
                let Ok(Ok(mut conn)) = connected else {
                    // Pause: before the next try.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                if !ready {
                    for statement in $setup {
                        sqlx::raw_sql(statement)
                            .execute(&mut conn)
                            .await
                            .expect("the recorder's history table and trigger");
                    }
                    // Only what happens from now on (a soak starts one recorder per
                    // batch on the same table).
                    last = sqlx::query_scalar::<_, i64>(
                        "SELECT CAST(COALESCE(MAX(id), 0) AS SIGNED) FROM lk_history",
                    )
                    .fetch_one(&mut conn)
                    .await
                    .unwrap_or(0);
                    ready = true;
                }
                looked.store(true, Ordering::SeqCst);
                loop {
                    // Told to stop: one more read, so that what the last sidecars
                    // wrote before they exited is in (a tenure taken and handed back
                    // at the very end was missed).
                    let last_read = stop.load(Ordering::SeqCst);
                    let rows = tokio::time::timeout(
                        Duration::from_millis(500),
                        sqlx::query_as::<_, (i64, String, String, i64)>(&select)
                            .bind(last)
                            .fetch_all(&mut conn),
                    )
                    .await;
                    let Ok(Ok(rows)) = rows else { break };
                    for (id, holder, tenure, token) in rows {
                        last = id;
                        note(&changes, sql_holder(holder, tenure, token));
                    }
                    if last_read {
                        return;
                    }
                    // Pause: between reads of the history (every row is read; the pause only bounds
                    // how late a change is noted).
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            }
        })
    }};
}

impl Recorder {
    /// The PostgreSQL lease row of `election` in the default table, through its history.
    pub fn postgres(url: String, election: &str) -> Recorder {
        sql_recorder!(
            sqlx::PgConnection,
            url,
            PG_HISTORY,
            "SELECT COALESCE(MAX(id), 0)::bigint FROM lk_history",
            format!("SELECT id, holder, tenure, token FROM lk_history WHERE election = '{election}' AND id > $1 ORDER BY id")
        )
    }

    /// The MySQL/MariaDB lease row of `election` in the default table, through its history.
    pub fn mysql(url: String, election: &str) -> Recorder {
        sql_recorder!(
            sqlx::MySqlConnection,
            url,
            MYSQL_HISTORY,
            "SELECT CAST(COALESCE(MAX(id), 0) AS SIGNED) FROM lk_history",
            format!("SELECT id, holder, tenure, token FROM lk_history WHERE election = '{election}' AND id > ? ORDER BY id")
        )
    }
}

impl Recorder {
    /// A recorder fed by the store itself, in the same step as each write (exact, not
    /// on arrival): the fake Kubernetes API notes every write of the Lease.
    pub fn fed() -> (Recorder, RecordSink) {
        let changes: Changes = Arc::new(Mutex::new(Vec::new()));
        let sink = RecordSink {
            changes: changes.clone(),
        };
        let recorder = Recorder {
            changes,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        (recorder, sink)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn head(queue: &std::collections::BTreeMap<Vec<u8>, (i64, String)>) -> Option<Tenure> {
    queue
        .values()
        .min_by_key(|(rev, _)| *rev)
        .map(|(rev, value)| Tenure {
            identity: value.clone(),
            token: u64::try_from(*rev).unwrap_or(0),
        })
}

/// Records a holder when it differs from the last one recorded.
fn note(changes: &Changes, holder: Option<Tenure>) {
    let at_ns = monotonic_now_ns();
    let mut all = changes.lock().expect("changes");
    if all.last().is_none_or(|c| c.blind || c.holder != holder) {
        all.push(HolderChange {
            at_ns,
            holder,
            blind: false,
        });
    }
}

/// Marks where the recorder stops seeing the store (see [`HolderChange::blind`]).
fn note_blind(changes: &Changes) {
    let at_ns = monotonic_now_ns();
    changes.lock().expect("changes").push(HolderChange {
        at_ns,
        holder: None,
        blind: true,
    });
}

/// How long claims ran past the store moving the lease away from their tenure, in ns
/// (negative: the smallest margin left), for claims whose record was left alone and
/// for those whose record was tampered with; `None` without such moves.
#[derive(Clone, Copy, Debug, Default)]
pub struct PastStore {
    pub untampered: Option<i64>,
    pub tampered: Option<i64>,
    /// Claims whose tenure fell in a gap of the recorder's view (not judged).
    pub unjudged: usize,
}

/// Judges the sidecars' claims against the store's own record (see the module doc).
/// A claim whose span holds one of `tampered_at` (ns) may run on for `tolerance_ns`
/// past the next holder's arrival: a record changed behind the leader's back is
/// noticed as fast as the others learn of it, not before (DESIGN invariant 9).
///
/// Returns how long claims ran past the store moving the lease away ([`PastStore`]).
pub fn check_claims_against_store(
    claims: &[LoggedClaim],
    changes: &[HolderChange],
    tampered_at: &[u64],
    tolerance_ns: u64,
) -> PastStore {
    let mut longest = PastStore::default();
    for c in claims {
        let tampered = tampered_at.iter().any(|&t| c.start <= t && t <= c.until());
        let tenure = Tenure {
            identity: c.identity.clone(),
            token: c.token,
        };
        // A claim overlapping a gap in the recorder's view, whose tenure it never saw:
        // nothing to judge it by.
        let in_gap = changes.iter().enumerate().any(|(k, h)| {
            h.blind
                && h.at_ns <= c.until()
                && changes[k + 1..]
                    .iter()
                    .find(|n| !n.blind)
                    .is_none_or(|n| n.at_ns >= c.start)
        });
        let Some(i) = changes
            .iter()
            .position(|h| !h.blind && h.holder.as_ref() == Some(&tenure))
        else {
            if in_gap {
                longest.unjudged += 1;
                continue;
            }
            let near: Vec<&HolderChange> = changes
                .iter()
                .filter(|h| {
                    h.at_ns + 3_000_000_000 >= c.start && h.at_ns <= c.until() + 1_000_000_000
                })
                .collect();
            panic!(
                "seen against the store: {c:?} claimed a tenure the store never recorded; \
                 the store's changes around it: {near:?}"
            );
        };
        if let Some(away) = changes[i + 1..]
            .iter()
            .find(|h| !h.blind && h.holder.as_ref() != Some(&tenure))
        {
            let past = c.until() as i64 - away.at_ns as i64;
            let slot = if tampered {
                &mut longest.tampered
            } else {
                &mut longest.untampered
            };
            *slot = Some(slot.map_or(past, |l| l.max(past)));
        }
        let next_other = changes[i + 1..]
            .iter()
            .find(|h| h.holder.as_ref().is_some_and(|t| *t != tenure));
        if let Some(next) = next_other {
            let allowed = next.at_ns + if tampered { tolerance_ns } else { 0 };
            assert!(
                c.until() <= allowed,
                "seen against the store: {c:?} claimed until {} but the store gave the lease to {:?} at {} ({} µs later than allowed)",
                c.until(),
                next.holder,
                next.at_ns,
                (c.until() - allowed) / 1000
            );
        }
    }
    longest
}

#[cfg(test)]
mod self_test {
    use super::*;

    fn claim(identity: &str, token: u64, sent: u64, start: u64, until: u64) -> LoggedClaim {
        LoggedClaim {
            pid: 1,
            identity: identity.to_owned(),
            token,
            start,
            sent: Some(sent),
            deadline: until,
            end: None,
            slot: None,
        }
    }

    #[test]
    fn a_claim_inside_a_gap_of_the_recorder_is_not_judged_but_others_are() {
        let mut gap = change(30, None);
        gap.blind = true;
        let changes = vec![change(10, Some(("a", 1))), gap, change(80, Some(("c", 3)))];
        // "b" led while the recorder could not see: unjudged.
        check_claims_against_store(&[claim("b", 2, 35, 40, 60)], &changes, &[], 0);
        // "a" must still end by c's arrival, the gap notwithstanding.
        let late = std::panic::catch_unwind(|| {
            check_claims_against_store(&[claim("a", 1, 5, 12, 90)], &changes, &[], 0)
        });
        assert!(late.is_err(), "a claim past the next holder passed");
        // A claim outside the gap whose tenure was never seen still fails.
        let unseen = std::panic::catch_unwind(|| {
            check_claims_against_store(&[claim("d", 4, 85, 90, 95)], &changes, &[], 0)
        });
        assert!(unseen.is_err(), "a claim the store never granted passed");
    }

    fn change(at_ns: u64, holder: Option<(&str, u64)>) -> HolderChange {
        HolderChange {
            blind: false,
            at_ns,
            holder: holder.map(|(i, t)| Tenure {
                identity: i.to_owned(),
                token: t,
            }),
        }
    }

    #[test]
    fn claims_within_the_stores_tenures_pass() {
        let changes = [
            change(10, Some(("a", 1))),
            change(50, None),
            change(60, Some(("b", 2))),
        ];
        check_claims_against_store(
            &[claim("a", 1, 5, 12, 49), claim("b", 2, 55, 62, 90)],
            &changes,
            &[],
            0,
        );
    }

    #[test]
    #[should_panic(expected = "seen against the store")]
    fn a_claim_past_the_next_holders_arrival_fails() {
        let changes = [change(10, Some(("a", 1))), change(60, Some(("b", 2)))];
        check_claims_against_store(&[claim("a", 1, 5, 12, 70)], &changes, &[], 0);
    }

    #[test]
    #[should_panic(expected = "never recorded")]
    fn a_claim_the_store_never_granted_fails() {
        let changes = [change(10, Some(("a", 1)))];
        check_claims_against_store(&[claim("b", 7, 5, 12, 20)], &changes, &[], 0);
    }

    #[test]
    fn tampering_allows_the_tolerance_and_no_more() {
        let changes = [change(10, Some(("a", 1))), change(60, Some(("b", 2)))];
        check_claims_against_store(&[claim("a", 1, 5, 12, 80)], &changes, &[55], 30);
        let late = std::panic::catch_unwind(|| {
            check_claims_against_store(&[claim("a", 1, 5, 12, 95)], &changes, &[55], 30)
        });
        assert!(late.is_err(), "35 past the tolerance must fail");
    }
}
