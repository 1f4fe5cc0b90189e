//! The tables of docs/benchmarks.md, in the page's order, and its preamble. A table's
//! rows are stores or measurements; its columns are leasekeeper and, where one exists,
//! the peer on the same server. Ids are what the bench's modules report cells by.

use super::{Cell, Column, Row, Table};

use Cell::{Labelled, Text, Value};

const fn col(id: &'static str, header: &'static str) -> Column {
    Column { id, header }
}

const fn row(id: &'static str, cells: &'static [Cell]) -> Row {
    Row { id, cells }
}

/// Where nothing is measured, by design (no peer, no such figure for the store).
const NONE: Cell = Text("—");

/// The page up to its first table.
pub const PREAMBLE: &str = "# Benchmarks\n\
\n\
Every measured figure of leasekeeper, one table per section, each with the command,\n\
machine and date of the run that measured it; older runs are in the history of this\n\
file. The targets these figures answer to are in [Design §9](design.md#9-performance-targets).\n\
Back to the [README](../README.md).\n\
\n\
```sh\n\
make bench   # = cargo bench --bench handover, which writes this page\n\
```\n\
\n\
`make bench` writes this page. `benches/handover/` (`main.rs` and a module per section)\n\
measures graceful handover and crash failover latency from the signal to the new\n\
leader's `claim_start` in its transition log (no polling error; the bench first looks\n\
for it 20 ms after the signal, so that its reads of the logs take no core from the\n\
handover it times), store requests per\n\
candidate at steady state, idle footprint, `/leader` throughput and binary size, with a\n\
peer program on the same server in the same run where one exists, and beside each\n\
handover the store's floor and its steps (its own, in process: `floor/`); `page.rs` and\n\
`tables.rs` there hold this page's tables and put each figure in its table, row and\n\
column (the run's figures, one a line, also go to `target/bench-results.md`).\n\
`LK_BENCH_ROUNDS` sets the number of handovers (default 40; the SQL sections' graceful\n\
handovers 50). `LK_BENCH_ONLY` runs some sections, comma-separated: `postgres`, `mysql`,\n\
`file`, `redis`, `etcd`, `scale`, `exec`, `kubernetes`, `zookeeper`, `steady`, `abuse`,\n\
`slots` or `modes`; `scale` (100 candidates on one election) runs only when asked for.\n\
Such a run rewrites the tables all of whose rows it measured and leaves every other\n\
table, with its command, machine and date, as it stands; a whole run rewrites every\n\
table but the 100 candidates'. Latencies read min / median / p99 in milliseconds (below\n\
51 values the nearest-rank p99 is the max); a cell nothing measured reads —. The stores\n\
are local: Redis 7.0.15, etcd 3.4.23, ZooKeeper 3.8.0 (tickTime 200 ms, a heap of 1 GiB), PostgreSQL 15,\n\
MariaDB 10.11, and the in-process fake Kubernetes API of the tests over HTTPS; release\n\
build.\n";

pub const TABLES: &[Table] = &[
    GRACEFUL,
    STEPS,
    FLOOR_STEPS,
    FAILOVER,
    STEADY,
    SCALE,
    SLOTS,
    MODES,
    EXEC,
    EXEC_STEPS,
    ABUSE,
    FOOTPRINT,
];

const GRACEFUL: Table = Table {
    id: "graceful",
    heading: "Graceful handover, 3 candidates, next to peers",
    columns: &[
        col("store", "store"),
        col("leasekeeper", "leasekeeper (SIGTERM → new claim)"),
        col("floor", "floor (same server, in-process)"),
        col("ratio", "leasekeeper / floor"),
        col("peer_name", "peer on the same server"),
        col("peer", "peer"),
    ],
    rows: &[
        row("file", &[Text("file"), Value, Value, Value, NONE, NONE]),
        row(
            "redis",
            &[
                Text("Redis"),
                Value,
                Value,
                Value,
                Text("redis-py `Lock`"),
                Value,
            ],
        ),
        row(
            "redlock3",
            &[Text("Redlock, 3 nodes"), Value, Value, Value, NONE, NONE],
        ),
        row(
            "redlock5",
            &[Text("Redlock, 5 nodes"), Value, Value, Value, NONE, NONE],
        ),
        row(
            "etcd",
            &[
                Text("etcd"),
                Value,
                Value,
                Value,
                Text("`etcdctl elect` (SIGINT → next elected)"),
                Value,
            ],
        ),
        row(
            "zookeeper",
            &[
                Text("ZooKeeper"),
                Value,
                Value,
                Value,
                Text("kazoo `Election`"),
                Value,
            ],
        ),
        row(
            "zookeeper_curator",
            &[
                Text("ZooKeeper"),
                Text("(the same run)"),
                NONE,
                NONE,
                Text("Curator `LeaderLatch` (close)"),
                Value,
            ],
        ),
        row(
            "postgres",
            &[
                Text("PostgreSQL"),
                Value,
                Value,
                Value,
                Text("`pg_try_advisory_lock` every 100 ms"),
                Value,
            ],
        ),
        row(
            "mysql",
            &[
                Text("MySQL (MariaDB)"),
                Value,
                Value,
                Value,
                Text("`SELECT … FOR UPDATE NOWAIT` every 100 ms"),
                Value,
            ],
        ),
        row(
            "kubernetes",
            &[
                Text("Kubernetes Lease (fake API)"),
                Value,
                Value,
                Value,
                Text("client-go `leaderelection`"),
                Text("not timed: see the steady state"),
            ],
        ),
    ],
    paragraph: "\
Three candidates on one election, ttl 15 s: once every follower follows the\n\
leader, the leader gets SIGTERM, and the latency runs to the next leader's claim in its\n\
transition log (for a peer, to the line it prints when elected); the stopped candidate\n\
restarts as a follower before the next round. The floor is the store's own handover,\n\
the least any client of it can take: the steps of leasekeeper's handover on that store\n\
(the holder's release, the store's notice to the waiting candidate, its take with the\n\
fencing token), each as its plainest request (a take without the queue, reservation\n\
and quarantine checks leasekeeper's take also makes), made by two clients in one\n\
process with the client library leasekeeper uses, on the same server in the same run,\n\
timed from the release's start to the take's answer (`benches/handover/floor/`);\n\
leasekeeper's handovers and the floor's take turns, five at a time, so that a change\n\
in the machine's load during a section weighs on both alike. Redis: the compare-and-delete that\n\
hands the baton out, the waiting `BLPOP`, the take script; Redlock: the same over the\n\
nodes in parallel, the baton on the first; etcd: the lease's revoke, the next in\n\
line's watch event, its read of the queue; ZooKeeper: the delete of the holder's\n\
node, the next in line's watch, its listing and its `sync` and stat read (floor\n\
handovers and leasekeeper's, three times as many as measured each and none counted,\n\
first warm the server's JVM for both: each makes requests the other does not; the\n\
server's young generation, 768 MiB, is more than a section fills, so no collection (a\n\
stop of about 17 ms with its serial collector) falls in a timed round); file: the\n\
record written and the lock let go of, the blocked `flock`, the record written with\n\
the next token; PostgreSQL: the release's `UPDATE` with its `pg_notify`, the `LISTEN`\n\
connection's wake, the take's `UPDATE` answering the token; MySQL: the release's\n\
`UPDATE` and the named lock let go of, the waiting `GET_LOCK`, the take's `UPDATE`;\n\
the Lease: the release's replace, the watch event, the take's replace. \"leasekeeper /\n\
floor\" is the ratio of the medians; the next table splits leasekeeper's figure into\n\
its steps.",
    in_whole_run: true,
};

const STEPS: Table = Table {
    id: "steps",
    heading: "Graceful handover, step by step",
    columns: &[
        col("store", "store"),
        col("ended", "SIGTERM → the leader's claim ended"),
        col("release_sent", "→ its release sent"),
        col("release_answered", "release sent → answered"),
        col("woke", "release sent → the next leader woke"),
        col("take_sent", "woke → its take sent"),
        col("claim", "take sent → its claim"),
    ],
    rows: &[
        row(
            "file",
            &[Text("file"), Value, Value, Value, Value, Value, Value],
        ),
        row(
            "redis",
            &[Text("Redis"), Value, Value, Value, Value, Value, Value],
        ),
        row(
            "redlock3",
            &[
                Text("Redlock, 3 nodes"),
                Value,
                Value,
                Value,
                Value,
                Value,
                Value,
            ],
        ),
        row(
            "redlock5",
            &[
                Text("Redlock, 5 nodes"),
                Value,
                Value,
                Value,
                Value,
                Value,
                Value,
            ],
        ),
        row(
            "etcd",
            &[Text("etcd"), Value, Value, Value, Value, Value, Value],
        ),
        row(
            "zookeeper",
            &[Text("ZooKeeper"), Value, Value, Value, Value, Value, Value],
        ),
        row(
            "postgres",
            &[Text("PostgreSQL"), Value, Value, Value, Value, Value, Value],
        ),
        row(
            "mysql",
            &[
                Text("MySQL (MariaDB)"),
                Value,
                Value,
                Value,
                Value,
                Value,
                Value,
            ],
        ),
        row(
            "kubernetes",
            &[
                Text("Kubernetes Lease (fake API)"),
                Value,
                Value,
                Value,
                Value,
                Value,
                Value,
            ],
        ),
        row(
            "machine",
            &[
                Text("the machine alone: a signal, a pipe (no sidecar, no store)"),
                Value,
                NONE,
                NONE,
                Value,
                NONE,
                NONE,
            ],
        ),
    ],
    paragraph: "\
The graceful handovers of the table above, split by the marks of the transition logs\n\
([configuration](configuration.md#the-transition-log)), medians in ms: the stopped\n\
leader publishes \"not leader\" and ends its claim (`claim_end`), withdraws from the\n\
election and sends its release, which the store answers (`release`); the store's notice\n\
wakes the next leader (`woke_ns`), which sends its acquiring request (`sent_ns`), whose\n\
answer starts its claim (`claim_start`). The notice can reach the next leader before\n\
the release's answer reaches the old one. The steps from the release sent to the claim\n\
are those the floor makes in its plainest form; the rest is the sidecar's own: the\n\
signal's delivery and the step-down, the withdrawal, and the wake. The last row is\n\
what the machine itself takes for two of these steps, with no sidecar and no store\n\
(`machine.rs`): SIGTERM to a process waiting in `pause(2)` until its handler runs,\n\
and a byte written to a pipe until the process blocked reading it runs (every notice\n\
from a store to the next leader is such a wake across processes). On file, whose floor\n\
is a fraction of a millisecond, these two are most of what leasekeeper adds to it; on\n\
ZooKeeper, the release is the close of the session, whose cost at the floor is the\n\
floor's second ZooKeeper row below. On Redis and etcd, most of the rest is the take\n\
(take sent → its claim, against the floor's woke → its take answered): on Redis, the\n\
take script also makes the queue, reservation and quarantine checks the floor's plain\n\
take leaves out, and the same round trip turns on the new holder's tracking of the\n\
lock key and reads the key (what shows it a takeover without asking); on etcd, the\n\
read of the queue is one transaction of five reads (the head, the key ahead of ours,\n\
ours, a switchover's reservation and the announcement) where the floor's has two,\n\
and a keep-alive of the lease goes beside it, which the claim's deadline rests on\n\
(its answer comes before the read's).",
    in_whole_run: true,
};

const FLOOR_STEPS: Table = Table {
    id: "floor_steps",
    heading: "The floor, step by step",
    columns: &[
        col("store", "store"),
        col("release_answered", "release sent → answered"),
        col("woke", "release sent → the waiting client woke"),
        col("take", "woke → its take answered"),
    ],
    rows: &[
        row("file", &[Text("file"), Value, Value, Value]),
        row("redis", &[Text("Redis"), Value, Value, Value]),
        row("redlock3", &[Text("Redlock, 3 nodes"), Value, Value, Value]),
        row("redlock5", &[Text("Redlock, 5 nodes"), Value, Value, Value]),
        row("etcd", &[Text("etcd"), Value, Value, Value]),
        row("zookeeper", &[Text("ZooKeeper"), Value, Value, Value]),
        row(
            "zookeeper_close",
            &[
                Text("ZooKeeper, released by the session's close"),
                Value,
                Value,
                Value,
            ],
        ),
        row("postgres", &[Text("PostgreSQL"), Value, Value, Value]),
        row("mysql", &[Text("MySQL (MariaDB)"), Value, Value, Value]),
        row(
            "kubernetes",
            &[Text("Kubernetes Lease (fake API)"), Value, Value, Value],
        ),
    ],
    paragraph: "\
The floor's handovers of the first table, split at two instants of each round, medians\n\
in ms: the holder's release call returning, and the waiting client's wait returning,\n\
just before it sends its take. The wait is the blocked `flock` on file, the `BLPOP` of\n\
the baton on Redis and Redlock, the delete event of the holder's key on etcd's watch,\n\
the watch on the holder's node on ZooKeeper, the release's notification on the\n\
`LISTEN` connection on PostgreSQL, the `GET_LOCK` of the named lock the holder lets go\n\
of on MySQL, and the event of the released Lease on its watch; the take is the rest\n\
(the record written, the take script or Redlock's two phases, the read of the queue,\n\
the listing with its `sync` and stat read, the take's `UPDATE`, the take's replace).\n\
The columns match the table above's \"release sent → answered\", \"release sent → the\n\
next leader woke\", and \"woke → its take sent\" with \"take sent → its claim\"\n\
together. The floor's two clients are in one process: no signal starts its handover,\n\
and its wake is within that process, where the sidecar's crosses processes. The second\n\
ZooKeeper row is the same handover with the holder's release the close of its session,\n\
as leasekeeper's is: a close deletes the session's own nodes only, where a delete\n\
deletes whichever node has the name, one another session may have created again\n\
(invariant 5); the close is more work for the server, and its row shows what it adds\n\
to the wake and the take.",
    in_whole_run: true,
};

const FAILOVER: Table = Table {
    id: "failover",
    heading: "Acquire round trip and crash failover, 3 candidates",
    columns: &[
        col("store", "store"),
        col("acquire", "acquire round trip (request sent → claim)"),
        col("crash", "crash failover (kill -9 → new claim)"),
        col("past_expiry", "past the lease's expiry in the store"),
        col("peer_crash", "peer crash failover"),
    ],
    rows: &[
        row("file", &[Text("file"), NONE, Value, NONE, NONE]),
        row("redis", &[Text("Redis"), Value, Value, Value, NONE]),
        row(
            "redlock3",
            &[Text("Redlock, 3 nodes"), Value, Value, Value, NONE],
        ),
        row(
            "redlock5",
            &[Text("Redlock, 5 nodes"), Value, Value, Value, NONE],
        ),
        row("etcd", &[Text("etcd"), Value, Value, NONE, NONE]),
        row("zookeeper", &[Text("ZooKeeper"), Value, Value, NONE, NONE]),
        row(
            "postgres",
            &[
                Text("PostgreSQL"),
                Value,
                Value,
                Value,
                Labelled("`pg_try_advisory_lock` every 100 ms"),
            ],
        ),
        row(
            "mysql",
            &[
                Text("MySQL (MariaDB)"),
                Value,
                Value,
                Value,
                Labelled("`SELECT … FOR UPDATE NOWAIT` every 100 ms"),
            ],
        ),
        row(
            "kubernetes",
            &[
                Text("Kubernetes Lease (fake API)"),
                Value,
                Value,
                NONE,
                NONE,
            ],
        ),
    ],
    paragraph: "\
\"Past the lease's expiry\" subtracts the lock's remaining time, read just before the kill\n\
by a command-line client, so values near 0 can dip slightly below it. A crashed leader's\n\
lease must run out (a lease, unlike a session lock, also protects against a holder that\n\
is paused or cut off and does not know it); the new claim follows the expiry within\n\
milliseconds. etcd's lessor looks for expired leases every 500 ms, which spreads its\n\
failover over half a second. The Lease's failover is a little less than the ttl because\n\
followers count the duration from the moment they saw the record's last write.",
    in_whole_run: true,
};

const STEADY: Table = Table {
    id: "steady",
    heading: "Steady state, 3 candidates",
    columns: &[
        col("store", "store"),
        col("leasekeeper", "leasekeeper"),
        col("peer", "peer"),
    ],
    rows: &[
        row(
            "redis_leader",
            &[Text("Redis, ttl 15 s: commands/s, the leader"), Value, NONE],
        ),
        row(
            "redis_follower",
            &[
                Text("Redis, ttl 15 s: commands/s, each follower"),
                Value,
                NONE,
            ],
        ),
        row(
            "etcd_unary",
            &[
                Text("etcd, ttl 15 s: reads and writes/s, all candidates"),
                Value,
                NONE,
            ],
        ),
        row(
            "etcd_keepalives",
            &[
                Text("etcd, ttl 15 s: lease keep-alives/s, all candidates"),
                Value,
                NONE,
            ],
        ),
        row(
            "zookeeper",
            &[
                Text("ZooKeeper, 4 s session: requests/s per candidate, pings included"),
                Value,
                NONE,
            ],
        ),
        row(
            "kubernetes",
            &[
                Text("Kubernetes Lease (fake API), ttl 15 s: API requests/s per candidate"),
                Value,
                Labelled("client-go `leaderelection` at its defaults"),
            ],
        ),
    ],
    paragraph: "\
Once every follower follows the leader: on Redis every command each candidate's\n\
connections send over 20 s (`MONITOR`, `LK_BENCH_WINDOW_S`), on etcd and ZooKeeper the\n\
server's own counters over 10 s, on the fake API its requests over 30 s. client-go runs\n\
as 4 replicas of one election at its defaults (LeaseDuration 15 s, RetryPeriod 2 s).",
    in_whole_run: true,
};

const SCALE: Table = Table {
    id: "scale",
    heading: "100 candidates on one election",
    columns: &[
        col("store", "store"),
        col("handover", "graceful handover"),
        col("steady", "store requests/s per candidate, steady"),
        col(
            "per_handover",
            "store requests per handover per waiting candidate",
        ),
        col("footprint", "RSS / CPU per candidate, steady"),
        col("overlaps", "overlaps seen from outside"),
    ],
    rows: &[
        row(
            "file",
            &[
                Text("file"),
                Value,
                NONE,
                Text("— (the kernel's lock)"),
                Value,
                Value,
            ],
        ),
        row("redis", &[Text("Redis"), Value, Value, Value, Value, Value]),
        row(
            "redlock3",
            &[Text("Redlock, 3 nodes"), Value, Value, Value, Value, Value],
        ),
        row("etcd", &[Text("etcd"), Value, Value, Value, Value, Value]),
        row(
            "zookeeper",
            &[Text("ZooKeeper"), Value, Value, Value, Value, Value],
        ),
        row(
            "kubernetes",
            &[
                Text("Kubernetes Lease (fake API)"),
                Value,
                Value,
                Value,
                Value,
                Value,
            ],
        ),
    ],
    paragraph: "\
`LK_BENCH_ONLY=scale` (`LK_BENCH_CANDIDATES` candidates, 100 by default), ttl 15 s,\n\
10 graceful handovers per store (`LK_BENCH_SCALE_ROUNDS`); the stopped candidate is\n\
restarted and rejoins as a follower, and its joining is counted in the requests. The\n\
steady figures are taken over 15 s once every follower has settled, and the steady rate\n\
is subtracted from the handovers' requests. On Redis and Redlock the requests are the\n\
servers' command statistics, which count the commands inside scripts. Every claim of\n\
the run goes through the outside observer's overlap check.",
    in_whole_run: false,
};

const SLOTS: Table = Table {
    id: "slots",
    heading: "Slots (`--holders 2`)",
    columns: &[
        col("store", "store"),
        col(
            "leasekeeper",
            "a slot handed over (SIGTERM → that slot's next claim)",
        ),
        col("floor", "floor (same server, in-process)"),
        col("ratio", "leasekeeper / floor"),
    ],
    rows: &[
        row("etcd", &[Text("etcd"), Value, Value, Value]),
        row("zookeeper", &[Text("ZooKeeper"), Value, Value, Value]),
        row("redis", &[Text("Redis"), Value, Value, Value]),
        row(
            "redis_waiting",
            &[
                Text("Redis, ttl 15 s: a candidate waiting on two slots, commands/s"),
                Value,
                NONE,
                NONE,
            ],
        ),
    ],
    paragraph: "\
Four candidates of an election of two slots; each round stops one slot's holder,\n\
the two slots in turn, and restarts it. ZooKeeper's and etcd's data in `/dev/shm`. Each\n\
slot is a lease of its own, so its floor is the store's own handover of one lease (as\n\
under the graceful handover), measured on the same server in the same run.",
    in_whole_run: true,
};

const MODES: Table = Table {
    id: "modes",
    heading: "Shared and exclusive (`--mode`)",
    columns: &[
        col("store", "store"),
        col(
            "leasekeeper",
            "an exclusive lock taken after the last shared holder's SIGTERM",
        ),
        col("floor", "floor (same server, in-process)"),
        col("ratio", "leasekeeper / floor"),
    ],
    rows: &[
        row("file", &[Text("file"), Value, Value, Value]),
        row("redis", &[Text("Redis"), Value, Value, Value]),
        row("etcd", &[Text("etcd"), Value, Value, Value]),
        row("zookeeper", &[Text("ZooKeeper"), Value, Value, Value]),
        row("postgres", &[Text("PostgreSQL"), Value, Value, Value]),
        row("mysql", &[Text("MySQL (MariaDB)"), Value, Value, Value]),
    ],
    paragraph: "\
Two `--mode shared` candidates hold, a `--mode exclusive` one waits; the first reader\n\
stops, then the second reader's SIGTERM is timed to the writer's claim; new processes\n\
each round. The floor: the last shared holder's release and the exclusive take, in\n\
process on the same server: on file the shared `flock` let go of and the blocked\n\
exclusive one; on Redis the shared holder's entry removed with the read-write lock's\n\
message, heard by the subscribed exclusive candidate, then its take; on PostgreSQL and\n\
MySQL the shared holder's row deleted and the lease row freed (with the `pg_notify`, or\n\
the shared holder's named lock let go of), then the take; on etcd and ZooKeeper the\n\
exclusive candidate waits for the last shared holder's key or node as a next in line\n\
waits for the holder's, so their floor is the election's.",
    in_whole_run: true,
};

const EXEC: Table = Table {
    id: "exec",
    heading: "Exec mode",
    columns: &[
        col("measurement", "measurement"),
        col("leasekeeper", "leasekeeper"),
        col("peer", "peer"),
    ],
    rows: &[row(
        "etcd",
        &[
            Text("SIGTERM → the next command started, on etcd"),
            Labelled("`leasekeeper run`"),
            Labelled("`etcdctl lock NAME CMD` (SIGINT to its process group)"),
        ],
    )],
    paragraph: "\
The same command on both sides: a static C program, built with `gcc -static -O2` at the\n\
section's start, that prints a stamp as it starts (about a millisecond after its exec)\n\
and exits on SIGTERM or SIGINT, so the figures are the supervisors' own: the old command\n\
gone, the release, the next claim and the next command's start. leasekeeper waits for\n\
the old command's processes to be gone before it releases.",
    in_whole_run: true,
};

const EXEC_STEPS: Table = Table {
    id: "exec_steps",
    heading: "Exec mode, step by step",
    columns: &[
        col("store", "store"),
        col("ended", "SIGTERM → the leader's claim ended"),
        col("release_sent", "→ its command gone, its release sent"),
        col("claim", "release sent → the next claim"),
        col("started", "next claim → the next command started"),
    ],
    rows: &[row("etcd", &[Text("etcd"), Value, Value, Value, Value])],
    paragraph: "\
The handovers of `leasekeeper run` in the table above, split by the marks of the\n\
transition logs and the command's own stamp, medians in ms: the stopped leader ends its\n\
claim; its guard stops the command (SIGTERM to the command's init, which passes it on),\n\
sees the last of its processes end and says so, and the leader sends its release; the\n\
next leader's claim begins; its guard (this binary, started again) makes the command's\n\
PID namespace, forks the init there, and the init starts the command, whose first act is\n\
the stamp.",
    in_whole_run: true,
};

const ABUSE: Table = Table {
    id: "abuse",
    heading: "Hostile clients",
    columns: &[
        col("limit", "open-files limit"),
        col("probes", "probes answered within 1 s"),
        col("scrapes", "scrapes"),
        col("rss", "RSS idle / peak / after"),
        col("garbage", "garbage not refused"),
        col("tenure", "the leader's tenure"),
        col("crowd", "the crowd"),
    ],
    rows: &[
        row(
            "fixed",
            &[
                Text("1024, not raisable"),
                Value,
                Value,
                Value,
                Value,
                Value,
                Value,
            ],
        ),
        row(
            "raisable",
            &[Value, Value, Value, Value, Value, Value, Value],
        ),
    ],
    paragraph: "\
Three sidecars on one Redis (ttl 2 s); against the leader from 127.0.0.2, at nice 10 (in a\n\
cluster the crowd runs on other machines): 10,000 idle and half-sent connections that dial\n\
again a second after they are closed, 200 `/watch` subscribers that never read, 6\n\
kept-alive `GET /leader` floods and garbage (a 2 MiB header, a 10 MiB `POST /release`\n\
body, a 64 KiB request line, binary junk). Once every client has dialled and the flood\n\
and garbage run, for 30 s, every 500 ms: fresh probes of `/leader`, `/healthz`,\n\
`/readyz` and a `/metrics` scrape from 127.0.0.1. Defaults: `--http-max-connections\n\
512`, `--http-max-watchers 64`.",
    in_whole_run: true,
};

const FOOTPRINT: Table = Table {
    id: "footprint",
    heading: "Idle footprint, `GET /leader` throughput and binary size",
    columns: &[col("measurement", "measurement"), col("value", "value")],
    rows: &[
        row(
            "binary",
            &[Text("release binary, stripped, every backend"), Value],
        ),
        row(
            "file_leader",
            &[
                Text("file backend, default flags, leader idle: RSS / CPU"),
                Value,
            ],
        ),
        row(
            "file_follower",
            &[
                Text("file backend, default flags, follower idle: RSS / CPU"),
                Value,
            ],
        ),
        row(
            "redis_leader",
            &[Text("redis leader idle: RSS / CPU"), Value],
        ),
        row(
            "redis_follower",
            &[Text("redis follower idle: RSS / CPU"), Value],
        ),
        row(
            "throughput",
            &[
                Text("`GET /leader`, 4 kept-alive clients on the same machine"),
                Value,
            ],
        ),
    ],
    paragraph: "\
RSS and CPU of one of three sidecars left alone for 10 s once the followers have\n\
settled; `GET /leader` from 4 threads for 3 s, each over one kept-alive connection.",
    in_whole_run: true,
};
