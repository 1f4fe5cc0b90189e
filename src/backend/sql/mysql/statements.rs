//! MySQL's statements for one lease table and the tables beside it (see the parent
//! module for what each does), written once per candidate.

use std::time::Duration;

use sqlx::MySql;

use super::super::request::{self, scalar, texts, tuples};
use super::super::Tenancy;
use super::shared::SharedStatements;

pub(super) struct Statements {
    /// The candidates' table's.
    pub(super) cands: CandidateStatements,
    pub(super) exists: String,
    pub(super) create: String,
    pub(super) create_counter: String,
    pub(super) seed: String,
    pub(super) reserve: String,
    pub(super) take: String,
    pub(super) raise: String,
    pub(super) counted: String,
    pub(super) read: String,
    pub(super) insert: String,
    pub(super) renew: String,
    pub(super) release: String,
    pub(super) own: String,
    pub(super) young: String,
    pub(super) queue: String,
    /// The shared holders' table's (`--mode`).
    pub(super) shared: SharedStatements,
}

impl Statements {
    pub(super) fn for_tables(t: &str, c: &str, p: &str, s: &str) -> Statements {
        // election, identity: whether another candidate's reservation lasts.
        let reserved_for_another = format!(
            "EXISTS (SELECT 1 FROM {p} WHERE election = ? AND identity <> ? AND reserved_until > UTC_TIMESTAMP(6))"
        );
        Statements {
            shared: SharedStatements::for_tables(t, c, p, s),
            exists: "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.tables
                     WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?"
                .to_owned(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (
                   election    VARCHAR(253) NOT NULL PRIMARY KEY,
                   holder      VARCHAR(253) NOT NULL,
                   tenure      VARCHAR(64) NOT NULL,
                   token       BIGINT NOT NULL,
                   acquired_at DATETIME(6) NOT NULL,
                   renewed_at  DATETIME(6) NOT NULL,
                   expires_at  DATETIME(6) NOT NULL
                 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            create_counter: format!(
                "CREATE TABLE IF NOT EXISTS {c} (
                   election VARCHAR(253) NOT NULL PRIMARY KEY,
                   token    BIGINT NOT NULL
                 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            cands: CandidateStatements::for_tables(t, p),
            // election, floor, election: the counter row, at least as high as the
            // lease row's token and the floor.
            seed: format!(
                "INSERT INTO {c} (election, token)
                 SELECT ?, GREATEST(COALESCE(MAX(token), 0), ?) FROM {t} WHERE election = ?
                 ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))"
            ),
            // floor, election, tenure, election, identity: the next token, counted
            // before it is handed out, and only when the lease row is free for a new
            // tenure of ours (not left to another candidate; one assignment: a
            // multi-table UPDATE runs its assignments in no set order).
            reserve: format!(
                "UPDATE {c} AS k JOIN {t} AS l ON l.election = k.election
                 SET k.token = LAST_INSERT_ID(GREATEST(k.token, l.token, ?) + 1)
                 WHERE k.election = ? AND l.tenure <> ? AND l.expires_at <= UTC_TIMESTAMP(6)
                   AND NOT {reserved_for_another}"
            ),
            // tenure, reserved, tenure, identity, ttl µs, tenure, election, tenure,
            // reserved, election, identity: ours again (a lost answer), or free, not
            // left to another candidate, and a token reserved.
            take: format!(
                "UPDATE {t} SET
                   token = LAST_INSERT_ID(IF(tenure = ?, token, GREATEST(token + 1, ?))),
                   acquired_at = IF(tenure = ?, acquired_at, UTC_TIMESTAMP(6)),
                   holder = ?,
                   renewed_at = UTC_TIMESTAMP(6),
                   expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
                   tenure = ?
                 WHERE election = ? AND (tenure = ? OR (? > 0 AND expires_at <= UTC_TIMESTAMP(6)
                   AND NOT {reserved_for_another}))"
            ),
            // token, election: the counter catches up with a row whose token was above it.
            raise: format!("UPDATE {c} SET token = GREATEST(token, ?) WHERE election = ?"),
            counted: format!("SELECT token FROM {c} WHERE election = ?"),
            read: read(t, p),
            // election, tenure, token, ttl µs: a row nobody holds.
            insert: format!(
                "INSERT IGNORE INTO {t} (election, holder, tenure, token, acquired_at, renewed_at, expires_at)
                 VALUES (?, '', ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)"
            ),
            // ttl µs, election, tenure.
            renew: format!(
                "UPDATE {t} SET renewed_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
                 WHERE election = ? AND tenure = ?"
            ),
            release: format!(
                "UPDATE {t} SET holder = '', tenure = '', expires_at = UTC_TIMESTAMP(6)
                 WHERE election = ? AND tenure = ?"
            ),
            // tenure, presence, presence, lock, election: the row's tenure; the
            // presence lock taken (kept) when the row is ours; who holds the named lock.
            own: format!(
                "SELECT tenure,
                        CAST(IF(tenure = ?, IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, GET_LOCK(?, 0)), 0) AS SIGNED),
                        CAST(IS_USED_LOCK(?) AS SIGNED)
                 FROM {t} WHERE election = ?"
            ),
            young: young(t),
            // election, tenure, lock, wait: a follower's wait for the named lock,
            // queued only while the row's tenure is the one it saw (see `signal`).
            queue: format!(
                "SELECT CAST(IF(COALESCE((SELECT tenure FROM {t} WHERE election = ?), '') = ?,
                                GET_LOCK(?, ?), -1) AS SIGNED)"
            ),
        }
    }
}

/// Binds presence, election, tenure: whether the session of the tenure's leader lives
/// (see `signal`).
fn young(t: &str) -> String {
    format!(
        "SELECT CAST(IS_USED_LOCK(?) IS NOT NULL OR EXISTS (
           SELECT 1 FROM {t} WHERE election = ? AND tenure = ? AND holder <> ''
             AND acquired_at > UTC_TIMESTAMP(6) - INTERVAL {} MICROSECOND) AS SIGNED)",
        super::signal::YOUNG_TENURE.as_micros()
    )
}

/// The statements of the candidates' table `p` (beside the lease table `t`).
pub(super) struct CandidateStatements {
    pub(super) create: String,
    pub(super) list: String,
    pub(super) live: String,
    pub(super) present: String,
    pub(super) reserve_to: String,
    pub(super) mine: String,
    pub(super) clear_mine: String,
    pub(super) prune: String,
}

impl CandidateStatements {
    pub(super) fn for_tables(t: &str, p: &str) -> CandidateStatements {
        CandidateStatements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {p} (
                   election       VARCHAR(253) NOT NULL,
                   identity       VARCHAR(253) NOT NULL,
                   alive_until    DATETIME(6) NOT NULL,
                   reserved_until DATETIME(6) NULL,
                   PRIMARY KEY (election, identity)
                 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            // election, identity, alive µs: our own row, alive (its reservation stays).
            list: format!(
                "INSERT INTO {p} (election, identity, alive_until, reserved_until)
                 VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULL)
                 ON DUPLICATE KEY UPDATE alive_until = VALUES(alive_until)"
            ),
            live: format!("SELECT identity FROM {p} WHERE election = ? ORDER BY identity"),
            // presence lock: whether that candidate's session lives.
            present: "SELECT CAST(IS_USED_LOCK(?) IS NOT NULL AS SIGNED)".to_owned(),
            // ttl µs, election, to, `to`'s presence lock, tenure: `to`'s row reserved
            // when its session lives and the lease row is ours (one matched row).
            reserve_to: format!(
                "UPDATE {p} AS r JOIN {t} AS l ON l.election = r.election
                 SET r.reserved_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
                 WHERE r.election = ? AND r.identity = ? AND IS_USED_LOCK(?) IS NOT NULL
                   AND l.tenure = ?"
            ),
            // alive µs, election, identity: our own row alive, without a reservation.
            mine: format!(
                "UPDATE {p} SET reserved_until = NULL,
                   alive_until = GREATEST(alive_until, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
                 WHERE election = ? AND identity = ?"
            ),
            // election, identity: a reservation of ours, used up by our take.
            clear_mine: format!(
                "UPDATE {p} SET reserved_until = NULL
                 WHERE election = ? AND identity = ? AND reserved_until IS NOT NULL"
            ),
            // election, identity (whose session is gone).
            prune: format!(
                "DELETE FROM {p} WHERE election = ? AND identity = ?
                   AND alive_until < UTC_TIMESTAMP(6)
                   AND (reserved_until IS NULL OR reserved_until < UTC_TIMESTAMP(6))"
            ),
        }
    }
}

/// The read of the election's row in lease table `t`, with candidates' table `p`:
/// binds election, identity, election; the row, and a free one left to another
/// candidate shown as nobody's, with the reservation's time left, saying so.
fn read(t: &str, p: &str) -> String {
    format!(
        "SELECT IF(l.expires_at > UTC_TIMESTAMP(6), l.holder, ''), l.tenure, l.token,
                CAST(GREATEST(0, CEILING(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6),
                  GREATEST(l.expires_at, COALESCE(r.until, l.expires_at))) / 1000)) AS SIGNED),
                CAST(r.until IS NOT NULL AS SIGNED)
         FROM {t} AS l CROSS JOIN (
           SELECT MAX(reserved_until) AS until FROM {p}
           WHERE election = ? AND identity <> ? AND reserved_until > UTC_TIMESTAMP(6)
         ) AS r
         WHERE l.election = ?"
    )
}

/// One MySQL statement with its parameters bound: what a request sends.
pub(super) type Request<'q> = request::Request<'q, MySql>;

/// A request whose answer is one column, as `O`.
pub(super) type Scalar<'q, O> = request::Scalar<'q, MySql, O>;

/// A request whose answer is rows as tuples `O`.
pub(super) type Tuples<'q, O> = request::Tuples<'q, MySql, O>;

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The requests, each the statement's parameters in its order (see each statement).
impl Statements {
    pub(super) fn renew<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        sqlx::query(&self.renew)
            .bind(micros(t.ttl))
            .bind(&t.election)
            .bind(&t.tenure)
    }

    pub(super) fn release<'q>(&'q self, election: &'q str, tenure: &'q str) -> Request<'q> {
        texts(&self.release, &[election, tenure])
    }

    /// The leader's look: the row's tenure, its presence lock (`presence`) taken when
    /// the row is ours, and who holds the election's lock (`lock`).
    pub(super) fn own<'q>(
        &'q self,
        t: &'q Tenancy,
        (presence, lock): (&'q str, &'q str),
    ) -> Tuples<'q, (String, Option<i64>, Option<i64>)> {
        tuples(
            &self.own,
            &[&t.tenure, presence, presence, lock, &t.election],
        )
    }

    pub(super) fn read<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        texts(&self.read, &[&t.election, &t.identity, &t.election])
    }

    /// The next token, counted when the row is free for a new tenure of ours.
    pub(super) fn count<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        sqlx::query(&self.reserve)
            .bind(t.floor_sent().sql_param())
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(&t.election)
            .bind(&t.identity)
    }

    /// The conditional take, with the token `reserved` for a new tenure (0: none).
    pub(super) fn take<'q>(&'q self, t: &'q Tenancy, reserved: i64) -> Request<'q> {
        sqlx::query(&self.take)
            .bind(&t.tenure)
            .bind(reserved)
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(micros(t.ttl))
            .bind(&t.tenure)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(reserved)
            .bind(&t.election)
            .bind(&t.identity)
    }

    pub(super) fn seed<'q>(&'q self, election: &'q str, floor: i64) -> Request<'q> {
        sqlx::query(&self.seed)
            .bind(election)
            .bind(floor)
            .bind(election)
    }

    pub(super) fn raise<'q>(&'q self, election: &'q str, token: i64) -> Request<'q> {
        sqlx::query(&self.raise).bind(token).bind(election)
    }

    pub(super) fn counted<'q>(&'q self, election: &'q str) -> Scalar<'q, i64> {
        scalar(&self.counted, &[election])
    }

    /// A row nobody holds: `tenure` (a quarantine's, or none) with `token`, for `ttl_us`.
    pub(super) fn insert<'q>(
        &'q self,
        election: &'q str,
        (tenure, token): (&'q str, i64),
        ttl_us: i64,
    ) -> Request<'q> {
        sqlx::query(&self.insert)
            .bind(election)
            .bind(tenure)
            .bind(token)
            .bind(ttl_us)
    }
}

/// The candidates' table's requests.
impl CandidateStatements {
    pub(super) fn list<'q>(&'q self, t: &'q Tenancy, alive: Duration) -> Request<'q> {
        sqlx::query(&self.list)
            .bind(&t.election)
            .bind(&t.identity)
            .bind(micros(alive))
    }

    pub(super) fn live<'q>(&'q self, election: &'q str) -> Scalar<'q, String> {
        scalar(&self.live, &[election])
    }

    /// Whether the session that holds presence lock `lock` lives (1).
    pub(super) fn present(&self, lock: String) -> Scalar<'_, i64> {
        sqlx::query_scalar(&self.present).bind(lock)
    }

    /// `to`'s reservation, while its presence lock (`to_lock`) is held and the lease
    /// row is ours.
    pub(super) fn reserve_to<'q>(
        &'q self,
        t: &'q Tenancy,
        to: &'q str,
        to_lock: String,
    ) -> Request<'q> {
        sqlx::query(&self.reserve_to)
            .bind(micros(t.ttl))
            .bind(&t.election)
            .bind(to)
            .bind(to_lock)
            .bind(&t.tenure)
    }

    pub(super) fn mine<'q>(&'q self, t: &'q Tenancy, alive: Duration) -> Request<'q> {
        sqlx::query(&self.mine)
            .bind(micros(alive))
            .bind(&t.election)
            .bind(&t.identity)
    }

    pub(super) fn clear_mine<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        texts(&self.clear_mine, &[&t.election, &t.identity])
    }

    pub(super) fn prune<'q>(&'q self, election: &'q str, identity: &'q str) -> Request<'q> {
        texts(&self.prune, &[election, identity])
    }
}

/// The shared holders' requests (`--mode`; see [`SharedStatements`]).
impl SharedStatements {
    pub(super) fn mine<'q>(&'q self, t: &'q Tenancy) -> Scalar<'q, i64> {
        scalar(&self.mine, &[&t.election, &t.tenure])
    }

    pub(super) fn count<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        sqlx::query(&self.count)
            .bind(t.floor_sent().sql_param())
            .bind(&t.election)
            .bind(&t.election)
            .bind(&t.identity)
    }

    pub(super) fn insert<'q>(&'q self, t: &'q Tenancy, token: i64) -> Request<'q> {
        sqlx::query(&self.insert)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(token)
            .bind(micros(t.ttl))
    }

    pub(super) fn join<'q>(&'q self, t: &'q Tenancy, token: i64) -> Request<'q> {
        sqlx::query(&self.join)
            .bind(token)
            .bind(&t.identity)
            .bind(micros(t.ttl))
            .bind(&t.election)
    }

    pub(super) fn drop<'q>(&'q self, election: &'q str, tenure: &'q str) -> Request<'q> {
        texts(&self.drop, &[election, tenure])
    }

    pub(super) fn renew<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        sqlx::query(&self.renew)
            .bind(micros(t.ttl))
            .bind(micros(t.ttl))
            .bind(&t.election)
            .bind(&t.tenure)
    }

    pub(super) fn read<'q>(&'q self, t: &'q Tenancy) -> Request<'q> {
        texts(&self.read, &[&t.election, &t.identity, &t.election])
    }

    pub(super) fn sweep<'q>(&'q self, election: &'q str, tenure: &'q str) -> Request<'q> {
        texts(&self.sweep, &[election, tenure])
    }

    /// The lease row's version, and whether other live shared holders are left.
    pub(super) fn version<'q>(
        &'q self,
        election: &'q str,
        tenure: &'q str,
    ) -> Tuples<'q, (i64, i64, i64)> {
        tuples(&self.version, &[election, tenure, election])
    }

    /// The lease row freed, only at the version (`token`, `at`) read.
    pub(super) fn free<'q>(&'q self, election: &'q str, (token, at): (i64, i64)) -> Request<'q> {
        sqlx::query(&self.free).bind(election).bind(token).bind(at)
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
            .bind(if reader { "q" } else { "w" })
            .bind(micros(t.ttl))
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

    pub(super) fn holders<'q>(&'q self, election: &'q str) -> Tuples<'q, (String, i64, i64)> {
        tuples(&self.holders, &[election, election])
    }
}
