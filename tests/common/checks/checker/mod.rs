//! The election checker: several real sidecars compete on one backend while
//! faults are injected; invariant 1 is verified from the processes' own transition
//! logs and from outside, fencing tokens must strictly grow, and a new leader must
//! appear within a bound after each fault.
//!
//! Every later backend runs the same checker with its own server controls.
//!
//! - [`rounds`]: the candidates and one round per fault;
//! - [`faults`]: the faults, and for each the step that injects it and checks what follows;
//! - [`claims`]: the tenures the sidecars logged, and the checks on them;
//! - [`outside`]: the answers seen from outside, and the check on them;
//! - [`store`]: the store's own faults and the per-candidate links to it.

mod claims;
mod faults;
mod outside;
mod rounds;
mod store;

use std::time::{Duration, Instant};

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use claims::{
    check_claims_never_overlap, check_claims_never_overlap_but, check_tokens_strictly_grow,
    parse_claims, LoggedClaim,
};
pub use faults::Fault;
#[allow(unused_imports)]
pub use store::{stop_members, LinkArgs, Links, Members, RedisCluster, ServerControl};

use rounds::Election;

/// Optional parts of a run beyond [`ElectionSpec`].
#[derive(Default)]
pub struct Extras {
    /// Links through proxies (needed by the partition and slow-link faults).
    pub links: Option<Links>,
    /// The store's own record of holders, checked against the claims afterwards.
    pub store: Option<crate::common::harness::recorder::Recorder>,
    /// Changes the leader's record behind its back (`TamperDelete`/`TamperOverwrite`).
    #[allow(clippy::type_complexity)]
    pub tamper: Option<Box<dyn FnMut(Fault)>>,
    /// Cuts store node `i` off from the others (`true`) or heals it (`false`).
    #[allow(clippy::type_complexity)]
    pub isolate: Option<Box<dyn FnMut(usize, bool)>>,
    /// Nodes that `IsolateStoreNode` may pick, round robin (all when empty).
    pub isolate_nodes: Vec<usize>,
    /// Extra environment for every sidecar (the self-tests' misbehaviour switches).
    pub sidecar_env: Vec<(String, String)>,
    /// Extra flags for the sidecar of this name (`cand-<slot>-g<generation>`).
    #[allow(clippy::type_complexity)]
    pub sidecar_args: Option<Box<dyn Fn(&str) -> Vec<String>>>,
    /// The clock-rate fault: every sidecar's clocks (the monotonic one included) run at
    /// this many times real speed, under libfaketime. Their logged claims are mapped
    /// back to the host's monotonic clock before they are checked.
    pub clock_rate: Option<f64>,
}

/// libfaketime, multi-threaded flavour (Debian `faketime`).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// How long a tampered record may go on being claimed after another tenure began
/// (DESIGN invariant 9).
pub const TAMPER_TOLERANCE: Duration = Duration::from_millis(100);

pub struct ElectionSpec<'a> {
    /// Backend flags (`--backend …`, endpoints, `--ttl …`), without identity or listener.
    pub args: Vec<String>,
    pub ttl: Duration,
    pub candidates: usize,
    pub rounds: Vec<Fault>,
    pub server: Option<&'a mut dyn ServerControl>,
    /// Whether another candidate can lead while the leader is paused (not under flock).
    pub takeover_while_leader_paused: bool,
    /// Whether a server restart loses the lease (no persistence): then a new tenure
    /// must follow the restart, after the old claim has run out.
    pub restart_loses_data: bool,
}

impl<'a> ElectionSpec<'a> {
    /// Three candidates on `args` (with this `ttl`) against `server`: another
    /// candidate can lead while the leader is paused, and a restart of the store keeps
    /// its data (struct update syntax changes either).
    pub fn three_candidates(
        args: Vec<String>,
        ttl: Duration,
        rounds: Vec<Fault>,
        server: Option<&'a mut dyn ServerControl>,
    ) -> ElectionSpec<'a> {
        ElectionSpec {
            args,
            ttl,
            candidates: 3,
            rounds,
            server,
            takeover_while_leader_paused: true,
            restart_loses_data: false,
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub claims: usize,
    pub observations: usize,
    pub graceful_ms: Vec<f64>,
    pub crash_ms: Vec<f64>,
    pub node_faults: usize,
    /// Fault name → how long until another leader answered, in ms (for a store-wide
    /// outage, `pause-store` and `restart-store`: from the store's recovery to a leader).
    pub takeover_ms: std::collections::BTreeMap<&'static str, Vec<f64>>,
    /// Fault name → rounds run.
    pub faults: std::collections::BTreeMap<&'static str, usize>,
    /// Distinct tenures whose holder changed (claims with a new token).
    pub transitions: usize,
    /// The longest any claim ran past the store handing the lease on, in ms (negative:
    /// the smallest margin left), when a store recorder ran. Claims whose record was
    /// tampered with are left out (see `longest_past_store_tampered_ms`).
    pub longest_past_store_ms: Option<f64>,
    /// The same over the claims whose record was tampered with (allowed up to
    /// [`TAMPER_TOLERANCE`] past the next holder).
    pub longest_past_store_tampered_ms: Option<f64>,
    /// Claims the store recorder could not judge (it was reconnecting meanwhile).
    pub unjudged_by_store: usize,
    /// The first and the last tenure's fencing token (tokens grow in between).
    pub first_token: Option<u64>,
    pub last_token: Option<u64>,
}

impl Report {
    /// Notes a takeover `since` the fault (or the store's recovery).
    fn took_over(&mut self, fault: Fault, since: Instant) {
        self.takeover_ms
            .entry(fault.name())
            .or_default()
            .push(since.elapsed().as_secs_f64() * 1e3);
    }
}

/// `n` rounds whose faults follow `pattern` in turn: round `i` gets `pattern[i % len]`.
pub fn cycle(n: usize, pattern: &[Fault]) -> Vec<Fault> {
    (0..n).map(|i| pattern[i % pattern.len()]).collect()
}

/// A checker run on a store of the test's own, as a row of data: three candidates at
/// ttl `ttl_secs` through `rounds`, at least `min_claims` tenures seen.
pub struct Run {
    ttl_secs: u64,
    rounds: Vec<Fault>,
    min_claims: usize,
    /// The store keeps nothing across a restart (see [`ElectionSpec`]).
    restart_loses_data: bool,
}

impl Run {
    /// At ttl `ttl_secs` through `rounds`, no tenures required, a store that keeps its
    /// data across a restart.
    pub fn new(ttl_secs: u64, rounds: Vec<Fault>) -> Run {
        Run {
            ttl_secs,
            rounds,
            min_claims: 0,
            restart_loses_data: false,
        }
    }

    /// At least `n` tenures seen.
    pub fn min_claims(self, n: usize) -> Run {
        Run {
            min_claims: n,
            ..self
        }
    }

    /// A store that keeps nothing across a restart.
    pub fn losing_data(self) -> Run {
        Run {
            restart_loses_data: true,
            ..self
        }
    }

    /// Runs it with `args` (the store's flags and the election) against `server`, prints
    /// the report under `name`, and requires the tenures.
    pub fn on(
        self,
        name: &str,
        args: crate::common::SidecarArgs,
        server: &mut dyn ServerControl,
    ) -> Report {
        let ttl = Duration::from_secs(self.ttl_secs);
        let args = args.ttl(&format!("{}s", self.ttl_secs)).build();
        let report = run(ElectionSpec {
            restart_loses_data: self.restart_loses_data,
            ..ElectionSpec::three_candidates(args, ttl, self.rounds, Some(server))
        });
        eprintln!("{name}: {report:?}");
        assert!(
            report.claims >= self.min_claims,
            "only {} tenures",
            report.claims
        );
        report
    }
}

/// Runs the rounds, then checks invariant 1 from inside and outside and token order.
pub fn run(spec: ElectionSpec<'_>) -> Report {
    run_with(spec, Extras::default())
}

/// The short link-and-store fault run the backend suites share: `candidates` = 3,
/// every sidecar reaching the one store `node` through its own proxy.
pub fn run_link_faults(
    ttl: Duration,
    rounds: Vec<Fault>,
    node: std::net::SocketAddr,
    args: impl Fn(&str) -> Vec<String> + 'static,
    store: crate::common::harness::recorder::Recorder,
    tamper: impl FnMut(Fault) + 'static,
) -> Report {
    run_with(
        ElectionSpec::three_candidates(Vec::new(), ttl, rounds, None),
        Extras {
            links: Some(Links {
                nodes: vec![node],
                args: Box::new(move |addrs| args(&addrs[0])),
            }),
            store: Some(store),
            tamper: Some(Box::new(tamper)),
            ..Extras::default()
        },
    )
}

/// [`run`] with links, a store recorder and store faults.
pub fn run_with(spec: ElectionSpec<'_>, extras: Extras) -> Report {
    let candidates = spec.candidates;
    let rounds = spec.rounds.clone();
    let mut e = Election::start(spec, extras);
    let mut report = Report::default();
    for (i, fault) in rounds.iter().enumerate() {
        let started = Instant::now();
        e.round(*fault, &mut report);
        eprintln!("round {i} {fault:?}: {:?}", started.elapsed());
    }
    let observations = e.every_candidate_stops_cleanly();
    let claims = e.claims();
    let tolerance = TAMPER_TOLERANCE.as_nanos() as u64;
    check_claims_never_overlap_but(&claims, &e.tampered, tolerance);
    check_tokens_strictly_grow(&claims);
    outside::check_outside_view_but(&observations, &e.tampered, TAMPER_TOLERANCE);
    claims::check_no_panics(e.dir.path());
    the_leader_does_not_flap(&claims, rounds.len(), candidates);
    if let Some(store) = e.extras.store.take() {
        the_store_handed_on_no_lease_still_claimed(store, &claims, &e.tampered, &mut report);
    }
    report.first_token = claims.first().map(|c| c.token);
    report.last_token = claims.last().map(|c| c.token);
    report.claims = claims.len();
    report.transitions = claims.len();
    report.observations = observations.len();
    report
}

/// A fault moves the lease once or twice; many more tenures than that is a leader
/// that loses its lease without any fault (a flapping leader never overlaps, so the
/// other checks would not see it).
fn the_leader_does_not_flap(claims: &[LoggedClaim], rounds: usize, candidates: usize) {
    let bound = 2 * rounds + 2 * candidates;
    assert!(
        claims.len() <= bound,
        "{} tenures in {} rounds: the leader flaps without faults",
        claims.len(),
        rounds
    );
}

/// The claims against the store's own record of holders: how long any ran past the
/// store handing the lease on (checked within the tolerance by the recorder).
fn the_store_handed_on_no_lease_still_claimed(
    store: crate::common::harness::recorder::Recorder,
    claims: &[LoggedClaim],
    tampered: &[u64],
    report: &mut Report,
) {
    let tolerance = TAMPER_TOLERANCE.as_nanos() as u64;
    let changes = store.finish();
    let past = crate::common::harness::recorder::check_claims_against_store(
        claims, &changes, tampered, tolerance,
    );
    report.longest_past_store_ms = past.untampered.map(|ns| ns as f64 / 1e6);
    report.longest_past_store_tampered_ms = past.tampered.map(|ns| ns as f64 / 1e6);
    report.unjudged_by_store = past.unjudged;
}
