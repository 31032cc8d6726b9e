#!/usr/bin/env bash
# The alert rules, checked and unit-tested with the real promtool (`make alerts-check`, part of
# `make check`): the spec of manifests/monitoring/prometheusrule.yaml (the chart's PrometheusRule
# rendered with its defaults; `make manifests-check` keeps it in step with the chart) becomes a
# Prometheus rule file next to a copy of tests/alerts/rules_test.yaml, then
#   promtool check rules   (syntax, PromQL, templates)
#   promtool test rules    (every alert fires in its scenario, stays silent in the healthy one)
# promtool is built once by scripts/build-tools.sh (cached by version).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
PROMTOOL="$(scripts/build-tools.sh promtool)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$PY" - manifests/monitoring/prometheusrule.yaml >"$WORK/rules.yaml" <<'PY'
import sys

import yaml

with open(sys.argv[1]) as f:
    rule = yaml.safe_load(f)
yaml.safe_dump(rule["spec"], sys.stdout, sort_keys=False, width=1000)
PY
cp tests/alerts/rules_test.yaml "$WORK/"
"$PROMTOOL" check rules "$WORK/rules.yaml"
"$PROMTOOL" test rules "$WORK/rules_test.yaml"
