# leasekeeper container image: a release build on Debian bookworm, run on distroless.
#
#   docker build -t ghcr.io/leasekeeper/leasekeeper:0.1.0 .
#
# The binary links glibc (and libgcc_s) dynamically, so the runtime image is distroless
# "cc" (glibc, libgcc, CA certificates; no shell, no package manager), as non-root 65532.

FROM rust:1-bookworm AS builder
# protoc and the protobuf includes: etcd-client generates its gRPC code at build time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin leasekeeper \
 && install -D -m 0755 target/release/leasekeeper /usr/local/bin/leasekeeper

# The runtime stage is image/contents.txt, line by line (base, copy, user, expose,
# entrypoint): tests/suite/container.rs checks this stage against that list and runs the same
# image with runc, so the two cannot drift.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /usr/local/bin/leasekeeper /usr/local/bin/leasekeeper
USER 65532:65532
# Status, metrics and the leader API (LEASEKEEPER_HTTP_ADDR, default 0.0.0.0:4040).
EXPOSE 4040
# No tini: as PID 1 the sidecar forks and its parent serves as the container's init
# (reaps every orphan, passes SIGTERM and the like on, ends with the sidecar's code),
# and when the sidecar ends, so does every process of the container, exec mode's
# command included (docs/operations.md, exec mode). Keep it the entry point: a shell
# or another init in front of it takes that away.
ENTRYPOINT ["/usr/local/bin/leasekeeper"]
