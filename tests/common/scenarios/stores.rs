//! The stores as data: a case written once over a [`Store`] runs on every store of
//! its row in a table ([`store_matrix!`]), one test per store, named
//! `<case>::<store>`.

use std::net::SocketAddr;

use super::sql_suite::SqlDb;
use crate::common::checks::checker::{RedisCluster, ServerControl};
use crate::common::servers::etcd_server::EtcdCluster;
use crate::common::servers::mariadb_server::MariaServer;
use crate::common::servers::pg_server::PgServer;
use crate::common::servers::redis_server::RedisServer;
use crate::common::servers::zk_server::{SharedZk, ZkEnsemble};
use crate::common::SidecarArgs;

/// A store a sidecar can hold its lease in, as a test starts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    File,
    Etcd,
    Zookeeper,
    Postgres,
    Mysql,
    Redis,
    Redlock,
}

/// A store started for one test: the sidecar's flags for it and its server, kept
/// (and stopped at the end) with this value.
pub struct OnStore {
    args: SidecarArgs,
    server: Served,
}

enum Served {
    Dir(tempfile::TempDir),
    Etcd(EtcdCluster),
    SharedZk(SharedZk),
    Zk(ZkEnsemble),
    Pg(PgServer),
    Maria(MariaServer),
    Redis(RedisServer),
    Redlock(RedisCluster),
}

impl Store {
    /// A store the test neither stops nor reads server-wide: the run's shared server
    /// where there is one (ZooKeeper, PostgreSQL, MariaDB), a fresh one elsewhere.
    pub fn shared(self) -> OnStore {
        match self {
            Store::Zookeeper => Served::SharedZk(ZkEnsemble::shared()).into(),
            Store::Postgres => Served::Pg(PgServer::shared()).into(),
            Store::Mysql => Served::Maria(MariaServer::shared()).into(),
            Store::Redis => Served::Redis(RedisServer::start()).into(),
            _ => self.own(),
        }
    }

    /// A store of the test's own whose leases may last 30 s: ZooKeeper grants sessions
    /// that long (the others cap them at 4 s); elsewhere as [`Store::own`].
    pub fn long_lived(self) -> OnStore {
        match self {
            Store::Zookeeper => Served::Zk(ZkEnsemble::start_long_sessions()).into(),
            _ => self.own(),
        }
    }

    /// A store of the test's own, for faults ([`OnStore::control`]): one etcd member,
    /// one ZooKeeper server, a Redis server that keeps its data across a kill -9, three
    /// Redlock nodes.
    pub fn own(self) -> OnStore {
        match self {
            Store::File => Served::Dir(tempfile::tempdir().expect("dir")).into(),
            Store::Etcd => Served::Etcd(EtcdCluster::start(1)).into(),
            Store::Zookeeper => Served::Zk(ZkEnsemble::start(1)).into(),
            Store::Postgres => Served::Pg(PgServer::start()).into(),
            Store::Mysql => Served::Maria(MariaServer::start()).into(),
            Store::Redis => Served::Redis(RedisServer::start_persistent()).into(),
            Store::Redlock => Served::Redlock(RedisCluster::start(3)).into(),
        }
    }
}

impl From<Served> for OnStore {
    fn from(server: Served) -> OnStore {
        let args = match &server {
            Served::Dir(dir) => SidecarArgs::file(dir.path()),
            Served::Etcd(etcd) => SidecarArgs::etcd(&etcd.endpoints()),
            Served::SharedZk(zk) => SidecarArgs::zookeeper(&zk.connect_string()),
            Served::Zk(zk) => SidecarArgs::zookeeper(&zk.connect_string()),
            Served::Pg(db) => SidecarArgs::postgres(&db.url()),
            Served::Maria(db) => SidecarArgs::mysql(&db.url()),
            Served::Redis(server) => SidecarArgs::redis(&server.url()),
            Served::Redlock(cluster) => SidecarArgs::redlock(&cluster.urls()),
        };
        OnStore { args, server }
    }
}

impl OnStore {
    /// The sidecar's backend flags for this store (then `.ttl(…).election(…)`).
    pub fn args(&self) -> SidecarArgs {
        self.args.clone()
    }

    /// The store's faults: pause, restart, its nodes'. Only a store of the test's own
    /// ([`Store::own`]) that runs as a server.
    pub fn control(&mut self) -> &mut dyn ServerControl {
        match &mut self.server {
            Served::Etcd(s) => s,
            Served::Zk(s) => s,
            Served::Pg(s) => s,
            Served::Maria(s) => s,
            Served::Redis(s) => s,
            Served::Redlock(s) => s,
            Served::Dir(_) | Served::SharedZk(_) => {
                panic!("a shared server or a file has no faults of the test's own")
            }
        }
    }

    /// The SQL server, for its statements and logs.
    pub fn sql(&self) -> &dyn SqlDb {
        match &self.server {
            Served::Pg(db) => db,
            Served::Maria(db) => db,
            _ => panic!("not a SQL store"),
        }
    }

    /// The MariaDB server, when the store is MySQL.
    pub fn mariadb(&self) -> Option<&MariaServer> {
        match &self.server {
            Served::Maria(db) => Some(db),
            _ => None,
        }
    }

    /// The store's listening addresses on loopback, one per node: what a cut or
    /// slowed link stands in front of.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        match &self.server {
            Served::Etcd(etcd) => addresses(&etcd.endpoints()),
            Served::Zk(zk) => addresses(&zk.connect_string()),
            Served::Pg(db) => vec![local(db.port)],
            Served::Maria(db) => vec![local(db.port)],
            Served::Redis(server) => vec![local(server.port)],
            Served::Redlock(cluster) => cluster.nodes.iter().map(|n| local(n.port)).collect(),
            Served::Dir(_) | Served::SharedZk(_) => panic!("no addresses of the test's own"),
        }
    }
}

/// `127.0.0.1:<port>`.
pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The `<ip>:<port>` addresses in a list of endpoints (`http://…`, `host:port`).
pub fn addresses(endpoints: &str) -> Vec<SocketAddr> {
    endpoints
        .split(',')
        .map(|e| e.trim_start_matches("http://"))
        .map(|e| e.parse().expect("<ip>:<port>"))
        .collect()
}

/// A table of cases × stores: each case is a function of the [`Store`] (its
/// parameter named in the row), and runs as one test per store in the row's list,
/// `<case>::<store>`.
///
/// ```ignore
/// store_matrix! {
///     /// Doc of the case.
///     fn slots(store) on [file, etcd, redis] {
///         let on = store.shared();
///         run(on.args().ttl("2s"));
///     }
/// }
/// ```
#[allow(unused_macros)]
macro_rules! store_matrix {
    (@store file) => { $crate::common::scenarios::stores::Store::File };
    (@store etcd) => { $crate::common::scenarios::stores::Store::Etcd };
    (@store zookeeper) => { $crate::common::scenarios::stores::Store::Zookeeper };
    (@store postgres) => { $crate::common::scenarios::stores::Store::Postgres };
    (@store mysql) => { $crate::common::scenarios::stores::Store::Mysql };
    (@store redis) => { $crate::common::scenarios::stores::Store::Redis };
    (@store redlock) => { $crate::common::scenarios::stores::Store::Redlock };
    (
        $(#[$doc:meta])*
        fn $case:ident($store:ident) on [$($on:ident),+ $(,)?] $body:block
        $($rest:tt)*
    ) => {
        $(#[$doc])*
        mod $case {
            #[allow(unused_imports)]
            use super::*;

            fn case($store: $crate::common::scenarios::stores::Store) $body

            $(
                #[test]
                fn $on() {
                    case($crate::common::scenarios::stores::store_matrix!(@store $on))
                }
            )+
        }

        $crate::common::scenarios::stores::store_matrix! { $($rest)* }
    };
    () => {};
}

#[allow(unused_imports)]
pub(crate) use store_matrix;
