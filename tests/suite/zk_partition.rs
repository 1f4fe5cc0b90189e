//! A ZooKeeper ensemble partitioned through the fault proxies
//! (`ZkEnsemble::start_partitionable`): one server cut off from the other two while its
//! clients stay connected to it.

use crate::common;

use std::time::{Duration, Instant};

use common::eventually;
use common::servers::zk_server::ZkEnsemble;
use zookeeper_client as zk;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn connect(rt: &tokio::runtime::Runtime, connect: &str) -> zk::Client {
    rt.block_on(
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .with_connection_timeout(Duration::from_secs(2))
            .connect(connect),
    )
    .unwrap_or_else(|e| panic!("connect {connect}: {e}"))
}

fn create(rt: &tokio::runtime::Runtime, c: &zk::Client, path: &str) -> Result<(), String> {
    let c = c.clone();
    let path = path.to_owned();
    rt.block_on(async move {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match tokio::time::timeout(Duration::from_secs(3), c.create(&path, b"v", &options)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("timed out".to_owned()),
        }
    })
}

/// A read answered within `limit`.
fn read(rt: &tokio::runtime::Runtime, c: &zk::Client, path: &str, limit: Duration) -> bool {
    rt.block_on(async { tokio::time::timeout(limit, c.get_data(path)).await })
        .is_ok_and(|r| r.is_ok())
}

fn leader_of(zk: &ZkEnsemble, among: &[usize]) -> Option<usize> {
    among
        .iter()
        .copied()
        .find(|&i| zk.server_mode(i).as_deref() == Some("leader"))
}

#[test]
fn an_isolated_follower_stops_serving_while_the_others_keep_a_leader_then_rejoins() {
    let zk = ZkEnsemble::start_partitionable(3);
    let all = [0, 1, 2];
    let leader = eventually(Duration::from_secs(10), || leader_of(&zk, &all)).expect("a leader");
    let f = (0..3).find(|&i| i != leader).unwrap();
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != f).collect();
    assert_eq!(zk.server_mode(f).as_deref(), Some("follower"));
    assert!(
        zk.peer_connections(f, leader) >= 2,
        "the follower's quorum and election links to the leader do not go through the proxies: {:?}",
        (0..3).map(|a| (0..3).map(|b| zk.peer_connections(a, b)).collect::<Vec<_>>()).collect::<Vec<_>>()
    );

    assert_eq!(zk.bypassing_connections(), Vec::<String>::new());

    let rt = runtime();
    // Two sessions on the follower alone: one only reads, one also writes (a session's
    // reads wait behind its own pending write, so its reads stop at the cut).
    let client = connect(&rt, &zk.connect_string_for(f));
    let writer = connect(&rt, &zk.connect_string_for(f));
    create(&rt, &writer, "/before").expect("a write through the follower");
    assert!(read(&rt, &client, "/before", Duration::from_secs(2)));

    // Cut it off; poll reads through it and its `isro` until it stops serving.
    let cut = Instant::now();
    zk.isolate(f);
    let pending_write = {
        let c = writer.clone();
        rt.spawn(async move {
            let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            c.create("/during-cut", b"v", &options).await.map(|_| ())
        })
    };
    let mut last_read = None;
    let mut first_failed_read = None;
    let mut not_rw = None;
    let mut writer_blocked = None;
    while cut.elapsed() < Duration::from_secs(10) {
        let at = cut.elapsed();
        if read(&rt, &client, "/before", Duration::from_millis(300)) {
            last_read = Some(at);
        } else if first_failed_read.is_none() {
            first_failed_read = Some(at);
        }
        if writer_blocked.is_none() && !read(&rt, &writer, "/before", Duration::from_millis(100)) {
            writer_blocked = Some(at);
        }
        if not_rw.is_none() && zk.isro(f).as_deref() != Some("rw") {
            not_rw = Some(cut.elapsed());
        }
        if not_rw.is_some() && first_failed_read.is_some_and(|t| at > t + Duration::from_secs(1)) {
            break;
        }
        // Pause: between looks at the cut-off server.
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "isolated follower {f}: last read served {last_read:?} after the cut, first failed read {first_failed_read:?}, isro not rw at {not_rw:?}; the writing session's first read failed at {writer_blocked:?}"
    );
    let first_failed_read = first_failed_read.expect("the isolated follower kept serving reads");
    let not_rw = not_rw.expect("the isolated follower kept answering isro rw");
    assert!(last_read.is_some(), "no read was served after the cut");
    assert!(
        last_read.unwrap() < first_failed_read,
        "a read was served after one had failed"
    );
    assert!(
        first_failed_read < Duration::from_secs(5) && not_rw < Duration::from_secs(5),
        "took too long to stop serving"
    );
    assert_eq!(zk.server_mode(f), None, "{:?}", zk.isro(f));

    // The write sent through it after the cut failed (it never reached the leader).
    let write = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), pending_write).await })
        .expect("the write through the isolated follower neither failed nor succeeded")
        .unwrap();
    assert!(
        write.is_err(),
        "a write through the isolated follower succeeded"
    );

    // The other two still have a leader and take writes.
    let majority = rest
        .iter()
        .map(|&i| zk.connect_string_for(i))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(leader_of(&zk, &rest), Some(leader));
    let other = connect(&rt, &majority);
    create(&rt, &other, "/during-partition").expect("a write on the majority side");
    // Still cut off a while later.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(zk.server_mode(f), None);
    assert!(!read(&rt, &client, "/before", Duration::from_millis(300)));

    // Heal: it rejoins as a follower and has the write made without it.
    let healed = Instant::now();
    zk.heal(f);
    let mode = eventually(Duration::from_secs(20), || {
        zk.server_mode(f)
            .filter(|_| zk.isro(f).as_deref() == Some("rw"))
    })
    .expect("the healed server never served again");
    eprintln!(
        "healed follower {f} serving as {mode} after {:?}",
        healed.elapsed()
    );
    assert_eq!(mode, "follower");
    assert_eq!(leader_of(&zk, &all), Some(leader));
    assert_eq!(zk.bypassing_connections(), Vec::<String>::new());
    let again = connect(&rt, &zk.connect_string_for(f));
    assert!(read(
        &rt,
        &again,
        "/during-partition",
        Duration::from_secs(2)
    ));
    assert!(
        rt.block_on(again.check_stat("/during-cut"))
            .unwrap()
            .is_none(),
        "the write sent to the isolated follower was applied after all"
    );
}

#[test]
fn an_isolated_leader_steps_down_and_the_other_two_elect_a_new_one() {
    let zk = ZkEnsemble::start_partitionable(3);
    let all = [0, 1, 2];
    let old = eventually(Duration::from_secs(10), || leader_of(&zk, &all)).expect("a leader");
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != old).collect();
    let rt = runtime();
    let client = connect(&rt, &zk.connect_string_for(old));
    create(&rt, &client, "/before").expect("a write on the leader");

    let cut = Instant::now();
    zk.isolate(old);
    let mut last_read = None;
    let mut old_stopped = None;
    let mut new_leader = None;
    while cut.elapsed() < Duration::from_secs(15) {
        let at = cut.elapsed();
        if read(&rt, &client, "/before", Duration::from_millis(200)) {
            last_read = Some(at);
        } else if old_stopped.is_none() {
            old_stopped = Some(at);
        }
        if new_leader.is_none() {
            new_leader = leader_of(&zk, &rest).map(|i| (i, cut.elapsed()));
        }
        if new_leader.is_some() && old_stopped.is_some_and(|t| at > t + Duration::from_millis(500))
        {
            break;
        }
        // Pause: between looks at the servers.
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "isolated leader {old}: last read served {last_read:?} after the cut, first failed read {old_stopped:?}; new leader {new_leader:?}"
    );
    let (new, elected) = new_leader.expect("the other two never elected a leader");
    assert_ne!(new, old);
    assert!(
        elected < Duration::from_secs(10),
        "election took {elected:?}"
    );
    assert!(old_stopped.is_some(), "the isolated leader kept serving");
    assert_eq!(zk.server_mode(old), None, "{:?}", zk.isro(old));
    let majority = rest
        .iter()
        .map(|&i| zk.connect_string_for(i))
        .collect::<Vec<_>>()
        .join(",");
    let other = connect(&rt, &majority);
    create(&rt, &other, "/after").expect("a write on the new leader's side");

    zk.heal(old);
    let mode = eventually(Duration::from_secs(20), || {
        zk.server_mode(old)
            .filter(|_| zk.isro(old).as_deref() == Some("rw"))
    })
    .expect("the old leader never served again");
    assert_eq!(mode, "follower");
    assert_eq!(leader_of(&zk, &all), Some(new));
    let again = connect(&rt, &zk.connect_string_for(old));
    assert!(read(&rt, &again, "/after", Duration::from_secs(2)));
}

#[test]
fn without_the_proxies_servers_connect_directly() {
    // The check used above sees direct links when there are some.
    let zk = ZkEnsemble::start(3);
    let direct = eventually(Duration::from_secs(10), || {
        Some(zk.bypassing_connections()).filter(|d| d.len() >= 2)
    });
    assert!(direct.is_some(), "{:?}", zk.bypassing_connections());
}
