#!/usr/bin/env bash
# Prometheus checks of the chart's monitoring files (run by `make test`):
#   1. promtool check rules  charts/leasekeeper/files/alerts.yaml   (syntax, PromQL, templates)
#   2. promtool test rules   tests/prometheus/alerts_test.yaml       (each alert fires on its
#      synthetic series and stays quiet on the others)
#   3. tests/prometheus/check_dashboard.py: every PromQL expression of
#      charts/leasekeeper/files/dashboard.json through `promtool check rules`, the
#      datasource and election variables, and only exported metrics in both files.
# Needs promtool (Debian package prometheus; scripts/install-test-deps installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
promtool="${PROMTOOL:-promtool}"
if ! command -v "$promtool" >/dev/null 2>&1; then
  echo "tests/prometheus/check.sh: promtool not found (apt-get install prometheus, or bash scripts/install-test-deps)" >&2
  exit 1
fi
echo "== promtool check rules charts/leasekeeper/files/alerts.yaml"
"$promtool" check rules charts/leasekeeper/files/alerts.yaml
echo "== promtool test rules tests/prometheus/alerts_test.yaml"
"$promtool" test rules tests/prometheus/alerts_test.yaml
echo "== tests/prometheus/check_dashboard.py"
python3 tests/prometheus/check_dashboard.py --promtool "$promtool"
echo "prometheus checks: alerts, alert tests and dashboard passed"
