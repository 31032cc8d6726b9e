#!/usr/bin/env bash
# Push a release's artefacts to an OCI registry: the two images of `make image` and the Helm
# chart, pinned to the pushed images by digest. `make release-local` runs it against a local
# registry; the release workflow (.github/workflows/release.yml) against ghcr.io.
#
#   scripts/publish.sh DIST PREFIX [--plain-http]
#
#   PREFIX/operator:VERSION and PREFIX/gateway:VERSION   (crane push of DIST/images/*)
#   oci://PREFIX/charts/mlxfleet:VERSION                 (helm package + helm push)
#   DIST/mlxfleet-VERSION.tgz                            the pushed chart
#   DIST/release.json                                    what was pushed, with digests
#
# The chart's values.yaml in the package names PREFIX/operator and PREFIX/gateway with their
# digests, so `helm install oci://PREFIX/charts/mlxfleet --version VERSION` runs exactly the
# images pushed here (repository:tag@digest). Credentials: `crane auth login` / `helm registry
# login` beforehand (the workflow logs both in to ghcr.io); --plain-http for a local registry.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST="$(realpath -m "${1:?usage: $0 DIST PREFIX [--plain-http]}")"
PREFIX="${2:?usage: $0 DIST PREFIX [--plain-http]}"
PLAIN=()
[[ "${3:-}" == "--plain-http" ]] && PLAIN=(--plain-http)
PY="${PY_BIN:-$ROOT/.venv/bin/python}"
CRANE="$("$ROOT/scripts/build-tools.sh" crane)"
HELM="$("$ROOT/scripts/build-tools.sh" helm)"
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/operator/src/mlxfleet_operator/__init__.py")
log() { echo "[publish] $*" >&2; }

declare -A PUSHED
for name in operator gateway; do
  layout="$DIST/images/$name"
  [[ -f "$layout/index.json" ]] || { log "no $layout: run \`make image\` first"; exit 1; }
  ref="$PREFIX/$name:$VERSION"
  log "pushing $ref"
  "$CRANE" push "$layout" "$ref" >/dev/null
  digest=$("$CRANE" digest "$ref")
  PUSHED[$name]="$PREFIX/$name@$digest"
  log "$name: ${PUSHED[$name]}"
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r "$ROOT/charts/mlxfleet" "$stage/mlxfleet"
"$PY" "$ROOT/scripts/release.py" pin-chart "$stage/mlxfleet" \
  --operator "${PUSHED[operator]}" --gateway "${PUSHED[gateway]}"
"$HELM" lint "$stage/mlxfleet" >/dev/null
"$HELM" package "$stage/mlxfleet" --version "$VERSION" --app-version "$VERSION" -d "$DIST" >/dev/null
chart="$DIST/mlxfleet-$VERSION.tgz"
log "pushing the chart to oci://$PREFIX/charts"
pushed=$("$HELM" push "$chart" "oci://$PREFIX/charts" "${PLAIN[@]}" 2>&1) || { echo "$pushed" >&2; exit 1; }
chart_digest=$(sed -n 's/^Digest: //p' <<<"$pushed")
"$PY" - "$DIST/release.json" <<PYEOF
import json, sys
json.dump({
    "version": "$VERSION",
    "images": {"operator": "${PUSHED[operator]}", "gateway": "${PUSHED[gateway]}"},
    "chart": {"ref": "oci://$PREFIX/charts/mlxfleet", "version": "$VERSION", "digest": "$chart_digest"},
}, open(sys.argv[1], "w"), indent=2)
PYEOF
log "chart: oci://$PREFIX/charts/mlxfleet:$VERSION ($chart_digest)"
echo "helm install mlxfleet oci://$PREFIX/charts/mlxfleet --version $VERSION ${PLAIN[*]} --namespace mlxfleet-system --create-namespace"
