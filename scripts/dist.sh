#!/usr/bin/env bash
# `make dist`: the wheel and the sdist of mlxfleet in DIST (default dist/), built the way a
# release builds them (`python -m build`: the sdist first, then the wheel from that sdist, in an
# isolated environment) and checked by `twine check --strict` (metadata and README render).
# Older artefacts of the same name are replaced; other files in DIST are left alone.
#
#   scripts/dist.sh [DIST]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST="$(realpath -m "${1:-dist}")"
PY="${PY_BIN:-$ROOT/.venv/bin/python}"
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/operator/src/mlxfleet_operator/__init__.py")
start=$(date +%s%N)
mkdir -p "$DIST"
rm -f "$DIST/mlxfleet-$VERSION.tar.gz" "$DIST/mlxfleet-$VERSION-py3-none-any.whl"
"$PY" -m build --outdir "$DIST" "$ROOT" >&2
"$PY" -m twine check --strict "$DIST/mlxfleet-$VERSION.tar.gz" "$DIST/mlxfleet-$VERSION-py3-none-any.whl" >&2
(cd "$DIST" && sha256sum "mlxfleet-$VERSION.tar.gz" "mlxfleet-$VERSION-py3-none-any.whl" >"mlxfleet-$VERSION.sha256")
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '[dist] %s/mlxfleet-%s-py3-none-any.whl and .tar.gz in %d.%01d s\n' "$DIST" "$VERSION" \
  $((ms / 1000)) $((ms % 1000 / 100)) >&2
