//! leasekeeper: a leader-election sidecar.
//!
//! Data flows one way (DESIGN §1): a [`backend::Backend`] feeds the
//! [`elector::Elector`], which publishes one [`status::Status`] through a
//! `tokio::sync::watch`; the publishers in [`publish`] only read it.

// A build with only some of the stores (cargo features, Cargo.toml) leaves functions that
// only the missing ones use; the full build keeps every lint.
#![cfg_attr(
    not(all(
        feature = "file",
        feature = "redis",
        feature = "etcd",
        feature = "zookeeper",
        feature = "kubernetes",
        feature = "sql"
    )),
    allow(dead_code, unused_imports, unused_variables, unreachable_patterns)
)]

#[cfg(not(any(
    feature = "file",
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper",
    feature = "kubernetes",
    feature = "sql"
)))]
compile_error!("leasekeeper needs at least one backend feature: file, redis, etcd, zookeeper, kubernetes or sql");

// Floors, bottom up (DESIGN §1): nothing imports from a floor above its own.
// 1. leaves: settings parsing, timing, clock, status, back-off, test sabotage, the
//    Kubernetes API client, the minimal init;
pub mod backoff;
pub mod clock;
pub mod init;
pub mod kube_api;
pub mod sabotage;
pub mod settings;
pub mod status;
pub mod timing;
// 2. the stores;
pub mod backend;
// 3. the one writer of `Status`;
pub mod elector;
// 4. its readers;
pub mod publish;
// 5. flags, environment and file merged into `Settings`;
pub mod config;
// 6. the injector's decisions (it checks a Pod's settings with `config`);
#[cfg(feature = "kubernetes")]
pub mod inject;
// 7. the subcommands (`main.rs` only dispatches to them).
pub mod cmd;
