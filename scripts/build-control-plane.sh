#!/usr/bin/env bash
# Build (once) the real etcd, kube-apiserver and kubectl binaries that tests and the demo run on
# loopback, from the Go module proxy, cached outside the repo keyed by version.
#
#   scripts/build-control-plane.sh            # prints the directory holding the binaries
#
# Env: MLXFLEET_CACHE (default ~/.cache/mlxfleet), K8S_VERSION, ETCD_VERSION.
# kube-apiserver cannot be `go install`ed (k8s.io/kubernetes uses replace directives), so it is
# built from a throwaway wrapper module that pins every staging module to the matching v0.Y.Z.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE="${MLXFLEET_CACHE:-$HOME/.cache/mlxfleet}"
OUT="$CACHE/control-plane/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}"
log() { echo "[control-plane] $*" >&2; }

if [[ -x "$OUT/kube-apiserver" && -x "$OUT/etcd" && -f "$OUT/.complete" ]]; then
  echo "$OUT"; exit 0
fi
command -v go >/dev/null || { log "the go toolchain is required to build the control plane"; exit 1; }
mkdir -p "$OUT"
export GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
export GOPATH="${GOPATH:-$CACHE/gopath}" GOCACHE="${GOCACHE:-$CACHE/gocache}"
start=$(date +%s)

# --- etcd -------------------------------------------------------------------------------------
if [[ ! -x "$OUT/etcd" ]]; then
  log "building etcd $ETCD_VERSION"
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  (cd "$work" && go mod init etcdwrap >/dev/null 2>&1 \
     && go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2 \
     && go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3 >&2)
  mv "$OUT/etcd.tmp" "$OUT/etcd"
fi

# --- kube-apiserver (and kubectl from the same module) ----------------------------------------
if [[ ! -x "$OUT/kube-apiserver" ]]; then
  log "building kube-apiserver $K8S_VERSION (cold: 10-20 minutes on 2 cores)"
  work=$(mktemp -d)
  minor="${K8S_VERSION#v1.}"          # 37.2
  staging_ver="v0.${minor}"           # v0.37.2
  gomod_json=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}")
  gomod=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' <<<"$gomod_json")
  {
    echo "module k8swrap"
    echo
    grep -E '^go [0-9]' "$gomod" | head -1
    echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo
    grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging/' "$gomod" \
      | awk -v v="$staging_ver" '{print "replace " $1 " => " $1 " " v}'
  } >"$work/go.mod"
  cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
GO
  (cd "$work" && go mod tidy >&2)
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor%%.*}"
    ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$work" && go build -trimpath -tags selinux,notest -ldflags "$ldflags" \
     -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2)
  mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
  rm -rf "$work"
fi
touch "$OUT/.complete"
log "ready in $(( $(date +%s) - start ))s: $OUT"
echo "$OUT"
