# The two commands of the README: `make run` and `make test`.
.PHONY: run test deps bench lint chart-test prometheus-test soak sim check-features image-archive

# Runs the sidecar on its default backend (a local lock file): no server needed.
# Builds only the file backend (no protoc, no other store's client) with the light
# `quick` profile (Cargo.toml): the first answer of `curl localhost:4040/leader` comes
# within 2 minutes on a fresh machine (README). Arguments: make run ARGS="--ttl 5s".
QUICK = --profile quick --no-default-features --features file
run:
	cargo run $(QUICK) -- $(ARGS)

# Installs the test servers when missing, then runs the whole test suite: the checks,
# then every test of every suite in a process of its own, side by side, under
# cargo-nextest (.config/nextest.toml; docs/development.md, "The test suite's time"),
# then the doc tests.
#
# The chart checks (about a core for 15 s, mostly Helm's renders) run beside the
# build and the tests; their report follows the tests', and a failure of either fails.
test: deps
	bash tests/prometheus/check.sh
	python3 tests/docs/check_links.py
	python3 tests/docs/check_voice.py
	python3 tests/docs/check_citations.py
	python3 tests/docs/check_flags.py
	python3 tests/structure/check_imports.py
	python3 tests/structure/check_function_length.py
	python3 tests/structure/check_sleeps.py
	mkdir -p target
	nice -n 19 python3 tests/chart/check_chart.py > target/check-chart.log 2>&1 & chart=$$!; \
	status=0; cargo nextest run || status=$$?; \
	echo "== chart checks (tests/chart/check_chart.py)"; \
	wait $$chart || status=1; cat target/check-chart.log; exit $$status
	cargo test --doc

deps:
	bash scripts/install-test-deps

# Each backend feature builds alone (cargo check per feature; CI runs it, .ci/run).
check-features:
	bash scripts/install-build-deps
	bash scripts/check-features

# Helm chart and manifests/ checks (helm lint, helm template, kubernetes-validate).
chart-test:
	bash scripts/install-chart-deps
	python3 tests/chart/check_chart.py

# The container image as an OCI image archive, without Docker (scripts/image-archive):
# target/leasekeeper-image.tar, for `ctr images import`, `podman load`, `kind load
# image-archive` or skopeo (docs/workloads.md). From the release build by default; any
# other build with BINARY=, e.g. make image-archive BINARY=target/debug/leasekeeper.
BINARY ?= target/release/leasekeeper
image-archive:
	python3 scripts/image-archive --binary $(BINARY)

# The alert rules, their unit tests and the dashboard's PromQL (promtool).
prometheus-test:
	bash tests/prometheus/check.sh

# The long run, not part of `make test`: every backend through LK_SOAK_TRANSITIONS
# (default 1000) leader transitions under every fault the checker has for it, then one
# table (tests/suite/soak.rs; docs/development.md, "Soak"). Under an hour on two cores.
soak: deps
	rm -rf target/soak
	status=0; cargo test --test suite -- --ignored --test-threads=1 --nocapture soak:: || status=$$?; \
	echo; echo "## leasekeeper soak, $$(date -u +%Y-%m-%d), LK_SOAK_TRANSITIONS=$${LK_SOAK_TRANSITIONS:-1000}"; echo; \
	cat target/soak/results.md 2>/dev/null || echo "(no results)"; \
	echo; echo "Slots (LK_SOAK_SLOT_RUNS=$${LK_SOAK_SLOT_RUNS:-10}):"; echo; \
	cat target/soak/slots.md 2>/dev/null || echo "(no results)"; \
	echo; echo "Shared and exclusive (LK_SOAK_MODE_RUNS=$${LK_SOAK_MODE_RUNS:-10}):"; echo; \
	cat target/soak/modes.md 2>/dev/null || echo "(no results)"; \
	exit $$status

# The elector's deterministic simulator, long run (not part of `make test`, which runs
# its 1,000-seed sweep): LK_SIM_SEEDS (default 100,000) seeds on each of the four store
# families, and the exhaustive search to deeper bounds (docs/safety.md, "The simulator").
# Debug build (no release build needed): 7 minutes on this 2-core machine while other
# builds ran (400,000 runs in 332 s, then 85 s of exhaustive search).
sim:
	cargo test --test suite -- --ignored --nocapture --test-threads=1 elector_sim::

# Handover/failover latency, follower load, idle footprint, next to peers; writes
# docs/benchmarks.md (every table; with LK_BENCH_ONLY=a,b only the tables those
# sections measure whole) and target/bench-results.md (the run's cells).
bench:
	bash scripts/install-test-deps --bench
	cargo bench --bench handover

lint:
	bash scripts/install-build-deps
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
