#!/usr/bin/env bash
# Loads an image archive of scripts/image-archive into a containerd of its own and runs
# the image: `leasekeeper --help` and `leasekeeper status --help`. Needs root, containerd
# and ctr (Debian: apt-get install containerd; its system service is not used).
#
#   python3 scripts/image-archive --binary target/debug/leasekeeper --output /tmp/lk.tar
#   bash tests/image/containerd-smoke.sh /tmp/lk.tar [IMAGE]
#
# containerd runs with its own root, state and socket in a temporary folder, which is
# removed at the end with everything in it; exit 0 when both commands ran and exited 0.
set -euo pipefail
archive=$(realpath "$1")
image=${2:-$(python3 -c 'import json,sys,tarfile; t=tarfile.open(sys.argv[1]); print(json.load(t.extractfile("index.json"))["manifests"][0]["annotations"]["io.containerd.image.name"])' "$archive")}
dir=$(mktemp -d /tmp/lk-containerd.XXXXXX)
sock=$dir/containerd.sock
pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  # The containers' shims (started by this containerd, with its socket) end on their own.
  for _ in $(seq 25); do
    pgrep -f -- "-address $sock" >/dev/null || break
    sleep 0.2
  done
  pgrep -f -- "-address $sock" | xargs -r kill 2>/dev/null || true
  grep -o " ${dir}[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
containerd config default >"$dir/config.toml"
# Only what `ctr run` needs: no CRI plugin, no system paths.
sed -i 's/^disabled_plugins = \[\]/disabled_plugins = ["io.containerd.grpc.v1.cri"]/' "$dir/config.toml"
containerd --config "$dir/config.toml" --address "$sock" --root "$dir/root" --state "$dir/state" \
  >"$dir/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 50); do
  ctr --address "$sock" version >/dev/null 2>&1 && break
  sleep 0.2
done
ctr() { command ctr --address "$sock" --namespace leasekeeper-smoke "$@"; }
start=$(date +%s%N)
ctr images import "$archive"
echo "imported in $((($(date +%s%N) - start) / 1000000)) ms"
ctr images ls
# ctr run takes the command in place of the entry point: name the binary.
for args in "--help" "status --help"; do
  # shellcheck disable=SC2086 # the words of $args are the arguments
  ctr run --rm "$image" lk-smoke /usr/local/bin/leasekeeper $args >"$dir/out"
  echo "leasekeeper $args (exit 0):"
  sed -n '1,3p' "$dir/out"
done
ctr images rm "$image" >/dev/null
echo "containerd smoke: the image ran (--help, status --help)"
