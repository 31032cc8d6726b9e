#!/usr/bin/env bash
# `make image`: the operator and gateway OCI images, built without a container daemon from what
# this machine can reach: Debian packages (mmdebstrap) and the wheel of `make dist` (with its
# dependencies from PyPI), assembled by umoci (scripts/build-tools.sh) into OCI image layouts:
#
#   DIST/images/operator/   mlxfleet-operator (entrypoint), `mlxfleet report` for the CronJobs:
#                           python3.11 + pango/harfbuzz + DejaVu fonts + mlxfleet[operator]
#   DIST/images/gateway/    mlxfleet-gateway: python3.11 + mlxfleet[gateway] (no PDF stack,
#                           no pyarrow, no kopf)
# Both have libstdc++6: manylinux wheels (pyarrow, zopfli, frozenlist) expect the system's; the
# operator has tzdata (the reports' time zones: pyarrow reads the system's zoneinfo).
#   DIST/images/sizes.json  per image: layers, bytes pulled (compressed), bytes on disk
#
#   scripts/build-image.sh DIST NAME...      # NAME: operator, gateway
#
# Each image has two layers. The Debian layer is the packages of the image's list, extracted
# (mmdebstrap --variant=extract: no shell, no apt, no dpkg, no perl), plus /etc/passwd and
# /etc/group with the user 65532 (mlxfleet) the chart runs it as, and one dpkg status file per
# package in /var/lib/dpkg/status.d (what image scanners read). It is cached outside the repo,
# keyed by the suite, mirrors and package list: ~/.cache/mlxfleet/images/rootfs-*.tar (a cold
# build takes about a minute). The application layer is /opt/mlxfleet, a virtual environment of
# the image's own python3.11 with the wheel and its dependencies installed by pip inside a chroot
# from wheels downloaded here (no network in the chroot, pip itself not left in the image).
# Config: user 65532:65532, entrypoint /opt/mlxfleet/bin/<program>, PATH with /opt/mlxfleet/bin
# (the chart names the program as its command), OCI labels with the version and the git revision.
# Timestamps come from SOURCE_DATE_EPOCH (default: the last commit), so two builds of one commit
# give the same application layer.
#
# Runs as root (it extracts packages with their owners and chroots). Env: MLXFLEET_CACHE,
# DEBIAN_SUITE (bookworm: its python3.11 is the one CI tests), DEBIAN_MIRROR,
# DEBIAN_SECURITY_MIRROR, IMAGE_SOURCE (the org.opencontainers.image.source label).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST="$(realpath -m "${1:?usage: $0 DIST operator|gateway ...}")"
shift
CACHE="${MLXFLEET_CACHE:-$HOME/.cache/mlxfleet}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
SOURCE="${IMAGE_SOURCE:-https://github.com/mlxfleet/mlxfleet}"
PY="${PY_BIN:-$ROOT/.venv/bin/python}"
RECIPE=2  # bump when the base layer's post-processing below changes (part of its cache key)
APP_UID=65532
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/operator/src/mlxfleet_operator/__init__.py")
WHEEL="$DIST/mlxfleet-$VERSION-py3-none-any.whl"
REVISION=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}"
CREATED=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)
log() { echo "[image] $*" >&2; }

[[ -f "$WHEEL" ]] || { log "no $WHEEL: run \`make dist\` first"; exit 1; }
[[ $(id -u) -eq 0 ]] || { log "run as root: packages are extracted with their owners, pip runs in a chroot"; exit 1; }
command -v mmdebstrap >/dev/null || { log "mmdebstrap is missing: scripts/install-system-deps.sh installs it"; exit 1; }
UMOCI="$("$ROOT/scripts/build-tools.sh" umoci)"

recipe() {  # sets EXTRA, PACKAGES, PROGRAM, DESCRIPTION for image $1
  case "$1" in
    operator)
      EXTRA=operator PROGRAM=mlxfleet-operator
      PACKAGES=(python3.11 libstdc++6 tzdata libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0
                fonts-dejavu-core)
      DESCRIPTION="mlxfleet operator (kopf; Lease leader election) and the report CronJobs (mlxfleet report)" ;;
    gateway)
      EXTRA=gateway PROGRAM=mlxfleet-gateway
      PACKAGES=(python3.11 libstdc++6)
      DESCRIPTION="mlxfleet gateway: the fleet's OpenAI-compatible front door" ;;
    *) log "unknown image $1 (operator, gateway)"; exit 2 ;;
  esac
}

deterministic_tar() {  # deterministic_tar DIR OUT PATHS...: owners kept, times clamped, sorted
  local dir=$1 out=$2
  shift 2
  tar -C "$dir" --sort=name --numeric-owner --mtime="@$EPOCH" --clamp-mtime --format=pax \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -cf "$out" "$@"
}

base_layer() {  # prints the cached Debian layer (a tar) of PACKAGES, building it when missing
  local key out work
  key=$(printf '%s\n' "$RECIPE" "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "${PACKAGES[@]}" | sha256sum | cut -c1-16)
  out="$CACHE/images/rootfs-$SUITE-$key.tar"
  if [[ -f "$out" ]]; then echo "$out"; return; fi
  mkdir -p "$CACHE/images"
  work=$(mktemp -d "$CACHE/images/.rootfs.XXXXXX")
  log "extracting ${PACKAGES[*]} from Debian $SUITE (cold: about a minute)"
  # The extract hook runs while the downloaded .deb files are still there: one dpkg status
  # file per package (as distroless images have), so scanners see what the layer holds.
  mmdebstrap --quiet --variant=extract --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    --extract-hook='mkdir -p "$1/var/lib/dpkg/status.d"; for deb in "$1"/var/cache/apt/archives/*.deb; do
        pkg=$(dpkg-deb -f "$deb" Package); { dpkg-deb -f "$deb" Package; echo "Status: install ok installed";
        dpkg-deb -f "$deb" | grep -v "^Package:"; } > "$1/var/lib/dpkg/status.d/$pkg"; done' \
    "$SUITE" "$work/rootfs" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY_MIRROR $SUITE-security main" >&2
  local r="$work/rootfs"
  # what a runtime needs and extract does not make: mount points, /tmp, the accounts
  rm -rf "$r"/etc/apt "$r"/var/lib/apt "$r"/var/cache/apt "$r"/var/cache/ldconfig "$r"/var/log/* \
    "$r"/usr/share/man "$r"/usr/share/info "$r"/usr/share/lintian "$r"/usr/share/locale \
    "$r"/etc/dpkg "$r"/var/lib/dpkg/status "$r"/var/lib/dpkg/available "$r"/etc/cron.daily \
    "$r"/etc/logrotate.d "$r"/etc/hostname "$r"/etc/resolv.conf
  find "$r/usr/share/doc" -type f ! -name copyright -delete
  find "$r/usr/share/doc" -type d -empty -delete
  mkdir -p "$r"/{proc,sys,dev,run,tmp,home,root,var/tmp,etc/ssl/certs}
  chmod 1777 "$r/tmp" "$r/var/tmp"
  chmod 0700 "$r/root"
  printf '%s\n' "root:x:0:0:root:/root:/usr/sbin/nologin" \
    "mlxfleet:x:$APP_UID:$APP_UID:mlxfleet:/tmp:/usr/sbin/nologin" \
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" >"$r/etc/passwd"
  printf '%s\n' "root:x:0:" "mlxfleet:x:$APP_UID:" "nogroup:x:65534:" >"$r/etc/group"
  chmod 0644 "$r/etc/passwd" "$r/etc/group"
  # the Mozilla CA bundle of the application layer (certifi) where OpenSSL looks for one
  ln -sfn /opt/mlxfleet/lib/python3.11/site-packages/certifi/cacert.pem "$r/etc/ssl/certs/ca-certificates.crt"
  deterministic_tar "$r" "$work/layer.tar" .
  mv "$work/layer.tar" "$out"
  rm -rf "$work"
  echo "$out"
}

app_layer() {  # app_layer BASE OUT: /opt/mlxfleet with mlxfleet[EXTRA] installed by the image's python
  local base=$1 out=$2 work root
  work=$(mktemp -d "${TMPDIR:-/var/tmp}/mlxfleet-image.XXXXXX")
  root="$work/rootfs"
  mkdir -p "$root"
  tar -C "$root" -xf "$base"
  # pip takes --platform literally: every manylinux tag the image's glibc runs, newest first
  local glibc platforms=() minor
  glibc=$(sed -n 's/^Version: \([0-9]*\.[0-9]*\).*/\1/p' "$root/var/lib/dpkg/status.d/libc6")
  for ((minor = ${glibc#*.}; minor >= 5; minor--)); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
  log "downloading the wheels of mlxfleet[$EXTRA] (cp311, glibc $glibc, x86-64)"
  "$PY" -m pip download --quiet --disable-pip-version-check --dest "$root/tmp/wheels" \
    --only-binary=:all: "${platforms[@]}" --python-version 3.11 \
    --implementation cp --abi cp311 "mlxfleet[$EXTRA] @ file://$WHEEL" pip >&2
  local pip_wheel
  pip_wheel=$(cd "$root/tmp/wheels" && ls pip-*.whl)
  log "installing them into /opt/mlxfleet with the image's own python3.11 (chroot, no network)"
  local in_root=(env -i PATH=/usr/bin:/bin HOME=/tmp SOURCE_DATE_EPOCH="$EPOCH" "$(command -v chroot)" "$root")
  "${in_root[@]}" /usr/bin/python3.11 -m venv --without-pip /opt/mlxfleet
  "${in_root[@]}" /opt/mlxfleet/bin/python "/tmp/wheels/$pip_wheel/pip" install --quiet --no-index \
    --find-links /tmp/wheels --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    "mlxfleet[$EXTRA]==$VERSION" >&2
  # What no program of the image imports: the kubernetes client's asyncio twin (kubernetes.aio,
  # 65 MiB with its bytecode; kopf speaks aiohttp itself), test suites, C headers and Cython
  # sources. The image tests start both programs from the result.
  local site="$root/opt/mlxfleet/lib/python3.11/site-packages"
  rm -rf "$site"/kubernetes/aio "$site"/pyarrow/tests "$site"/pyarrow/include "$site"/pyarrow/src "$site"/numpy/*/tests \
    "$site"/numpy/tests "$site"/numpy/_core/include "$site"/pyarrow/*.pyx "$site"/pyarrow/*.pxd
  find "$root/opt/mlxfleet" -name '*.pyi' -delete
  deterministic_tar "$root" "$out" ./opt
  rm -rf "$work"
}

record_size() {  # record_size NAME LAYOUT TAR...: DIST/images/sizes.json gets NAME's figures
  "$PY" - "$DIST/images/sizes.json" "$@" <<'PYEOF'
import json, os, pathlib, sys
out, name, layout, tars = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3]), sys.argv[4:]
def blob(d): return json.loads((layout / "blobs" / d["digest"].replace(":", "/")).read_text())
index = json.loads((layout / "index.json").read_text())
manifest = blob(index["manifests"][0])
sizes = json.loads(out.read_text()) if out.exists() else {}
sizes[name] = {
    "manifestDigest": index["manifests"][0]["digest"],
    "layers": len(manifest["layers"]),
    "compressedBytes": sum(x["size"] for x in manifest["layers"]) + manifest["config"]["size"],
    "uncompressedBytes": sum(os.path.getsize(t) for t in tars),
}
out.write_text(json.dumps(sizes, indent=2, sort_keys=True) + "\n")
print(f"{name}: {sizes[name]['compressedBytes'] / 2**20:.1f} MiB compressed, "
      f"{sizes[name]['uncompressedBytes'] / 2**20:.1f} MiB unpacked", file=sys.stderr)
PYEOF
}

mkdir -p "$DIST/images"
for name in "$@"; do
  recipe "$name"
  start=$(date +%s)
  base=$(base_layer)
  log "$name: building the application layer"
  tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/mlxfleet-layer.XXXXXX")
  app_layer "$base" "$tmp/app.tar"
  layout="$DIST/images/$name"
  rm -rf "$layout"
  "$UMOCI" init --layout "$layout"
  "$UMOCI" new --image "$layout:$VERSION"
  "$UMOCI" raw add-layer --image "$layout:$VERSION" --history.created "$CREATED" \
    --history.created_by "mmdebstrap --variant=extract $SUITE: ${PACKAGES[*]}" "$base"
  "$UMOCI" raw add-layer --image "$layout:$VERSION" --history.created "$CREATED" \
    --history.created_by "pip install mlxfleet[$EXTRA]==$VERSION (/opt/mlxfleet)" "$tmp/app.tar"
  "$UMOCI" config --image "$layout:$VERSION" --no-history --created "$CREATED" \
    --author "mlxfleet" --os linux --architecture amd64 \
    --config.user "$APP_UID:$APP_UID" --config.workingdir /tmp \
    --config.entrypoint "/opt/mlxfleet/bin/$PROGRAM" \
    --config.env "PATH=/opt/mlxfleet/bin:/usr/local/bin:/usr/bin:/bin" \
    --config.env "PYTHONUNBUFFERED=1" --config.env "PYTHONDONTWRITEBYTECODE=1" --config.env "HOME=/tmp" \
    --config.env "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
    --config.label "org.opencontainers.image.title=mlxfleet-$name" \
    --config.label "org.opencontainers.image.description=$DESCRIPTION" \
    --config.label "org.opencontainers.image.version=$VERSION" \
    --config.label "org.opencontainers.image.revision=$REVISION" \
    --config.label "org.opencontainers.image.created=$CREATED" \
    --config.label "org.opencontainers.image.source=$SOURCE" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0" \
    --config.label "org.opencontainers.image.base.name=debian:$SUITE (extracted packages)" \
    --manifest.annotation "org.opencontainers.image.version=$VERSION" \
    --manifest.annotation "org.opencontainers.image.revision=$REVISION"
  "$UMOCI" gc --layout "$layout"
  record_size "$name" "$layout" "$base" "$tmp/app.tar"
  rm -rf "$tmp"
  log "$name: $layout:$VERSION in $(( $(date +%s) - start )) s"
done
