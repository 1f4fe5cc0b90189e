//! `--mode` on PostgreSQL: the statements of the shared holders' table (see
//! [`crate::backend::sql`]), each one statement judged by the server's `now()`.
//!
//! The shared take is one `INSERT … ON CONFLICT (election) DO UPDATE … WHERE` on the
//! lease row, as the writers' take: the row it conflicts with is locked and its
//! condition judged on the row's latest version, so a shared take and a writer's take
//! of the same row are ordered by that lock and the second sees what the first did. A
//! shared release frees the row only when the row's version is still the one its
//! snapshot read with the other shared holders' rows (PostgreSQL judges an `UPDATE`'s
//! condition again on the latest version of a row that changed meanwhile). The last
//! shared holder's release calls `pg_notify` in the same statement, so a waiting writer
//! wakes when it commits; a writer's take notifies as an election's take does, and
//! waiting shared candidates wake then. A waiting candidate's row (the queue, judged before the take:
//! `crate::backend::sql`) is keyed by its presence and keeps its place while that
//! session is in `pg_stat_activity` or its expiry lies ahead; a waiting writer waits
//! silently for the shared holders' sessions (see [`super::wake::WAIT_READERS`]).

use super::super::{HOLDERS_SHOWN, QUARANTINE, SHARED};

/// The statements for the shared holders' table `s` beside lease table `t`, counters
/// `c` and candidates `k`.
pub(super) struct SharedStatements {
    pub create: String,
    pub take: String,
    pub renew: String,
    pub sweep: String,
    pub release: String,
    pub mark: String,
    pub unmark: String,
    pub own: String,
    pub holders: String,
    pub queue: String,
}

/// Whether a waiting row (`kind` `w` or `q`, see [`crate::backend::sql`]'s queue)
/// still stands: until its expiry, and for as long as the session its `tenure` names
/// lives (the candidate's listener's `application_name`, its presence: it waits
/// silently, writing nothing).
const WAITS: &str = "(expires_at > now() OR EXISTS (
  SELECT 1 FROM pg_stat_activity AS a WHERE a.application_name = tenure))";

/// [`WAITS`] for the waiting row `q` of a join.
const Q_WAITS: &str = "(q.expires_at > now() OR EXISTS (
  SELECT 1 FROM pg_stat_activity AS a WHERE a.application_name = q.tenure))";

/// The server's clock in µs: a waiting row's arrival.
const ARRIVAL: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint";

/// A ttl from now, the ttl in ms bound as `$n`.
fn ahead(n: u8) -> String {
    format!("now() + ${n}::bigint * interval '1 millisecond'")
}

impl SharedStatements {
    pub(super) fn for_tables(t: &str, c: &str, k: &str, s: &str) -> SharedStatements {
        SharedStatements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {s} (
                   election   text NOT NULL,
                   tenure     text NOT NULL,
                   holder     text NOT NULL,
                   kind       text NOT NULL,
                   token      bigint NOT NULL,
                   expires_at timestamptz NOT NULL,
                   PRIMARY KEY (election, tenure)
                 )"
            ),
            take: take(t, c, k, s),
            // $1 election, $2 tenure, $3 ttl ms: the lease row's expiry raised (and
            // its version moved) only while our row is live and the row shared and
            // live; then our row, only when the lease row moved.
            renew: format!(
                "WITH lease AS (
                   UPDATE {t} AS l SET
                     renewed_at = GREATEST(clock_timestamp(), l.renewed_at + interval '1 microsecond'),
                     expires_at = GREATEST(l.expires_at, {ttl})
                   WHERE l.election = $1::text AND l.tenure = '{SHARED}' AND l.expires_at > now()
                     AND EXISTS (SELECT 1 FROM {s} WHERE election = $1::text AND tenure = $2::text
                                   AND kind = 'r' AND expires_at > now())
                   RETURNING 1
                 ),
                 mine AS (
                   UPDATE {s} SET expires_at = {ttl}
                   WHERE election = $1::text AND tenure = $2::text AND kind = 'r'
                     AND EXISTS (SELECT 1 FROM lease)
                   RETURNING 1
                 )
                 SELECT count(*)::bigint FROM mine",
                ttl = ahead(3)
            ),
            // $1 election, $2 tenure: our row and every expired one (a waiting
            // row stays while its session lives).
            sweep: format!(
                "DELETE FROM {s} WHERE election = $1::text AND (tenure = $2::text
                   OR (expires_at <= now() AND NOT (kind IN ('w', 'q') AND {WAITS})))"
            ),
            release: release(t, s),
            // $1 election, $2 our presence (as its tenure), $3 identity, $4 ttl ms,
            // $5 kind (`w`, `q`): our waiting row, its arrival (the token) kept.
            mark: format!(
                "INSERT INTO {s} (election, tenure, holder, kind, token, expires_at)
                 VALUES ($1::text, $2::text, $3::text, $5::text, {ARRIVAL}, {})
                 ON CONFLICT (election, tenure) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                ahead(4)
            ),
            // $1 election, $2 our presence.
            unmark: format!(
                "DELETE FROM {s} WHERE election = $1::text AND tenure = $2::text
                   AND kind IN ('w', 'q')"
            ),
            queue: queue(t, s),
            // $1 election, $2 tenure.
            own: format!(
                "SELECT count(*)::bigint FROM {s} AS r JOIN {t} AS l ON l.election = r.election
                 WHERE r.election = $1::text AND r.tenure = $2::text AND r.kind = 'r'
                   AND l.tenure = '{SHARED}'"
            ),
            // $1 election: the writer that holds, or the live shared holders.
            holders: format!(
                "SELECT holder, token, false FROM {t}
                 WHERE election = $1::text AND expires_at > now() AND holder <> ''
                   AND tenure NOT IN ('{SHARED}', '{QUARANTINE}')
                 UNION ALL
                 (SELECT holder, token, true FROM {s}
                  WHERE election = $1::text AND kind = 'r' AND expires_at > now()
                  ORDER BY token LIMIT {HOLDERS_SHOWN})"
            ),
        }
    }
}

/// The shared take. $1 election, $2 our tenure, $3 identity, $4 ttl ms, $5 floor.
fn take(t: &str, c: &str, k: &str, s: &str) -> String {
    // `mine`: our live shared row (a campaign whose answer was lost: adopted with its
    // token). `kept`: until when another's reservation keeps new shared holders out
    // (the queue, a waiting writer among it, is judged before: `super::super::queue`). The lease row is joined when it is shared already, or has
    // expired, and nothing keeps us out (or we hold already); a missing row is
    // inserted as the writers' take does (ours only when no token was ever handed
    // out, else a quarantine row). The row's version (`renewed_at`) grows strictly.
    format!(
        "WITH c AS (
           SELECT GREATEST(COALESCE((SELECT token FROM {c} WHERE election = $1::text), 0), $5::bigint) AS n
         ),
         mine AS (
           SELECT token FROM {s}
           WHERE election = $1::text AND tenure = $2::text AND kind = 'r' AND expires_at > now()
         ),
         kept AS (
           SELECT MAX(until) AS until FROM (
             SELECT reserved_until AS until FROM {k}
             WHERE election = $1::text AND identity <> $3::text AND reserved_until > now()
           ) AS w
         ),
         joined AS (
           INSERT INTO {t} AS l (election, holder, tenure, token, acquired_at, renewed_at, expires_at)
           SELECT $1::text,
                  CASE WHEN c.n > 0 THEN '' ELSE $3::text END,
                  CASE WHEN c.n > 0 THEN '{QUARANTINE}' ELSE '{SHARED}' END,
                  GREATEST(c.n, 1),
                  now(), now(), {ttl}
           FROM c WHERE (SELECT until FROM kept) IS NULL OR EXISTS (SELECT 1 FROM mine)
           ON CONFLICT (election) DO UPDATE SET
             token = CASE WHEN l.tenure = '{SHARED}' AND EXISTS (SELECT 1 FROM mine) THEN l.token
                          ELSE GREATEST(l.token, (SELECT n FROM c)) + 1 END,
             holder = $3::text,
             acquired_at = CASE WHEN l.tenure = '{SHARED}' AND l.expires_at > now()
                                THEN l.acquired_at ELSE now() END,
             renewed_at = GREATEST(clock_timestamp(), l.renewed_at + interval '1 microsecond'),
             expires_at = GREATEST(l.expires_at, {ttl}),
             tenure = '{SHARED}'
           WHERE (l.tenure = '{SHARED}' AND l.expires_at > now() AND EXISTS (SELECT 1 FROM mine))
              OR ((l.tenure = '{SHARED}' OR l.expires_at <= now()) AND (SELECT until FROM kept) IS NULL)
           RETURNING l.tenure, l.token
         ),
         me AS (
           INSERT INTO {s} AS r (election, tenure, holder, kind, token, expires_at)
           SELECT $1::text, $2::text, $3::text, 'r', COALESCE((SELECT token FROM mine), j.token), {ttl}
           FROM joined AS j WHERE j.tenure = '{SHARED}'
           ON CONFLICT (election, tenure) DO UPDATE SET
             holder = EXCLUDED.holder, kind = 'r', token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
           RETURNING token
         ),
         counted AS (
           INSERT INTO {c} AS k (election, token) SELECT $1::text, token FROM joined
           ON CONFLICT (election) DO UPDATE SET token = GREATEST(k.token, EXCLUDED.token)
         )
         SELECT $3::text, $2::text, token, $4::bigint FROM me
         UNION ALL
         SELECT CASE WHEN expires_at > now() THEN holder ELSE '' END, tenure, token,
                GREATEST(0, CEIL(EXTRACT(EPOCH FROM (
                  GREATEST(expires_at, COALESCE((SELECT until FROM kept), expires_at)) - now()
                )) * 1000))::bigint
         FROM {t} WHERE election = $1::text AND NOT EXISTS (SELECT 1 FROM me)",
        ttl = ahead(4)
    )
}

/// The shared release's second statement, after our row was deleted (`sweep`).
/// $1 election, $2 our tenure, $3 channel.
fn release(t: &str, s: &str) -> String {
    // `v`: the lease row's version as this statement's snapshot shows it, beside the
    // other shared holders' rows; the row is freed only when no other shared row is
    // live there and the version is still that one (judged again on the row's latest
    // version if it changed meanwhile). Our row was deleted by a statement of its own
    // before: of two last shared holders leaving at once, the later one sees the
    // other's row gone and frees the row.
    format!(
        "WITH v AS (
           SELECT token, renewed_at FROM {t} WHERE election = $1::text AND tenure = '{SHARED}'
         ),
         freed AS (
           UPDATE {t} AS l SET holder = '', tenure = '', expires_at = now()
           FROM v
           WHERE l.election = $1::text AND l.tenure = '{SHARED}'
             AND l.token = v.token AND l.renewed_at = v.renewed_at
             AND NOT EXISTS (SELECT 1 FROM {s} WHERE election = $1::text AND kind = 'r'
                               AND tenure <> $2::text AND expires_at > now())
           RETURNING l.election
         )
         SELECT pg_notify($3::text, election)::text FROM freed"
    )
}

/// The queue's read. $1 election: the lease row (as a refused take returns it), how
/// long it has been free (ms, negative while held), and each live waiting row
/// (presence, whether a writer's, arrival, ms since its expiry), NULL when there is
/// none.
fn queue(t: &str, s: &str) -> String {
    format!(
        "SELECT CASE WHEN l.expires_at > now() THEN l.holder ELSE '' END, l.tenure, l.token,
                GREATEST(0, CEIL(EXTRACT(EPOCH FROM (l.expires_at - now())) * 1000))::bigint,
                FLOOR(EXTRACT(EPOCH FROM (now() - l.expires_at)) * 1000)::bigint,
                q.tenure, CASE WHEN q.kind = 'w' THEN 1 ELSE 0 END::bigint, q.token,
                FLOOR(EXTRACT(EPOCH FROM (now() - q.expires_at)) * 1000)::bigint
         FROM {t} AS l LEFT JOIN {s} AS q ON q.election = l.election
           AND q.kind IN ('w', 'q') AND {Q_WAITS}
         WHERE l.election = $1::text"
    )
}
