//! The SQL peers, run as this bench binary itself (`LK_SQL_PEER=postgres|mysql`): the
//! seed's way done well, a loop every 100 ms. PostgreSQL: `pg_try_advisory_lock` on the
//! peer's own session; MySQL/MariaDB: `SELECT … FOR UPDATE NOWAIT` on a lock row in an
//! open transaction. Prints `leader <CLOCK_MONOTONIC ns>` once it holds the lock, holds
//! it until SIGTERM, then gives it back and exits.

use std::time::Duration;

use leasekeeper::clock::monotonic_now_ns;
use sqlx::Connection;
use tokio::signal::unix::{signal, Signal, SignalKind};

const EVERY: Duration = Duration::from_millis(100);

/// Runs the peer of `kind` against `LK_SQL_PEER_URL`.
pub fn run(kind: &str) {
    let url = std::env::var("LK_SQL_PEER_URL").expect("LK_SQL_PEER_URL");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        if kind == "postgres" {
            postgres_peer(&url, term).await
        } else {
            mysql_peer(&url, term).await
        }
    });
}

fn print_leader() {
    println!("leader {}", monotonic_now_ns());
}

/// Sleeps until the next try; false when SIGTERM came first.
async fn wait_for_next_try(term: &mut Signal) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(EVERY) => true,
        _ = term.recv() => false,
    }
}

async fn postgres_peer(url: &str, mut term: Signal) {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    loop {
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext('bench-peer'))")
            .fetch_one(&mut conn)
            .await
            .expect("try lock");
        if got {
            print_leader();
            term.recv().await;
            let _ = sqlx::query("SELECT pg_advisory_unlock(hashtext('bench-peer'))")
                .execute(&mut conn)
                .await;
            return;
        }
        if !wait_for_next_try(&mut term).await {
            return;
        }
    }
}

async fn mysql_peer(url: &str, mut term: Signal) {
    let mut conn = sqlx::MySqlConnection::connect(url).await.expect("connect");
    loop {
        sqlx::query("BEGIN")
            .execute(&mut conn)
            .await
            .expect("begin");
        let got =
            sqlx::query("SELECT name FROM peer_lock WHERE name = 'bench-peer' FOR UPDATE NOWAIT")
                .fetch_optional(&mut conn)
                .await;
        if matches!(got, Ok(Some(_))) {
            print_leader();
            term.recv().await;
            let _ = sqlx::query("COMMIT").execute(&mut conn).await;
            return;
        }
        sqlx::query("ROLLBACK")
            .execute(&mut conn)
            .await
            .expect("rollback");
        if !wait_for_next_try(&mut term).await {
            return;
        }
    }
}
