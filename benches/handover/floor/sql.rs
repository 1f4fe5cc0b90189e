//! PostgreSQL and MySQL at the floor, on a lease row as the SQL backends keep it
//! (`election`, `holder`, `tenure`, `token`, `expires_at`; the floor's own table): the
//! holder's release, one `UPDATE` of its tenure's row, the waiting candidate's wake
//! (PostgreSQL: the release's `pg_notify`, heard on a `LISTEN` connection; MySQL: the
//! named lock the holder lets go of, which the waiting candidate's `GET_LOCK` gets),
//! and its take, one conditional `UPDATE` that hands out the next token and answers
//! it. Shared and exclusive: the last shared holder deletes its row of the shared
//! holders' table and frees the lease row (PostgreSQL: with the `pg_notify`; MySQL:
//! then lets its own named lock go, which the exclusive candidate waits for); the
//! exclusive candidate takes as above.

use std::time::Instant;

use anyhow::{bail, Context};
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::{PgConnection, PgListener};
use sqlx::Connection;

use super::{between, block_on, Round, SETTLE};

const CHANNEL: &str = "leasekeeper_floor";

/// `rounds` handovers between two PostgreSQL clients of the database at `url`. The
/// waiting client wakes when its `LISTEN` connection hands it the release's
/// notification.
pub fn postgres(url: &str, rounds: usize) -> anyhow::Result<Vec<Round>> {
    block_on(async {
        pg_tables(url).await?;
        let mut a = Pg::connect(url, "floor-a").await?;
        let mut b = Pg::connect(url, "floor-b").await?;
        a.take().await?;
        let mut took = Vec::new();
        for round in 0..rounds {
            let (holder, waiter) = match round % 2 {
                0 => (&mut a, &mut b),
                _ => (&mut b, &mut a),
            };
            let released = holder.tenure.clone();
            let mut next = waiter.take_over();
            let wait = tokio::spawn(async move {
                next.woken_by(&released).await?;
                let woke = Instant::now();
                next.take().await?;
                anyhow::Ok((next, woke, Instant::now()))
            });
            tokio::time::sleep(SETTLE).await;
            let t0 = Instant::now();
            holder.release().await?;
            let answered = Instant::now();
            let (next, woke, t1) = wait.await??;
            *waiter = next;
            took.push(Round::new(t0, answered, woke, t1));
        }
        Ok(took)
    })
}

/// The floor's tables: the lease row's and the shared holders'.
async fn pg_tables(url: &str) -> anyhow::Result<()> {
    let mut setup = PgConnection::connect(url).await?;
    for statement in [
        "CREATE TABLE IF NOT EXISTS leasekeeper_floor (election text PRIMARY KEY, holder text NOT NULL, tenure text NOT NULL, token bigint NOT NULL, expires_at timestamptz NOT NULL)",
        "INSERT INTO leasekeeper_floor VALUES ('floor', '', '', 0, now()) ON CONFLICT DO NOTHING",
        // A series before this one ends holding.
        "UPDATE leasekeeper_floor SET holder = '', tenure = '', expires_at = now() WHERE election = 'floor'",
        "CREATE TABLE IF NOT EXISTS leasekeeper_floor_shared (election text NOT NULL, tenure text NOT NULL, kind text NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (election, tenure))",
    ] {
        sqlx::query(statement).execute(&mut setup).await?;
    }
    Ok(())
}

/// `rounds` times on the PostgreSQL database at `url`: a shared holder holds, an
/// exclusive candidate listens; the shared holder's release → the exclusive take, ms.
pub fn postgres_exclusive_after_shared(url: &str, rounds: usize) -> anyhow::Result<Vec<f64>> {
    block_on(async {
        pg_tables(url).await?;
        let mut reader = Pg::connect(url, "floor-reader").await?;
        let mut writer = Pg::connect(url, "floor-writer").await?;
        let mut took = Vec::new();
        for _ in 0..rounds {
            reader.take_shared().await?;
            let released = reader.tenure.clone();
            let mut next = writer.take_over();
            let wait = tokio::spawn(async move {
                next.woken_by(&released).await?;
                next.take().await?;
                anyhow::Ok((next, Instant::now()))
            });
            tokio::time::sleep(SETTLE).await;
            let t0 = Instant::now();
            reader.release_shared().await?;
            let (next, t1) = wait.await??;
            writer = next;
            took.push(between(t0, t1));
            writer.release().await?;
        }
        Ok(took)
    })
}

/// A PostgreSQL candidate: its statement connection and its listener.
struct Pg {
    statements: Option<PgConnection>,
    listener: Option<PgListener>,
    identity: &'static str,
    tenure: String,
}

impl Pg {
    async fn connect(url: &str, identity: &'static str) -> anyhow::Result<Pg> {
        let mut listener = PgListener::connect(url).await?;
        listener.listen(CHANNEL).await?;
        Ok(Pg {
            statements: Some(PgConnection::connect(url).await?),
            listener: Some(listener),
            identity,
            tenure: String::new(),
        })
    }

    /// This candidate's connections, moved out for a task (handed back with it).
    fn take_over(&mut self) -> Pg {
        Pg {
            statements: self.statements.take(),
            listener: self.listener.take(),
            identity: self.identity,
            tenure: std::mem::take(&mut self.tenure),
        }
    }

    fn statements(&mut self) -> anyhow::Result<&mut PgConnection> {
        self.statements.as_mut().context("no statement connection")
    }

    /// Waits for the notification of the release of `tenure`.
    async fn woken_by(&mut self, tenure: &str) -> anyhow::Result<()> {
        let listener = self.listener.as_mut().context("no listener")?;
        loop {
            if listener.recv().await?.payload() == tenure {
                return Ok(());
            }
        }
    }

    async fn release(&mut self) -> anyhow::Result<()> {
        let tenure = self.tenure.clone();
        let told: Option<String> = sqlx::query_scalar(
            "WITH freed AS (UPDATE leasekeeper_floor SET holder = '', tenure = '', expires_at = now() WHERE election = 'floor' AND tenure = $1 RETURNING election) SELECT pg_notify($2, $1)::text FROM freed",
        )
        .bind(&tenure)
        .bind(CHANNEL)
        .fetch_optional(self.statements()?)
        .await?;
        told.context("the release found the row not ours")?;
        Ok(())
    }

    /// Joins the shared holders: the lease row shared (its token bumped), our row.
    async fn take_shared(&mut self) -> anyhow::Result<()> {
        let tenure = format!(
            "{}-{}",
            self.identity,
            leasekeeper::clock::monotonic_now_ns()
        );
        let joined: Option<i32> = sqlx::query_scalar(
            "WITH taken AS (UPDATE leasekeeper_floor SET holder = $1, tenure = 'shared', token = token + 1, expires_at = now() + interval '15 seconds' WHERE election = 'floor' AND (expires_at <= now() OR tenure = 'shared') RETURNING token) INSERT INTO leasekeeper_floor_shared SELECT 'floor', $2, 'r', now() + interval '15 seconds' FROM taken RETURNING 1",
        )
        .bind(self.identity)
        .bind(&tenure)
        .fetch_optional(self.statements()?)
        .await?;
        joined.context("the shared take found the row held")?;
        self.tenure = tenure;
        Ok(())
    }

    /// The last shared holder leaves: its row deleted, then the lease row freed with
    /// the notification (payload: its tenure).
    async fn release_shared(&mut self) -> anyhow::Result<()> {
        let tenure = self.tenure.clone();
        sqlx::query(
            "DELETE FROM leasekeeper_floor_shared WHERE election = 'floor' AND tenure = $1",
        )
        .bind(&tenure)
        .execute(self.statements()?)
        .await?;
        let told: Option<String> = sqlx::query_scalar(
            "WITH freed AS (UPDATE leasekeeper_floor SET holder = '', tenure = '', expires_at = now() WHERE election = 'floor' AND tenure = 'shared' AND NOT EXISTS (SELECT 1 FROM leasekeeper_floor_shared WHERE election = 'floor' AND kind = 'r' AND expires_at > now()) RETURNING election) SELECT pg_notify($2, $1)::text FROM freed",
        )
        .bind(&tenure)
        .bind(CHANNEL)
        .fetch_optional(self.statements()?)
        .await?;
        told.context("the shared release left the row held")?;
        Ok(())
    }

    async fn take(&mut self) -> anyhow::Result<()> {
        let tenure = format!(
            "{}-{}",
            self.identity,
            leasekeeper::clock::monotonic_now_ns()
        );
        let taken: Option<(i64, Option<String>)> = sqlx::query_as(
            "WITH taken AS (UPDATE leasekeeper_floor SET holder = $1, tenure = $2, token = token + 1, expires_at = now() + interval '15 seconds' WHERE election = 'floor' AND expires_at <= now() RETURNING token) SELECT token, pg_notify($3, 'taken')::text FROM taken",
        )
        .bind(self.identity)
        .bind(&tenure)
        .bind(CHANNEL)
        .fetch_optional(self.statements()?)
        .await?;
        let (token, _) = taken.context("the take found the row held")?;
        if token < 1 {
            bail!("no fencing token");
        }
        self.tenure = tenure;
        Ok(())
    }
}

/// `rounds` handovers between two MySQL clients of the database at `url`. The waiting
/// client wakes when its `GET_LOCK` of the named lock the holder lets go of answers.
pub fn mysql(url: &str, rounds: usize) -> anyhow::Result<Vec<Round>> {
    block_on(async {
        my_tables(url).await?;
        let mut a = My::connect(url, "floor-a").await?;
        let mut b = My::connect(url, "floor-b").await?;
        a.signal().await?;
        a.take().await?;
        let mut took = Vec::new();
        for round in 0..rounds {
            let (holder, waiter) = match round % 2 {
                0 => (&mut a, &mut b),
                _ => (&mut b, &mut a),
            };
            let mut next = waiter.take_over();
            let wait = tokio::spawn(async move {
                next.signal().await?;
                let woke = Instant::now();
                next.take().await?;
                anyhow::Ok((next, woke, Instant::now()))
            });
            tokio::time::sleep(SETTLE).await;
            let t0 = Instant::now();
            holder.release().await?;
            let answered = Instant::now();
            let (next, woke, t1) = wait.await??;
            *waiter = next;
            took.push(Round::new(t0, answered, woke, t1));
        }
        Ok(took)
    })
}

async fn my_tables(url: &str) -> anyhow::Result<()> {
    let mut setup = MySqlConnection::connect(url).await?;
    for statement in [
        "CREATE TABLE IF NOT EXISTS leasekeeper_floor (election VARCHAR(64) PRIMARY KEY, holder VARCHAR(255) NOT NULL, tenure VARCHAR(64) NOT NULL, token BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL)",
        "INSERT IGNORE INTO leasekeeper_floor VALUES ('floor', '', '', 0, UTC_TIMESTAMP(6))",
        // A series before this one ends holding.
        "UPDATE leasekeeper_floor SET holder = '', tenure = '', expires_at = UTC_TIMESTAMP(6) WHERE election = 'floor'",
        "CREATE TABLE IF NOT EXISTS leasekeeper_floor_shared (election VARCHAR(64) NOT NULL, tenure VARCHAR(64) NOT NULL, kind CHAR(1) NOT NULL, expires_at DATETIME(6) NOT NULL, PRIMARY KEY (election, tenure))",
    ] {
        sqlx::query(statement).execute(&mut setup).await?;
    }
    Ok(())
}

/// `rounds` times on the MySQL database at `url`: a shared holder holds (and its named
/// lock), an exclusive candidate waits for that lock; the shared holder's release →
/// the exclusive take, ms.
pub fn mysql_exclusive_after_shared(url: &str, rounds: usize) -> anyhow::Result<Vec<f64>> {
    block_on(async {
        my_tables(url).await?;
        let mut reader = My::connect(url, "floor-reader").await?;
        let mut writer = My::connect(url, "floor-writer").await?;
        let mut took = Vec::new();
        for _ in 0..rounds {
            reader.take_shared().await?;
            let mut next = writer.take_over();
            let wait = tokio::spawn(async move {
                next.signal_on(READERS_SIGNAL).await?;
                next.take().await?;
                anyhow::Ok((next, Instant::now()))
            });
            tokio::time::sleep(SETTLE).await;
            let t0 = Instant::now();
            reader.release_shared().await?;
            let (next, t1) = wait.await??;
            writer = next;
            took.push(between(t0, t1));
            writer.let_go(READERS_SIGNAL).await?;
            writer.release().await?;
        }
        Ok(took)
    })
}

/// The shared holder's own named lock.
const READERS_SIGNAL: &str = "leasekeeper-floor-r";

/// The named lock used as the signal.
const SIGNAL: &str = "leasekeeper-floor";

/// A MySQL candidate: its statement connection and its signal connection.
struct My {
    connections: Option<(MySqlConnection, MySqlConnection)>,
    identity: &'static str,
    tenure: String,
}

impl My {
    async fn connect(url: &str, identity: &'static str) -> anyhow::Result<My> {
        let statements = MySqlConnection::connect(url).await?;
        let signal = MySqlConnection::connect(url).await?;
        Ok(My {
            connections: Some((statements, signal)),
            identity,
            tenure: String::new(),
        })
    }

    fn take_over(&mut self) -> My {
        My {
            connections: self.connections.take(),
            identity: self.identity,
            tenure: std::mem::take(&mut self.tenure),
        }
    }

    fn connections(&mut self) -> anyhow::Result<&mut (MySqlConnection, MySqlConnection)> {
        self.connections.as_mut().context("no connections")
    }

    /// Waits for the named lock (the holder's release lets it go).
    async fn signal(&mut self) -> anyhow::Result<()> {
        self.signal_on(SIGNAL).await
    }

    /// Waits for the named lock `name`.
    async fn signal_on(&mut self, name: &str) -> anyhow::Result<()> {
        let (_, signal) = self.connections()?;
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 60)")
            .bind(name)
            .fetch_one(signal)
            .await?;
        if got != Some(1) {
            bail!("GET_LOCK answered {got:?}");
        }
        Ok(())
    }

    /// Lets the named lock `name` go.
    async fn let_go(&mut self, name: &str) -> anyhow::Result<()> {
        let (_, signal) = self.connections()?;
        sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(name)
            .execute(signal)
            .await?;
        Ok(())
    }

    /// Joins the shared holders: its named lock, the lease row shared, its row.
    async fn take_shared(&mut self) -> anyhow::Result<()> {
        self.signal_on(READERS_SIGNAL).await?;
        let tenure = format!(
            "{}-{}",
            self.identity,
            leasekeeper::clock::monotonic_now_ns()
        );
        let identity = self.identity;
        let (statements, _) = self.connections()?;
        let taken = sqlx::query("UPDATE leasekeeper_floor SET holder = ?, token = LAST_INSERT_ID(token + 1), expires_at = UTC_TIMESTAMP(6) + INTERVAL 15 SECOND, tenure = 'shared' WHERE election = 'floor' AND (expires_at <= UTC_TIMESTAMP(6) OR tenure = 'shared')")
            .bind(identity)
            .execute(&mut *statements)
            .await?;
        if taken.rows_affected() != 1 {
            bail!("the shared take found the row held");
        }
        sqlx::query("INSERT INTO leasekeeper_floor_shared VALUES ('floor', ?, 'r', UTC_TIMESTAMP(6) + INTERVAL 15 SECOND)")
            .bind(&tenure)
            .execute(statements)
            .await?;
        self.tenure = tenure;
        Ok(())
    }

    /// The last shared holder leaves: its row deleted, the lease row freed, its named
    /// lock let go.
    async fn release_shared(&mut self) -> anyhow::Result<()> {
        let tenure = self.tenure.clone();
        let (statements, _) = self.connections()?;
        sqlx::query("DELETE FROM leasekeeper_floor_shared WHERE election = 'floor' AND tenure = ?")
            .bind(&tenure)
            .execute(&mut *statements)
            .await?;
        let freed = sqlx::query("UPDATE leasekeeper_floor SET holder = '', tenure = '', expires_at = UTC_TIMESTAMP(6) WHERE election = 'floor' AND tenure = 'shared' AND NOT EXISTS (SELECT 1 FROM leasekeeper_floor_shared WHERE election = 'floor' AND kind = 'r' AND expires_at > UTC_TIMESTAMP(6))")
            .execute(statements)
            .await?;
        if freed.rows_affected() != 1 {
            bail!("the shared release left the row held");
        }
        self.let_go(READERS_SIGNAL).await
    }

    /// Frees the row, then lets the named lock go.
    async fn release(&mut self) -> anyhow::Result<()> {
        let tenure = self.tenure.clone();
        let (statements, signal) = self.connections()?;
        let freed = sqlx::query("UPDATE leasekeeper_floor SET holder = '', tenure = '', expires_at = UTC_TIMESTAMP(6) WHERE election = 'floor' AND tenure = ?")
            .bind(&tenure)
            .execute(statements)
            .await?;
        if freed.rows_affected() != 1 {
            bail!("the release found the row not ours");
        }
        sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(SIGNAL)
            .execute(signal)
            .await?;
        Ok(())
    }

    async fn take(&mut self) -> anyhow::Result<()> {
        let tenure = format!(
            "{}-{}",
            self.identity,
            leasekeeper::clock::monotonic_now_ns()
        );
        let identity = self.identity;
        let (statements, _) = self.connections()?;
        let taken = sqlx::query("UPDATE leasekeeper_floor SET holder = ?, token = LAST_INSERT_ID(token + 1), expires_at = UTC_TIMESTAMP(6) + INTERVAL 15 SECOND, tenure = ? WHERE election = 'floor' AND expires_at <= UTC_TIMESTAMP(6)")
            .bind(identity)
            .bind(&tenure)
            .execute(statements)
            .await?;
        if taken.rows_affected() != 1 || taken.last_insert_id() < 1 {
            bail!("the take found the row held");
        }
        self.tenure = tenure;
        Ok(())
    }
}
