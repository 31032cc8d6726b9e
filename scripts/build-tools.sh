#!/usr/bin/env bash
# Build (once) the Go tools the chart and GitOps checks run, from the Go module proxy, cached
# outside the repo keyed by version (the sibling of build-control-plane.sh).
#
#   scripts/build-tools.sh helm       # prints the path of the real helm binary
#   scripts/build-tools.sh kstatus    # prints the path of scripts/kstatus built on cli-utils
#   scripts/build-tools.sh prometheus-crds   # prints the folder of the Prometheus Operator's CRDs
#   scripts/build-tools.sh flux-crds         # prints the folder of Flux's Kustomization/GitRepository CRDs
#   scripts/build-tools.sh crane      # go-containerregistry's crane (push, digests, `registry serve`)
#   scripts/build-tools.sh umoci      # umoci: assembles OCI images from root filesystems, no daemon
#   scripts/build-tools.sh actionlint # the GitHub Actions workflow checker (`make check`)
#   scripts/build-tools.sh promtool   # Prometheus's promtool (`promtool test rules` on the alert rules)
#   scripts/build-tools.sh prometheus # a real Prometheus server (the scrape test over the test fleet)
#
# Env: MLXFLEET_CACHE (default ~/.cache/mlxfleet), HELM_VERSION, CLI_UTILS_VERSION,
# PROMETHEUS_OPERATOR_VERSION, FLUX_KUSTOMIZE_CONTROLLER_VERSION, FLUX_SOURCE_CONTROLLER_VERSION,
# CRANE_VERSION, UMOCI_VERSION, ACTIONLINT_VERSION,
# PROMETHEUS_VERSION (the Go module version: v0.316.0 is Prometheus 3.16.0).
# helm: `go install helm.sh/helm/v3/cmd/helm@VERSION` with the ldflags helm's own Makefile sets
# (its version, and the Kubernetes version `helm lint`/`template` assume without a cluster).
# kstatus: scripts/kstatus/main.go in a throwaway module requiring sigs.k8s.io/cli-utils, whose
# pkg/kstatus/status.Compute is the function Flux's health checks call; keyed by the source's hash.
# prometheus-crds: the real ServiceMonitor/PodMonitor/PrometheusRule CRDs, from the prometheus-operator module
# (`go mod download`), so chart tests install the monitors against the schema users have.
# flux-crds: Flux's own CRDs from its controllers' modules, to validate manifests/flux server-side.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CLI_UTILS_VERSION="${CLI_UTILS_VERSION:-v0.37.2}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
FLUX_KUSTOMIZE_CONTROLLER_VERSION="${FLUX_KUSTOMIZE_CONTROLLER_VERSION:-v1.9.0}"
FLUX_SOURCE_CONTROLLER_VERSION="${FLUX_SOURCE_CONTROLLER_VERSION:-v1.9.0}"
CRANE_VERSION="${CRANE_VERSION:-v0.22.1}"
UMOCI_VERSION="${UMOCI_VERSION:-v0.6.0}"
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
CACHE="${MLXFLEET_CACHE:-$HOME/.cache/mlxfleet}"
HERE="$(cd "$(dirname "$0")" && pwd)"
log() { echo "[tools] $*" >&2; }

go_env() {
  command -v go >/dev/null || { log "the go toolchain is required to build $1"; exit 1; }
  export GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
  export GOPATH="${GOPATH:-$CACHE/gopath}" GOCACHE="${GOCACHE:-$CACHE/gocache}"
}

build_helm() {
  local out="$CACHE/tools/helm-${HELM_VERSION}"
  if [[ -x "$out/helm" && -f "$out/.complete" ]]; then echo "$out/helm"; return; fi
  go_env helm
  mkdir -p "$out"
  log "building helm $HELM_VERSION (cold: about 2 minutes on 2 cores)"
  local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=37"
  done
  GOBIN="$out" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
  touch "$out/.complete"
  echo "$out/helm"
}

build_kstatus() {
  local src="$HERE/kstatus/main.go"
  local key
  key=$(sha256sum "$src" | cut -c1-12)
  local out="$CACHE/tools/kstatus-cli-utils-${CLI_UTILS_VERSION}-${key}"
  if [[ -x "$out/kstatus" && -f "$out/.complete" ]]; then echo "$out/kstatus"; return; fi
  go_env kstatus
  mkdir -p "$out"
  log "building kstatus on sigs.k8s.io/cli-utils $CLI_UTILS_VERSION"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cp "$src" "$work/main.go"
  (cd "$work" && go mod init kstatus >/dev/null 2>&1 \
     && go get "sigs.k8s.io/cli-utils@${CLI_UTILS_VERSION}" >&2 \
     && go mod tidy >&2 \
     && go build -trimpath -ldflags "-s -w" -o "$out/kstatus.tmp" . >&2)
  mv "$out/kstatus.tmp" "$out/kstatus"
  touch "$out/.complete"
  echo "$out/kstatus"
}

go_tool() {  # go_tool NAME VERSION PACKAGE [LDFLAGS]: `go install PACKAGE@VERSION`, cached by version
  local name=$1 version=$2 package=$3 ldflags="-s -w ${4:-}"
  local out="$CACHE/tools/${name}-${version}"
  if [[ -x "$out/$name" && -f "$out/.complete" ]]; then echo "$out/$name"; return; fi
  go_env "$name"
  mkdir -p "$out"
  log "building $name $version"
  GOBIN="$out" go install -trimpath -ldflags "$ldflags" "${package}@${version}" >&2
  touch "$out/.complete"
  echo "$out/$name"
}

build_umoci() {  # umoci's go.mod has a replace directive, so `go install pkg@version` refuses it:
  # build it in a throwaway module that requires umoci and repeats umoci's own replace lines.
  local out="$CACHE/tools/umoci-${UMOCI_VERSION}"
  if [[ -x "$out/umoci" && -f "$out/.complete" ]]; then echo "$out/umoci"; return; fi
  go_env umoci
  mkdir -p "$out"
  log "building umoci $UMOCI_VERSION"
  local work dir
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  dir=$(module_dir "github.com/opencontainers/umoci@${UMOCI_VERSION}")
  (cd "$work" && go mod init umoci-build >/dev/null 2>&1 \
     && go mod edit -require "github.com/opencontainers/umoci@${UMOCI_VERSION}" \
     && grep -E '^replace ' "$dir/go.mod" >> go.mod \
     && printf 'package main\n\nimport _ "github.com/opencontainers/umoci/cmd/umoci"\n' > tools.go \
     && go mod tidy >&2 \
     && go build -trimpath -ldflags "-s -w -X main.version=${UMOCI_VERSION#v}" \
          -o "$out/umoci.tmp" github.com/opencontainers/umoci/cmd/umoci >&2)
  mv "$out/umoci.tmp" "$out/umoci"
  touch "$out/.complete"
  echo "$out/umoci"
}

prometheus_ldflags() {  # what Prometheus's own build sets, so `--version` tells the truth
  local v="${PROMETHEUS_VERSION#v0.}"  # v0.316.0 -> 316.0 -> 3.16.0
  v="${v:0:1}.${v:1}"
  echo "-X github.com/prometheus/common/version.Version=${v} -X github.com/prometheus/common/version.Branch=release"
}

module_dir() {  # module_dir MODULE@VERSION: where `go mod download` put its files
  go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

PROMETHEUS_CRDS=(servicemonitors podmonitors prometheusrules)

prometheus_crds() {
  local out="$CACHE/tools/prometheus-operator-crds-${PROMETHEUS_OPERATOR_VERSION}" have=1 crd
  for crd in "${PROMETHEUS_CRDS[@]}"; do [[ -f "$out/monitoring.coreos.com_$crd.yaml" ]] || have=0; done
  if [[ -f "$out/.complete" ]] && (( have )); then echo "$out"; return; fi
  go_env prometheus-crds
  log "downloading prometheus-operator $PROMETHEUS_OPERATOR_VERSION (its CRDs)"
  local dir
  dir=$(module_dir "github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}")
  mkdir -p "$out"
  for crd in "${PROMETHEUS_CRDS[@]}"; do
    cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$out/"
  done
  chmod u+w "$out"/*.yaml
  touch "$out/.complete"
  echo "$out"
}

flux_crds() {
  local out="$CACHE/tools/flux-crds-kc-${FLUX_KUSTOMIZE_CONTROLLER_VERSION}-sc-${FLUX_SOURCE_CONTROLLER_VERSION}"
  if [[ -f "$out/.complete" ]]; then echo "$out"; return; fi
  go_env flux-crds
  log "downloading Flux kustomize-controller and source-controller (their CRDs)"
  local kc sc
  kc=$(module_dir "github.com/fluxcd/kustomize-controller@${FLUX_KUSTOMIZE_CONTROLLER_VERSION}")
  sc=$(module_dir "github.com/fluxcd/source-controller@${FLUX_SOURCE_CONTROLLER_VERSION}")
  mkdir -p "$out"
  cp "$kc"/config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml \
     "$sc"/config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml "$out/"
  chmod u+w "$out"/*.yaml
  touch "$out/.complete"
  echo "$out"
}

case "${1:-}" in
  helm) build_helm ;;
  kstatus) build_kstatus ;;
  prometheus-crds) prometheus_crds ;;
  flux-crds) flux_crds ;;
  crane) go_tool crane "$CRANE_VERSION" github.com/google/go-containerregistry/cmd/crane ;;
  umoci) build_umoci ;;
  actionlint) go_tool actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint/cmd/actionlint \
                "-X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION}" ;;
  promtool) go_tool promtool "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/promtool \
              "$(prometheus_ldflags)" ;;
  prometheus) go_tool prometheus "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/prometheus \
                "$(prometheus_ldflags)" ;;
  *) echo "usage: $0 helm|kstatus|prometheus-crds|flux-crds|crane|umoci|actionlint|promtool|prometheus" >&2; exit 2 ;;
esac
