#!/usr/bin/env bash
# `make release-local`: the release of `make image` pushed to a registry on this machine, for a
# lab cluster (or the tests): both images and the chart, pinned by digest (scripts/publish.sh).
#
#   scripts/release-local.sh DIST [REGISTRY]      # REGISTRY default 127.0.0.1:5000
#
# When nothing answers at REGISTRY (a loopback address), it starts one: go-containerregistry's
# `crane registry serve` (scripts/build-tools.sh crane), storing blobs in .dev/registry/, its
# pid in .dev/registry.pid (stop it with `kill $(cat .dev/registry.pid)`). It prints the
# `helm install oci://...` command of the pushed chart.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST="$(realpath -m "${1:-dist}")"
REGISTRY="${2:-127.0.0.1:5000}"
CRANE="$("$ROOT/scripts/build-tools.sh" crane)"
log() { echo "[release-local] $*" >&2; }

answers() { "$CRANE" catalog "$REGISTRY" >/dev/null 2>&1; }
if ! answers; then
  case "$REGISTRY" in
    127.*:*|localhost:*) ;;
    *) log "$REGISTRY does not answer, and it is not a loopback address this script may start"; exit 1 ;;
  esac
  mkdir -p "$ROOT/.dev/registry"
  log "starting a registry on $REGISTRY (crane registry serve; blobs in .dev/registry)"
  setsid "$CRANE" registry serve --address "$REGISTRY" --disk "$ROOT/.dev/registry" \
    >"$ROOT/.dev/registry.log" 2>&1 < /dev/null &
  echo $! >"$ROOT/.dev/registry.pid"
  for _ in $(seq 50); do answers && break; sleep 0.2; done
  answers || { log "the registry did not start: see .dev/registry.log"; exit 1; }
fi
"$ROOT/scripts/publish.sh" "$DIST" "$REGISTRY/mlxfleet" --plain-http
