#!/bin/bash
# A single-node Kubernetes for the node suite (tests/suite/kube_node.rs), on this host.
#
#   node.sh up STATE_DIR            start it; returns once the Node is Ready
#   node.sh down STATE_DIR [--purge] stop it and put the host back as it was
#
# `up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
# the kubelet and kube-proxy in the background (logs in STATE_DIR/logs, pids in
# STATE_DIR/pids), imports the pause image and a busybox image it builds
# (tests/kube_node/mkimage.py) and writes STATE_DIR/env (KUBECONFIG, the API URL, the
# CA, an admin token, containerd's socket). Pod networking is the CNI bridge plugin on
# kube-br0 (10.88.0.0/16); the host reaches every Pod IP. Pods cannot reach anything
# outside this host, and there is no cluster DNS: Pods use the `kubernetes` Service's
# ClusterIP, which every container finds in KUBERNETES_SERVICE_HOST.
#
# The Kubernetes binaries are not built by this repository: LK_KUBE_NODE names a folder
# with kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and
# kubectl of one release (1.33), and `pause`, a static build of that release's
# build/pause/linux/pause.c. From the host: root, Debian's containerd, runc,
# containernetworking-plugins, iptables, nftables, etcd-server and busybox-static, and
# openssl, curl and python3 (docs/development.md, "The node suite").
#
# One node per host at a time: the interface names, ports 6443, 10248-10259 and
# 23790/23800, and the /kubepods cgroups are fixed. `down` removes what `up` and the
# components made outside STATE_DIR: Pod processes and cgroups, containerd's shims and
# their sockets, mounts, veths and bridges, iptables rules, sysctls, and the few files
# the kubelet and the CNI plugins write to fixed paths.
#
# Environment of `up` (optional): IMAGES (more image archives to import), WAIT_NODE
# (1: return once the Node is Ready, the default; 0: once the kubelet and kube-proxy
# answer), APISERVER_EXTRA_ARGS (appended to kube-apiserver's flags), LK_KUBE_NODE_BUSYBOX
# (a static busybox for the app image; default: the `busybox` on PATH).
set -euo pipefail

NODE_NAME=lk-node
NODE_IP=10.87.0.1
SERVICE_CIDR=10.0.0.0/24
SVC_IP=10.0.0.1
POD_CIDR=10.88.0.0/16
POD_GW=10.88.0.1
API_PORT=6443
ETCD_PORT=23790
ETCD_PEER_PORT=23800
NODE_IF=kube-node0
BRIDGE=kube-br0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() { echo "usage: $0 up STATE_DIR | down STATE_DIR [--purge]" >&2; exit 2; }

T0=$(date +%s%N)
log() { echo "[node +$(( ($(date +%s%N) - T0) / 1000000 ))ms] $*"; }
die() { log "ERROR: $*" >&2; exit 1; }

# --- preflight ---------------------------------------------------------------------------
preflight() {
  [ "$(id -u)" = 0 ] || die "needs root (network interfaces, iptables, cgroups, mounts)"
  [ -n "${LK_KUBE_NODE:-}" ] || die "LK_KUBE_NODE is not set: the folder of kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and pause"
  local b missing=""
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl pause; do
    [ -x "$LK_KUBE_NODE/$b" ] || missing="$missing $b"
  done
  [ -z "$missing" ] || die "missing in LK_KUBE_NODE=$LK_KUBE_NODE:$missing"
  for b in etcd containerd runc ctr iptables nft openssl curl python3; do
    command -v $b >/dev/null || missing="$missing $b"
  done
  [ -x /usr/lib/cni/bridge ] || missing="$missing containernetworking-plugins(/usr/lib/cni/bridge)"
  BUSYBOX=${LK_KUBE_NODE_BUSYBOX:-$(command -v busybox || true)}
  if [ -z "$BUSYBOX" ] || ldd "$BUSYBOX" >/dev/null 2>&1; then
    missing="$missing busybox-static(a static busybox)"
  fi
  [ -z "$missing" ] || die "missing on this host:$missing (Debian: apt-get install containerd containernetworking-plugins iptables nftables etcd-server busybox-static)"
  if ip link show $BRIDGE >/dev/null 2>&1 || ip link show $NODE_IF >/dev/null 2>&1; then
    die "$BRIDGE or $NODE_IF exists: another node runs on this host (stop it with its own down first)"
  fi
  if [ -d /sys/fs/cgroup/pids/kubepods ]; then
    die "/sys/fs/cgroup/pids/kubepods exists: another kubelet runs or ran on this host"
  fi
}

# --- a throw-away PKI: EC P-256 keys, one CA, 10-year certificates ----------------------
pki() { # DIR
  local d=$1
  mkdir -p "$d"
  (
    cd "$d"
    umask 077
    key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null; }
    cert() { # NAME SUBJECT EXTENSIONS
      key "$1"
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' "$3" > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    key ca
    openssl req -x509 -new -key ca.key -subj "/CN=kube-node-ca" -days 3650 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out ca.crt 2>/dev/null
    local server="extendedKeyUsage=serverAuth" client="extendedKeyUsage=clientAuth"
    cert apiserver "/CN=kube-apiserver" "$server
subjectAltName=IP:$NODE_IP,IP:127.0.0.1,IP:$SVC_IP,DNS:localhost,DNS:$NODE_NAME,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert kubelet-server "/CN=$NODE_NAME" "$server
subjectAltName=IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE_NAME,DNS:localhost"
    cert admin "/O=system:masters/CN=kubernetes-admin" "$client"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
    cert controller-manager "/CN=system:kube-controller-manager" "$client"
    cert scheduler "/CN=system:kube-scheduler" "$client"
    cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
    cert kube-proxy "/CN=system:kube-proxy" "$client"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    openssl rand -hex 24 > admin.token
    echo "$(cat admin.token),admin,admin-uid,system:masters" > tokens.csv
    chmod 644 ca.crt
  )
}

kubeconfig() { # STATE NAME
  cat > "$1/$2.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority: $1/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $1/pki/$2.crt
    client-key: $1/pki/$2.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
KC
}

# --- the images: pause from $LK_KUBE_NODE/pause, busybox from the host's static busybox -----
images() { # STATE
  local s=$1 r
  mkdir -p "$s/images" "$s/rootfs/pause"
  cp "$LK_KUBE_NODE/pause" "$s/rootfs/pause/pause"
  python3 "$HERE/mkimage.py" --rootfs "$s/rootfs/pause" --tag registry.k8s.io/pause:3.10 \
    --entrypoint /pause --user 65535:65535 "$s/images/pause.tar" >/dev/null
  r=$s/rootfs/busybox
  mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root"
  chmod 1777 "$r/tmp"
  cp "$BUSYBOX" "$r/bin/busybox"
  local a
  for a in $("$BUSYBOX" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\nnonroot:x:65532:65532:nonroot:/:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n' > "$r/etc/group"
  python3 "$HERE/mkimage.py" --rootfs "$r" --tag localhost/busybox:1.35 --cmd sh "$s/images/busybox.tar" >/dev/null
  rm -rf "$s/rootfs"
}

start() { # NAME CMD...: in the background, in a session of its own, with its log and pid file
  local name=$1; shift
  setsid "$@" > "$S/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$S/pids/$name.pid"
}
alive() { local p; p=$(cat "$S/pids/$1.pid"); [ -e "/proc/$p" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$p/stat"; }
wait_for() { # NAME SECONDS CMD...: poll CMD until it succeeds, while NAME runs
  local name=$1 t=$2 i; shift 2
  for ((i = 0; i < t * 10; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    alive "$name" || { tail -20 "$S/logs/$name.log" >&2; die "$name exited"; }
    sleep 0.1
  done
  tail -20 "$S/logs/$name.log" >&2
  die "$name not ready after ${t}s"
}

# What the components change on the host, noted at every start; `down` puts it back.
baseline() {
  sysctl -a 2>/dev/null | grep -E '^(net\.ipv4\.(ip_forward|conf\.[a-z0-9_]+\.(route_localnet|forwarding|rp_filter))|net\.ipv6\.conf\.(all|default)\.forwarding|net\.bridge\.[a-z0-9_-]+|net\.netfilter\.nf_conntrack_(max|tcp_timeout_established|tcp_timeout_close_wait|tcp_be_liberal)|vm\.(overcommit_memory|panic_on_oom)|kernel\.(panic|panic_on_oops|keys\.root_maxkeys|keys\.root_maxbytes)) =' \
    > "$S/baseline/sysctl" || true
  iptables-save > "$S/baseline/iptables" 2>/dev/null || true
  ip6tables-save > "$S/baseline/ip6tables" 2>/dev/null || true
  local d
  for d in /var/lib/cni /var/log/containers /var/log/pods /var/lib/kubelet /etc/cni /opt/cni /run/netns /var/run/netns /usr/libexec/kubernetes; do
    if [ -e "$d" ]; then echo "$d"; fi
  done > "$S/baseline/paths-present"
}

# The node IP sits on a bridge with no ports (kernels without the `dummy` driver have
# bridges), which also sinks the service range: ClusterIPs are DNATed by kube-proxy
# before routing, and whatever is not goes nowhere instead of out by the default route.
host_network() {
  ip link add $NODE_IF type bridge
  ip addr replace "$NODE_IP/32" dev $NODE_IF
  ip link set $NODE_IF up
  ip route replace "$SERVICE_CIDR" dev $NODE_IF
  # The bridge plugin turns ip_forward on: Pods are forwarded back into the bridge only.
  iptables -I FORWARD 1 -i $BRIDGE ! -o $BRIDGE -m comment --comment kube-node-guard -j DROP
}

start_etcd() {
  local data
  data=/dev/shm/kube-etcd.$(echo -n "$S" | sha1sum | cut -c1-12)
  echo "$data" > "$S/etcd-data-dir"
  rm -rf "$data"
  local v
  for v in $(env | grep -o '^ETCD_[A-Z_]*'); do unset "$v"; done
  start etcd etcd --name e1 --data-dir "$data" \
    --listen-client-urls http://127.0.0.1:$ETCD_PORT --advertise-client-urls http://127.0.0.1:$ETCD_PORT \
    --listen-peer-urls http://127.0.0.1:$ETCD_PEER_PORT --initial-advertise-peer-urls http://127.0.0.1:$ETCD_PEER_PORT \
    --initial-cluster e1=http://127.0.0.1:$ETCD_PEER_PORT --initial-cluster-state new \
    --heartbeat-interval 100 --election-timeout 1000 --logger zap --log-level warn
  wait_for etcd 20 curl -sf http://127.0.0.1:$ETCD_PORT/health
}

start_apiserver() {
  local p=$S/pki
  # The audit log: every request of a service account outside kube-system, with its
  # user and the Pod its token is bound to.
  cat > "$S/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: ["system:serviceaccounts:kube-system"]
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
POLICY
  # shellcheck disable=SC2086
  start kube-apiserver "$LK_KUBE_NODE/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:$ETCD_PORT \
    --bind-address=$NODE_IP --advertise-address=$NODE_IP --secure-port=$API_PORT \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --service-cluster-ip-range=$SERVICE_CIDR \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --token-auth-file="$p/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,NodeRestriction,DefaultTolerationSeconds,PodSecurity,TaintNodesByCondition,Priority,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota \
    --allow-privileged=true --profiling=false \
    --audit-policy-file="$S/audit-policy.yaml" --audit-log-path="$S/logs/audit.log" \
    --cert-dir="$S/apiserver-certs" \
    ${APISERVER_EXTRA_ARGS:-}
  wait_for kube-apiserver 120 curl -sf --cacert "$p/ca.crt" https://$NODE_IP:$API_PORT/readyz
}

start_controllers() {
  local p=$S/pki
  start kube-controller-manager "$LK_KUBE_NODE/kube-controller-manager" \
    --kubeconfig="$S/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$S/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$S/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10257 --cert-dir="$S/kcm-certs" \
    --controllers='*' --use-service-account-credentials=true \
    --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
    --flex-volume-plugin-dir="$S/kcm-flexvolume" \
    --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
    --service-cluster-ip-range=$SERVICE_CIDR --leader-elect=false --profiling=false
  start kube-scheduler "$LK_KUBE_NODE/kube-scheduler" \
    --kubeconfig="$S/scheduler.kubeconfig" \
    --authentication-kubeconfig="$S/scheduler.kubeconfig" \
    --authorization-kubeconfig="$S/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10259 --cert-dir="$S/scheduler-certs" \
    --leader-elect=false --profiling=false
}

start_containerd() {
  # The CNI configuration first, so that the CRI plugin finds a network at once.
  cat > "$S/cni/net.d/10-kube-bridge.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "kube-bridge",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GW"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$S/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
  local c=$S/containerd
  mkdir -p "$c/root" "$c/state" "$c/runc"
  # restrict_oom_score_adj: without CAP_SYS_RESOURCE runc cannot set the negative
  # oom_score_adj the kubelet asks for the sandbox; this clamps it to containerd's own.
  cat > "$c/config.toml" <<TOML
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = ""
[debug]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$S/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$c/runc"
TOML
  start containerd containerd --config "$c/config.toml"
  wait_for containerd 30 ctr --address "$c/containerd.sock" version
  local img
  # shellcheck disable=SC2086
  for img in "$S"/images/*.tar ${IMAGES:-}; do
    ctr --address "$c/containerd.sock" -n k8s.io images import "$img" >> "$S/logs/image-import.log" 2>&1 ||
      die "import of $img failed: $(tail -3 "$S/logs/image-import.log")"
  done
}

start_kubelet() {
  local p=$S/pki
  cat > "$S/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $p/kubelet-server.crt
tlsPrivateKeyFile: $p/kubelet-server.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $p/ca.crt}
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$S/containerd/containerd.sock
podLogsDir: $S/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
protectKernelDefaults: false
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
YAML
  start kubelet "$LK_KUBE_NODE/kubelet" --config="$S/kubelet-config.yaml" \
    --kubeconfig="$S/kubelet.kubeconfig" --hostname-override=$NODE_NAME --node-ip=$NODE_IP \
    --root-dir="$S/kubelet" --cert-dir="$S/kubelet/pki" \
    --volume-plugin-dir="$S/kubelet/volume-plugins" --v=1
}

start_proxy() {
  cat > "$S/kube-proxy-config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $S/kube-proxy.kubeconfig
mode: iptables
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: $POD_CIDR
nodePortAddresses: ["primary"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
  start kube-proxy "$LK_KUBE_NODE/kube-proxy" --config="$S/kube-proxy-config.yaml" --v=1
}

up() {
  preflight
  if [ -d "$S/pids" ] && ls "$S"/pids/*.pid >/dev/null 2>&1; then
    die "$S/pids has pid files: run $0 down $S first"
  fi
  rm -rf "$S"/{logs,containerd,kubelet,pod-logs,cni,kubectl-cache,images}
  mkdir -p "$S"/{logs,pids,baseline,cni/net.d,cni/ipam,kubelet,pod-logs,containerd}
  printf 'BRIDGE=%s\nNODE_IF=%s\nSERVICE_CIDR=%s\nLK_KUBE_NODE=%s\n' \
    $BRIDGE $NODE_IF $SERVICE_CIDR "$LK_KUBE_NODE" > "$S/node.conf"
  baseline
  host_network
  [ -f "$S/pki/ca.crt" ] || pki "$S/pki"
  local c
  for c in admin controller-manager scheduler kubelet kube-proxy; do kubeconfig "$S" $c; done
  images "$S"
  log "network, PKI and images ready"
  start_etcd
  log "etcd ready"
  start_apiserver
  log "kube-apiserver ready (https://$NODE_IP:$API_PORT)"
  start_controllers
  start_containerd
  log "containerd ready, images imported"
  start_kubelet
  start_proxy
  cat > "$S/env" <<ENV
export KUBECONFIG=$S/admin.kubeconfig
export KUBECACHEDIR=$S/kubectl-cache
export KUBE_API_URL=https://$NODE_IP:$API_PORT
export KUBE_CA=$S/pki/ca.crt
export KUBE_TOKEN=$(cat "$S/pki/admin.token")
export KUBE_CONTAINERD_ADDRESS=$S/containerd/containerd.sock
export KUBE_NODE_NAME=$NODE_NAME
export KUBE_SERVICE_IP=$SVC_IP
ENV
  wait_for kubelet 60 curl -sf http://127.0.0.1:10248/healthz
  wait_for kube-proxy 60 curl -sf http://127.0.0.1:10256/healthz
  log "kubelet and kube-proxy healthy"
  if [ "${WAIT_NODE:-1}" = 1 ]; then
    local k="$LK_KUBE_NODE/kubectl --kubeconfig=$S/admin.kubeconfig"
    wait_for kubelet 120 sh -c "KUBECACHEDIR=$S/kubectl-cache $k get node $NODE_NAME -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
    wait_for kube-controller-manager 60 sh -c "KUBECACHEDIR=$S/kubectl-cache $k -n default get serviceaccount default"
    log "node $NODE_NAME Ready"
  fi
}

# --- down ------------------------------------------------------------------------------------
dead() { [ ! -e "/proc/$1" ] || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
kill_wait() { # PID...: SIGKILL, then wait until gone (a zombie counts as gone)
  local p i
  for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "$@"; do for ((i = 0; i < 50; i++)); do dead "$p" && break; sleep 0.1; done; done
}
pod_pids() {
  cat /sys/fs/cgroup/pids/kubepods/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/cgroup.procs \
    /sys/fs/cgroup/pids/kubepods/*/*/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/*/*/cgroup.procs 2>/dev/null || true
}

stop_daemons() {
  local n f
  for n in kubelet kube-proxy kube-scheduler kube-controller-manager kube-apiserver; do
    f=$S/pids/$n.pid
    if [ -f "$f" ]; then kill_wait "$(cat "$f")"; rm -f "$f"; fi
  done
}

# Pod processes (the shims are in /kubepods too), runc's state, the shims and their
# sockets (containerd 1.6 puts them in /run/containerd/s/ whatever its state dir is).
stop_pods() {
  local c=$S/containerd shims="" socks="" d cmd ns id pids
  for d in /proc/[0-9]*; do
    cmd=$( { tr '\0' ' ' < "$d/cmdline"; } 2>/dev/null) || continue
    case "$cmd" in *"-address $c/containerd.sock "*) ;; *) continue ;; esac
    shims="$shims ${d#/proc/}"
    ns=$(echo "$cmd" | sed -n 's/.* -namespace \([^ ]*\) .*/\1/p')
    id=$(echo "$cmd" | sed -n 's/.* -id \([^ ]*\) .*/\1/p')
    [ -n "$ns" ] && [ -n "$id" ] &&
      socks="$socks /run/containerd/s/$(echo -n "$c/containerd.sock/$ns/$id" | sha256sum | cut -c1-64)"
  done
  for _ in 1 2 3; do
    pids=$(pod_pids)
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    kill_wait $pids
  done
  [ -z "$(pod_pids)" ] || log "WARNING: processes left in /kubepods: $(pod_pids | tr '\n' ' ')"
  if [ -d "$c/runc/k8s.io" ]; then
    for id in $(runc --root "$c/runc/k8s.io" list -q 2>/dev/null); do
      runc --root "$c/runc/k8s.io" delete -f "$id" >/dev/null 2>&1 || true
    done
  fi
  # shellcheck disable=SC2086
  [ -z "$shims" ] || kill_wait $shims
  # shellcheck disable=SC2086
  [ -z "$socks" ] || rm -f $socks
  local n f
  for n in containerd etcd; do
    f=$S/pids/$n.pid
    if [ -f "$f" ]; then kill_wait "$(cat "$f")"; rm -f "$f"; fi
  done
}

# Tables absent at start are deleted whole; tables present then lose only the jumps to
# KUBE-*/CNI-* chains, the guard rule and those chains.
restore_tables() { # iptables|ip6tables BASELINE NFT_FAMILY
  local ipt=$1 base=$2 fam=$3 t line ch
  for t in filter nat mangle raw security; do
    if ! grep -q "^\*$t" "$base" 2>/dev/null; then
      if nft list table "$fam" "$t" >/dev/null 2>&1; then
        nft delete table "$fam" "$t"
      elif "$ipt"-save -t $t 2>/dev/null | grep -q '^-A\|^:KUBE\|^:CNI'; then
        $ipt -t $t -F; $ipt -t $t -X
      fi
      continue
    fi
    $ipt -t $t -S 2>/dev/null | grep -E '^-A [A-Z]+ .*(-j (KUBE|CNI)-|kube-node-guard)' |
      grep -vE '^-A (KUBE|CNI)-' | while IFS= read -r line; do
        eval "$ipt -t $t -D ${line#-A }" 2>/dev/null || true
      done
    for ch in $($ipt -t $t -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}'); do
      $ipt -t $t -F "$ch" 2>/dev/null || true
    done
    for ch in $($ipt -t $t -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}'); do
      $ipt -t $t -X "$ch" 2>/dev/null || true
    done
  done
}

restore_host() {
  local mnts m v l h line key val cur d
  for _ in 1 2 3; do
    mnts=$(awk -v s="$S/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r)
    [ -z "$mnts" ] && break
    for m in $mnts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
  for v in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$v" 2>/dev/null || true
  done
  for l in "$BRIDGE" "$NODE_IF"; do ip link del "$l" 2>/dev/null || true; done
  ip route del "$SERVICE_CIDR" 2>/dev/null || true
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h/kubepods" ] && { find "$h/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true; }
    [ -d "$h/kubepods" ] && log "WARNING: could not remove $h/kubepods"
  done
  if [ -f "$S/baseline/sysctl" ]; then
    while IFS= read -r line; do
      key=${line%% = *} val=${line#* = }
      cur=$(sysctl -n "$key" 2>/dev/null) || continue
      [ "$cur" = "$val" ] || sysctl -q -w "$key=$val" >/dev/null 2>&1 || true
    done < "$S/baseline/sysctl"
  fi
  for d in /run/netns /var/run/netns; do # shared with other users of `ip netns`: only if empty
    grep -qx "$d" "$S/baseline/paths-present" 2>/dev/null && continue
    [ -d "$d" ] && [ -z "$(ls -A "$d")" ] || continue
    mountpoint -q "$d" && { umount "$d" 2>/dev/null || true; }
    rmdir "$d" 2>/dev/null || true
  done
  for d in /var/lib/cni /var/log/containers /var/log/pods /var/lib/kubelet /etc/cni /opt/cni /usr/libexec/kubernetes; do
    if ! grep -qx "$d" "$S/baseline/paths-present" 2>/dev/null && [ -e "$d" ] && [ ! -L "$d" ]; then
      rm -rf "$d"
    fi
  done
  [ ! -d /var/log/containers ] || find /var/log/containers -maxdepth 1 -type l -lname "$S/*" -delete
  [ ! -f "$S/etcd-data-dir" ] || rm -rf "$(cat "$S/etcd-data-dir")"
}

down() {
  [ -d "$S" ] || { log "no state dir $S"; return 0; }
  # shellcheck disable=SC1091
  [ -f "$S/node.conf" ] && . "$S/node.conf"
  stop_daemons
  stop_pods
  if [ -n "${LK_KUBE_NODE:-}" ] && [ -x "$LK_KUBE_NODE/kube-proxy" ]; then
    "$LK_KUBE_NODE/kube-proxy" --cleanup --v=0 >/dev/null 2>&1 || true
  fi
  restore_tables iptables "$S/baseline/iptables" ip
  restore_tables ip6tables "$S/baseline/ip6tables" ip6
  restore_host
  if [ "${PURGE:-}" = --purge ]; then rm -rf "$S" || log "WARNING: could not remove all of $S"; fi
  log "down"
}

[ $# -ge 2 ] || usage
S=$(realpath -m "$2")
case $1 in
  up) [ $# -eq 2 ] || usage; up ;;
  down) PURGE=${3:-}; set +e; down ;;
  *) usage ;;
esac
