# mlxfleet developer entry points. CI runs `make check` and `make test` (see .ci/run).
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
NODES ?= 50
DEPLOYMENTS ?= 100
BENCH_ARGS ?=
DIST ?= dist
REGISTRY ?= 127.0.0.1:5000

.PHONY: install check lint format typecheck contracts docs-check crds crds-check manifests manifests-check \
        alerts-check tools test test-fast test-slow test-faults cluster-up cluster-up-bare \
        cluster-down control-plane demo demo-down bench bench-preemption bench-embed bench-scale \
        bench-report report-sample clean dist image release-local actionlint

$(STAMP): pyproject.toml
	scripts/install-system-deps.sh
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=25.1"
	$(BIN)/python -m pip install -q -e ".[operator,agent,gateway]" --group dev
	@touch $(STAMP)

install: $(STAMP)  ## create .venv and install mlxfleet editable with dev tools (idempotent)

check: $(STAMP) lint typecheck contracts crds-check manifests-check docs-check actionlint alerts-check  ## everything CI checks besides tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)  ## import-linter contracts, and no circle between packages (tests/support/pkgcircles.py)
	$(BIN)/lint-imports
	$(BIN)/python -m tests.support.pkgcircles

docs-check: $(STAMP)  ## every flag, make target, command, module path and reason the docs name exists
	$(BIN)/python -m tests.support.docscheck

crds: $(STAMP)  ## regenerate crds/ from the pydantic models (and the chart's copies)
	$(BIN)/mlxfleet crds --out crds
	scripts/manifests.sh

crds-check: $(STAMP)
	$(BIN)/mlxfleet crds --check --out crds

manifests:  ## regenerate manifests/base + cronjobs from charts/mlxfleet, and the chart's copies
	scripts/manifests.sh

manifests-check:
	scripts/manifests.sh --check

actionlint:  ## the GitHub Actions workflows (.github/workflows), by actionlint built from Go modules
	"$$(scripts/build-tools.sh actionlint)" -color=false

dist: $(STAMP)  ## wheel + sdist in $(DIST)/ (python -m build), checked by `twine check --strict`
	scripts/dist.sh "$(DIST)"

image: dist  ## operator + gateway OCI images in $(DIST)/images/ from Debian packages and the wheel (root, no daemon)
	scripts/build-image.sh "$(DIST)" operator gateway

release-local: image tools  ## push both images and the chart (OCI) to $(REGISTRY); starts a local registry when none answers
	scripts/release-local.sh "$(DIST)" "$(REGISTRY)"

alerts-check: $(STAMP)  ## promtool check + test of the alert rules (tests/alerts/rules_test.yaml)
	scripts/alerts.sh

control-plane: $(STAMP)  ## build (once, cached) etcd + kube-apiserver
	scripts/build-control-plane.sh

tools:  ## build (once, cached) helm and the kstatus checker (Flux's status logic); says where
	@helm=$$(scripts/build-tools.sh helm) && echo "helm: $$helm" && \
	  echo "  on your PATH: export PATH=\"$$(dirname $$helm):\$$PATH\""
	@echo "kstatus: $$(scripts/build-tools.sh kstatus)"
	@echo "promtool: $$(scripts/build-tools.sh promtool)"

test: $(STAMP) control-plane tools  ## fast suites, then the fault scenarios, then the slow ones
	$(BIN)/pytest -m "not slow and not faults" $(PYTEST_ARGS)
	$(BIN)/pytest -m "faults and not slow" $(PYTEST_ARGS)
	$(BIN)/pytest -m "slow" $(PYTEST_ARGS)

test-faults: $(STAMP) control-plane  ## the fault-injection scenarios only (tests/faults, root)
	$(BIN)/pytest -m "faults" $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow and not cluster and not mlx and not s3 and not tools" $(PYTEST_ARGS)

cluster-up: $(STAMP) control-plane  ## start etcd + kube-apiserver on loopback; writes .dev/kubeconfig
	$(BIN)/mlxfleet dev cluster-up

cluster-up-bare: $(STAMP) control-plane  ## the same with nothing installed: rehearse the Helm quickstart
	$(BIN)/mlxfleet dev cluster-up --bare

cluster-down: $(STAMP)
	$(BIN)/mlxfleet dev cluster-down

demo: $(STAMP) control-plane  ## the one-command local demo
	$(BIN)/mlxfleet dev demo

demo-down: $(STAMP)
	$(BIN)/mlxfleet dev demo-down

bench: $(STAMP) control-plane  ## data-plane, swap, gateway (and its translated APIs), peer-copy, SwapPlan-prefetch, cold-start and preemption benchmarks (each against its baseline)
	$(BIN)/python -m benchmarks.agent_bench
	$(BIN)/python -m benchmarks.gateway_bench
	$(BIN)/python -m benchmarks.dialects_bench
	$(BIN)/python -m benchmarks.peer_bench
	$(BIN)/python -m benchmarks.prefetch_bench
	$(BIN)/python -m benchmarks.coldstart_bench
	$(BIN)/python -m benchmarks.preemption_bench

bench-preemption: $(STAMP) control-plane  ## higher-priority apply -> Ready with preemption vs on an empty Mac
	$(BIN)/python -m benchmarks.preemption_bench $(BENCH_ARGS)

bench-embed: $(STAMP)  ## embeddings throughput through the agent vs the mlx-embed engine directly
	$(BIN)/python -m benchmarks.embed_bench

bench-scale: $(STAMP) control-plane  ## operator vs NODES hollow Macs x DEPLOYMENTS (+ BENCH_ARGS)
	$(BIN)/python -m benchmarks.scale --nodes $(NODES) --deployments $(DEPLOYMENTS) $(BENCH_ARGS)

bench-report: $(STAMP)  ## monthly report over a generated month of NODES Macs (real S3 server)
	$(BIN)/python -m benchmarks.report_bench --nodes $(NODES) $(BENCH_ARGS)

report-sample: $(STAMP)  ## sample weekly report + monthly executive PDF into out/
	$(BIN)/mlxfleet report sample --out out/reports

clean:
	rm -rf $(VENV) .dev .mypy_cache .ruff_cache .pytest_cache
