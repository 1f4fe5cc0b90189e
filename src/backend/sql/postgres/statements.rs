//! PostgreSQL's statements for one lease table and the tables beside it (see the
//! parent module for what each does), written once per candidate.

use sqlx::Postgres;

use super::super::request::{self, scalar, texts, tuples};
use super::super::{Tenancy, QUARANTINE};
use super::shared::SharedStatements;

/// The statements for one table (and its token counters and candidates), written once.
pub(super) struct Statements {
    pub(super) exists: String,
    pub(super) create: String,
    pub(super) create_counter: String,
    pub(super) create_candidates: String,
    pub(super) seed: String,
    pub(super) list: String,
    pub(super) live: String,
    pub(super) present: String,
    pub(super) reserve: String,
    pub(super) prune: String,
    pub(super) take: String,
    pub(super) renew: String,
    pub(super) release: String,
    pub(super) own: String,
    /// The shared holders' table's (`--mode`).
    pub(super) shared: SharedStatements,
}

impl Statements {
    pub(super) fn for_tables(t: &str, c: &str, k: &str, s: &str) -> Statements {
        Statements {
            shared: SharedStatements::for_tables(t, c, k, s),
            exists: "SELECT to_regclass($1) IS NOT NULL".to_owned(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (
                   election    text PRIMARY KEY,
                   holder      text NOT NULL,
                   tenure      text NOT NULL,
                   token       bigint NOT NULL,
                   acquired_at timestamptz NOT NULL,
                   renewed_at  timestamptz NOT NULL,
                   expires_at  timestamptz NOT NULL
                 )"
            ),
            create_counter: format!(
                "CREATE TABLE IF NOT EXISTS {c} (
                   election text PRIMARY KEY,
                   token    bigint NOT NULL
                 )"
            ),
            create_candidates: format!(
                "CREATE TABLE IF NOT EXISTS {k} (
                   election       text NOT NULL,
                   identity       text NOT NULL,
                   alive_until    timestamptz NOT NULL,
                   reserved_until timestamptz,
                   PRIMARY KEY (election, identity)
                 )"
            ),
            // $1 election, $2 identity, $3 alive ms: our own row, alive (its
            // reservation stays).
            list: format!(
                "INSERT INTO {k} AS p (election, identity, alive_until)
                 VALUES ($1::text, $2::text, now() + $3::bigint * interval '1 millisecond')
                 ON CONFLICT (election, identity) DO UPDATE SET alive_until = EXCLUDED.alive_until"
            ),
            live: format!("SELECT identity FROM {k} WHERE election = $1::text ORDER BY identity"),
            // The presences (listener connections' names) in this database.
            present: "SELECT application_name::text FROM pg_stat_activity
                      WHERE application_name LIKE 'lk:%' AND datname = current_database()"
                .to_owned(),
            // $1 election, $2 to, $3 ttl ms, $4 our tenure, $5 identity, $6 alive ms,
            // $7 `to`'s presence: `to`'s row reserved when its presence is there and
            // the lease row is ours; our own row kept and without a reservation. The
            // count of rows reserved.
            reserve: format!(
                "WITH held AS (
                   SELECT 1 FROM {t} WHERE election = $1::text AND tenure = $4::text
                 ),
                 marked AS (
                   UPDATE {k} SET reserved_until = now() + $3::bigint * interval '1 millisecond'
                   WHERE election = $1::text AND identity = $2::text
                     AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $7::text)
                     AND EXISTS (SELECT 1 FROM held)
                   RETURNING identity
                 ),
                 mine AS (
                   UPDATE {k} SET reserved_until = NULL,
                     alive_until = GREATEST(alive_until, now() + $6::bigint * interval '1 millisecond')
                   WHERE election = $1::text AND identity = $5::text AND identity <> $2::text
                 )
                 SELECT count(*)::bigint FROM marked"
            ),
            // $1 election, $2 identity (whose presence is gone).
            prune: format!(
                "DELETE FROM {k} WHERE election = $1::text AND identity = $2::text
                   AND alive_until < now()
                   AND (reserved_until IS NULL OR reserved_until < now())"
            ),
            // $1 election: the counter at least as high as the row's token.
            seed: format!(
                "INSERT INTO {c} AS k (election, token)
                 SELECT $1::text, COALESCE(MAX(token), 0) FROM {t} WHERE election = $1::text
                 ON CONFLICT (election) DO UPDATE SET token = GREATEST(k.token, EXCLUDED.token)"
            ),
            take: take(t, c, k),
            renew: format!(
                "UPDATE {t} SET renewed_at = now(), expires_at = now() + $3::bigint * interval '1 millisecond'
                 WHERE election = $1::text AND tenure = $2::text"
            ),
            release: format!(
                "WITH freed AS (
                   UPDATE {t} SET holder = '', tenure = '', expires_at = now()
                   WHERE election = $1::text AND tenure = $2::text
                   RETURNING election
                 )
                 SELECT pg_notify($3::text, election)::text FROM freed"
            ),
            own: format!("SELECT tenure FROM {t} WHERE election = $1::text"),
        }
    }
}

/// The take statement on lease table `t`, counters `c`, candidates `k`.
fn take(t: &str, c: &str, k: &str) -> String {
    // $1 election, $2 our tenure, $3 identity, $4 ttl ms, $5 floor, $6 channel.
    // A new tenure gets one more than the highest of the row's token, the
    // floor and the counter, and the counter follows it in the same statement.
    // A missing row comes back as a quarantine row instead of ours when tokens
    // were handed out before (the counter or the floor says so; see the parent
    // module).
    // A free row is not taken for a new tenure while another candidate's
    // reservation lasts (a switchover's); the row then comes back as nobody's
    // with the reservation's time left, and the named candidate's take drops
    // its reservation in the same statement.
    format!(
        "WITH c AS (
           SELECT GREATEST(COALESCE((SELECT token FROM {c} WHERE election = $1::text), 0), $5::bigint) AS n
         ),
         r AS (
           SELECT MAX(reserved_until) AS until FROM {k}
           WHERE election = $1::text AND identity <> $3::text AND reserved_until > now()
         ),
         taken AS (
           INSERT INTO {t} AS l (election, holder, tenure, token, acquired_at, renewed_at, expires_at)
           SELECT $1::text,
                  CASE WHEN c.n > 0 THEN '' ELSE $3::text END,
                  CASE WHEN c.n > 0 THEN '{QUARANTINE}' ELSE $2::text END,
                  GREATEST(c.n, 1),
                  now(), now(), now() + $4::bigint * interval '1 millisecond'
           FROM c
           ON CONFLICT (election) DO UPDATE SET
             token = CASE WHEN l.tenure = $2::text THEN l.token
                          ELSE GREATEST(l.token, (SELECT n FROM c)) + 1 END,
             holder = $3::text,
             tenure = $2::text,
             acquired_at = CASE WHEN l.tenure = $2::text THEN l.acquired_at ELSE now() END,
             renewed_at = now(),
             expires_at = now() + $4::bigint * interval '1 millisecond'
           WHERE l.tenure = $2::text
              OR (l.expires_at <= now() AND (SELECT until FROM r) IS NULL)
           RETURNING l.holder, l.tenure, l.token, l.expires_at
         ),
         counted AS (
           INSERT INTO {c} AS k (election, token) SELECT $1::text, token FROM taken
           ON CONFLICT (election) DO UPDATE SET token = GREATEST(k.token, EXCLUDED.token)
         ),
         cleared AS (
           UPDATE {k} SET reserved_until = NULL
           WHERE election = $1::text AND identity = $3::text AND reserved_until IS NOT NULL
             AND EXISTS (SELECT 1 FROM taken WHERE tenure = $2::text)
         )
         SELECT holder, tenure, token,
                GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::bigint,
                pg_notify($6::text, $1::text)::text
         FROM taken
         UNION ALL
         SELECT CASE WHEN expires_at > now() THEN holder ELSE '' END, tenure, token,
                GREATEST(0, CEIL(EXTRACT(EPOCH FROM (
                  GREATEST(expires_at, COALESCE((SELECT until FROM r), expires_at)) - now()
                )) * 1000))::bigint,
                NULL::text
         FROM {t} WHERE election = $1::text AND NOT EXISTS (SELECT 1 FROM taken)"
    )
}

/// One PostgreSQL statement with its parameters bound: what a request sends.
pub(super) type Request<'q> = request::Request<'q, Postgres>;

/// A request whose answer is one column, as `O`.
pub(super) type Scalar<'q, O> = request::Scalar<'q, Postgres, O>;

/// A request whose answer is rows as tuples `O`.
pub(super) type Tuples<'q, O> = request::Tuples<'q, Postgres, O>;

/// The requests, each the statement's parameters in its order (`$1`, `$2`, …; see
/// each statement).
impl Statements {
    pub(super) fn seed<'q>(&'q self, election: &'q str) -> Request<'q> {
        texts(&self.seed, &[election])
    }

    /// The take, notifying on `channel` when it applies.
    pub(super) fn take<'q>(&'q self, t: &'q Tenancy, channel: &'q str) -> Request<'q> {
        sqlx::query(&self.take)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(t.ttl_ms())
            .bind(t.floor_sent().sql_param())
            .bind(channel)
    }

    pub(super) fn renew<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        sqlx::query(&self.renew)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(t.ttl_ms())
    }

    /// A release (`statement`: the lease row's, or the shared holders' last step) of
    /// `tenure`, notifying on `channel`.
    pub(super) fn release<'q>(
        statement: &'q str,
        (election, tenure): (&'q str, &'q str),
        channel: &'q str,
    ) -> Request<'q> {
        texts(statement, &[election, tenure, channel])
    }

    pub(super) fn list<'q>(&'q self, t: &'q Tenancy, alive_ms: i64) -> Request<'q> {
        sqlx::query(&self.list)
            .bind(&t.election)
            .bind(&t.identity)
            .bind(alive_ms)
    }

    pub(super) fn live<'q>(&'q self, election: &'q str) -> Scalar<'q, String> {
        scalar(&self.live, &[election])
    }

    pub(super) fn present(&self) -> Scalar<'_, String> {
        scalar(&self.present, &[])
    }

    /// The switchover's reservation for `to` (whose presence is `presence`).
    pub(super) fn reserve<'q>(
        &'q self,
        t: &'q Tenancy,
        (to, presence): (&'q str, String),
        alive_ms: i64,
    ) -> Scalar<'q, i64> {
        sqlx::query_scalar(&self.reserve)
            .bind(&t.election)
            .bind(to)
            .bind(t.ttl_ms())
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(alive_ms)
            .bind(presence)
    }

    pub(super) fn prune<'q>(&'q self, election: &'q str, identity: &'q str) -> Request<'q> {
        texts(&self.prune, &[election, identity])
    }

    pub(super) fn own<'q>(&'q self, election: &'q str) -> Scalar<'q, String> {
        scalar(&self.own, &[election])
    }

    pub(super) fn exists(&self, table: String) -> Scalar<'_, bool> {
        sqlx::query_scalar(&self.exists).bind(table)
    }
}

/// The shared holders' requests (`--mode`; see [`SharedStatements`]).
impl SharedStatements {
    pub(super) fn take<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        sqlx::query(&self.take)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(t.ttl_ms())
            .bind(t.floor_sent().sql_param())
    }

    pub(super) fn renew<'q>(&'q self, t: &'q Tenancy) -> Scalar<'q, i64> {
        sqlx::query_scalar(&self.renew)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(t.ttl_ms())
    }

    pub(super) fn sweep<'q>(&'q self, election: &'q str, tenure: &'q str) -> Request<'q> {
        texts(&self.sweep, &[election, tenure])
    }

    /// Our waiting row (`presence`: its key; `reader`: a shared candidate's `q`, else
    /// a writer's `w`), written for a ttl.
    pub(super) fn mark<'q>(
        &'q self,
        t: &'q Tenancy,
        presence: &'q str,
        reader: bool,
    ) -> Request<'q> {
        sqlx::query(&self.mark)
            .bind(&t.election)
            .bind(presence)
            .bind(&t.identity)
            .bind(t.ttl_ms())
            .bind(if reader { "q" } else { "w" })
    }

    pub(super) fn unmark<'q>(&'q self, election: &'q str, presence: &'q str) -> Request<'q> {
        texts(&self.unmark, &[election, presence])
    }

    pub(super) fn own<'q>(&'q self, t: &'q Tenancy) -> Scalar<'q, i64> {
        scalar(&self.own, &[&t.election, &t.tenure])
    }

    pub(super) fn queue<'q>(&'q self, election: &'q str) -> Request<'q> {
        texts(&self.queue, &[election])
    }

    pub(super) fn holders<'q>(&'q self, election: &'q str) -> Tuples<'q, (String, i64, bool)> {
        tuples(&self.holders, &[election])
    }
}
