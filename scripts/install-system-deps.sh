#!/usr/bin/env bash
# System libraries mlxfleet needs beyond Python packages, installed only when missing:
#   - pango and harfbuzz-subset (weasyprint renders the monthly executive PDF and subsets fonts),
#   - poppler-utils (tests read the PDF with pdftotext/pdftoppm),
#   - faketime (libfaketime: the clock-skew fault tests run an agent minutes off the real time),
#   - mmdebstrap (`make image` extracts the images' Debian packages with it),
#   - bubblewrap (the image tests run each image's root file system in a sandbox),
#   - ruby (the Homebrew formula's syntax is checked with `ruby -c`),
#   - prometheus-pushgateway (the report job pushes its delivery outcome there; the Go module
#     proxy does not serve it, Debian does),
#   - chromium (the console's browser test drives Debian's Chromium headless with Playwright;
#     Playwright's own browser download is never used).
# Needs root (or passwordless sudo) and Debian/Ubuntu apt; elsewhere it says what to install.
set -euo pipefail
missing=()
ldconfig -p 2>/dev/null | grep -q 'libpango-1.0.so' || missing+=(libpango-1.0-0 libpangoft2-1.0-0)
command -v pdftotext >/dev/null || missing+=(poppler-utils)
ldconfig -p 2>/dev/null | grep -q 'libharfbuzz-subset.so' || missing+=(libharfbuzz-subset0)
command -v faketime >/dev/null || missing+=(faketime)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v ruby >/dev/null || missing+=(ruby)
command -v prometheus-pushgateway >/dev/null || missing+=(prometheus-pushgateway)
command -v chromium >/dev/null || missing+=(chromium)
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ "$(uname)" == "Darwin" ]]; then
  echo "install with Homebrew: brew install pango poppler libfaketime" >&2; exit 0
fi
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo -n"
if command -v apt-get >/dev/null; then
  echo "[system-deps] installing ${missing[*]}" >&2
  $SUDO apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
else
  echo "[system-deps] please install: ${missing[*]}" >&2
fi
