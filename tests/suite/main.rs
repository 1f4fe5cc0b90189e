//! The integration tests, in one binary: a module per suite (`cli`, `modes`,
//! `redis_backend`, …), each test named `<suite>::<test>`, and the test servers,
//! harness, scenarios and checks of `tests/common`, compiled once. `make test` runs
//! every test in a process of its own (cargo-nextest); one suite alone:
//! `cargo nextest run -E 'test(/^modes::/)'`.

#[path = "../common/mod.rs"]
mod common;

mod checker_self_test;
mod cli;
mod container;
mod elector_sim;
mod etcd_backend;
mod exec_containment;
mod exec_mode;
mod faults;
mod file_backend;
mod hooks_and_drain;
mod hostile_clients;
mod inject;
mod kube_node;
mod kubernetes_backend;
mod kubernetes_candidate;
mod kubernetes_coordinated;
mod modes;
mod mysql_backend;
mod pid_one;
mod postgres_backend;
mod prometheus;
mod queue_scripts;
mod redis_backend;
mod redlock_backend;
mod slots;
mod soak;
mod zk_partition;
mod zookeeper_backend;
