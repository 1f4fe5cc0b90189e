#!/usr/bin/env python3
"""Helm for the node suite, through helm-sdkpy (Helm's own Go engine as a library; no
helm binary needed; scripts/install-chart-deps installs it).

    helm.py install   RELEASE CHART --kubeconfig FILE --namespace NS [--values JSON] [--timeout S] [--no-wait]
    helm.py upgrade   RELEASE CHART --kubeconfig FILE --namespace NS [--values JSON] [--timeout S] [--no-wait]
    helm.py uninstall RELEASE       --kubeconfig FILE --namespace NS
    helm.py test      RELEASE       --kubeconfig FILE --namespace NS

A chart whose Chart.yaml lists dependencies with `repository: file://PATH` is installed
from a copy with each such dependency unpacked into its charts/ folder, as `helm
dependency build` would pack it. `install` creates the namespace. Prints the release
(name, namespace, revision, status) as one JSON line; exit 1 with Helm's error on stderr
when the action fails.
"""

import argparse
import asyncio
import json
import pathlib
import shutil
import sys
import tempfile

import yaml


def with_dependencies(chart, into):
    """A copy of `chart` in `into` with its file:// dependencies in charts/."""
    copy = pathlib.Path(into) / chart.name
    shutil.copytree(chart, copy, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    for dep in meta.get("dependencies") or []:
        repo = dep.get("repository", "")
        if not repo.startswith("file://"):
            raise SystemExit(f"{chart}: dependency {dep['name']} is not a file:// chart: {repo}")
        source = (chart / repo[len("file://"):]).resolve()
        shutil.copytree(source, copy / "charts" / dep.get("alias", dep["name"]))
    return copy


def summary(release):
    info = release.get("info", {}) if isinstance(release, dict) else {}
    return {
        "name": release.get("name") if isinstance(release, dict) else None,
        "namespace": release.get("namespace") if isinstance(release, dict) else None,
        "revision": release.get("version") if isinstance(release, dict) else None,
        "status": info.get("status"),
    }


async def act(a):
    import helm_sdkpy as helm

    config = helm.Configuration(namespace=a.namespace, kubeconfig=a.kubeconfig)
    values = json.loads(a.values) if a.values else None
    if a.action in ("install", "upgrade"):
        with tempfile.TemporaryDirectory() as tmp:
            chart = with_dependencies(pathlib.Path(a.chart).resolve(), tmp)
            if a.action == "install":
                result = await helm.Install(config).run(
                    a.release, str(chart), values=values, create_namespace=True,
                    wait=not a.no_wait, timeout=a.timeout)
            else:
                result = await helm.Upgrade(config).run(
                    a.release, str(chart), values=values, wait=not a.no_wait, timeout=a.timeout)
        return summary(result)
    if a.action == "uninstall":
        return await helm.Uninstall(config).run(a.release, wait=True, timeout=a.timeout)
    return await helm.ReleaseTest(config).run(a.release)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["install", "upgrade", "uninstall", "test"])
    p.add_argument("release")
    p.add_argument("chart", nargs="?")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--values", help="the values as one JSON object")
    p.add_argument("--timeout", type=int, default=300, help="seconds")
    p.add_argument("--no-wait", action="store_true", help="return without waiting for readiness")
    a = p.parse_args()
    if a.action in ("install", "upgrade") and not a.chart:
        p.error(f"{a.action} needs a CHART")
    try:
        out = asyncio.run(act(a))
    except Exception as e:  # Helm's errors come as several exception classes
        print(f"helm {a.action} {a.release}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
