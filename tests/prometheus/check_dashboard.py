#!/usr/bin/env python3
"""Checks the Grafana dashboard charts/leasekeeper/files/dashboard.json (called by
tests/prometheus/check.sh):

1. it is JSON with a `datasource` variable (type datasource, Prometheus) and an
   `election` variable, and every panel and query takes its data source from
   `${datasource}` (none is hard-wired);
2. every PromQL expression in it -- each panel target's `expr`, and the selector inside
   each variable's `label_values(...)` -- is valid: Grafana variables are replaced by
   stand-ins ($__rate_interval and the other built-in intervals by `5m`, the dashboard's
   own variables by `x`; an unknown variable is an error), each expression becomes a
   recording rule in a temporary rule file, and `promtool check rules` parses them;
3. the dashboard and alerts.yaml name only metrics the sidecar exports, as registered in
   src/publish/metrics.rs (counters with `_total`, histograms with `_bucket`, `_sum`,
   `_count`).

Exit code 0 when all holds, 1 otherwise.

    python3 tests/prometheus/check_dashboard.py [--promtool PATH]
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "leasekeeper" / "files" / "dashboard.json"
ALERTS = ROOT / "charts" / "leasekeeper" / "files" / "alerts.yaml"
METRICS_RS = ROOT / "src" / "publish" / "metrics.rs"

# Grafana's built-in variables that stand for a duration in PromQL.
DURATION_BUILTINS = {"__rate_interval", "__interval", "__range", "__auto"}
# $name, ${name}, ${name:format}, [[name]]
VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")
METRIC = re.compile(r"\bleasekeeper_[A-Za-z0-9_]+")


def panels_of(dashboard):
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def exported_metrics():
    """Series names the sidecar exposes, from the registrations in src/publish/metrics.rs."""
    text = METRICS_RS.read_text()
    kinds = {}
    for var, ctor in re.findall(r"let (\w+) = ([^;]+);", text):
        for kind in ("Counter", "Histogram", "Gauge"):
            if kind in ctor:
                kinds[var] = kind
                break
    names = set()
    for name, var in re.findall(r'registry\.register\(\s*"(\w+)",\s*"[^"]*",\s*(\w+)\.clone\(\)', text):
        # client-go's drop-in names are registered without our prefix.
        base = name if name.startswith("leader_election_") else f"leasekeeper_{name}"
        kind = kinds.get(var)
        if kind == "Counter":
            names.add(base + "_total")
        elif kind == "Histogram":
            names |= {base + "_bucket", base + "_sum", base + "_count"}
        elif kind == "Gauge":
            names.add(base)
        else:
            raise SystemExit(f"check_dashboard: cannot tell the type of {base} ({var}) in {METRICS_RS}")
    if not names:
        raise SystemExit(f"check_dashboard: no metric registrations found in {METRICS_RS}")
    return names


def substitute(expr, defined, where, problems):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in DURATION_BUILTINS:
            return "5m"
        if name in defined:
            return "x"
        problems.append(f"{where}: unknown variable ${name} in {expr!r}")
        return "x"

    return VARIABLE.sub(repl, expr)


def collect(dashboard, problems):
    """[(record name, where, original expr, PromQL with stand-ins)]"""
    variables = dashboard.get("templating", {}).get("list", [])
    defined = {v["name"] for v in variables}
    out = []
    for v in variables:
        if v.get("type") != "query":
            continue
        query = v.get("query")
        query = query.get("query", "") if isinstance(query, dict) else (query or "")
        where = f"variable ${v['name']}"
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query) or \
            re.fullmatch(r"\s*query_result\((.*)\)\s*()", query)
        if not m:
            problems.append(f"{where}: query {query!r} is not label_values(selector, label) or query_result(expr)")
            continue
        out.append((f"dashboard:variable_{v['name']}", where, query,
                    substitute(m.group(1), defined - {v["name"]}, where, problems)))
    for panel in panels_of(dashboard):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if not expr:
                continue
            where = f"panel {panel['id']} {panel.get('title')!r} target {target.get('refId')}"
            out.append((f"dashboard:panel_{panel['id']}_{target.get('refId', 'X')}", where, expr,
                        substitute(expr, defined, where, problems)))
    return out


def check_structure(dashboard, problems):
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("no `datasource` variable of type datasource with query prometheus")
    if "election" not in variables or variables["election"].get("type") != "query":
        problems.append("no `election` query variable")
    want = {"type": "prometheus", "uid": "${datasource}"}
    for v in variables.values():
        if v.get("type") == "query" and v.get("datasource") != want:
            problems.append(f"variable ${v['name']}: datasource {v.get('datasource')!r}, not {want}")
    ids = [p.get("id") for p in panels_of(dashboard)]
    if len(ids) != len(set(ids)):
        problems.append(f"panel ids are not unique: {ids}")
    for panel in panels_of(dashboard):
        if panel.get("type") == "row":
            continue
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("datasource") != want:
            problems.append(f"{where}: datasource {panel.get('datasource')!r}, not {want}")
        if not panel.get("targets"):
            problems.append(f"{where}: no query")
        for t in panel.get("targets", []):
            if t.get("datasource", want) != want:
                problems.append(f"{where} target {t.get('refId')}: datasource {t.get('datasource')!r}")


def check_metric_names(exprs, source, exported, problems, notes):
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    for name in sorted(used - exported):
        problems.append(f"{source} uses {name}, which the sidecar does not export "
                        f"(src/publish/metrics.rs has: {', '.join(sorted(exported))})")
    return used


def promtool_check(rules, promtool, problems):
    doc = {"groups": [{"name": "dashboard", "rules": [{"record": r, "expr": e} for r, _w, _o, e in rules]}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "dashboard-rules.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        run = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    if run.returncode != 0:
        where = {r: f"{w}: {o}" for r, w, o, _e in rules}
        detail = (run.stdout + run.stderr).strip()
        named = [f"  {r} = {where[r]}" for r in where if r in detail]
        problems.append("promtool check rules refused dashboard expressions:\n" + detail +
                        ("\n" + "\n".join(named) if named else ""))
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--promtool", default="promtool")
    parser.add_argument("--dashboard", default=str(DASHBOARD))
    args = parser.parse_args()

    problems, notes = [], []
    try:
        dashboard = json.loads(pathlib.Path(args.dashboard).read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"FAIL dashboard: {args.dashboard}: {e}")
        return 1
    check_structure(dashboard, problems)
    rules = collect(dashboard, problems)
    if not rules:
        problems.append("no PromQL expression found")
    exported = exported_metrics()
    used = check_metric_names([o for _r, _w, o, _e in rules], "dashboard.json", exported, problems, notes)
    alert_exprs = [r["expr"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    check_metric_names(alert_exprs, "alerts.yaml", exported, problems, notes)
    if rules:
        promtool_check(rules, args.promtool, problems)

    for text in notes:
        print(f"note: {text}")
    if problems:
        for p in problems:
            print(f"FAIL {p}")
        return 1
    panels = sum(1 for p in panels_of(dashboard) if p.get("type") != "row")
    print(f"ok   dashboard: {len(rules)} PromQL expressions ({panels} panels and the variable queries) "
          f"pass promtool check rules; metrics used: {', '.join(sorted(used))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
