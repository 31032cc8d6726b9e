"""Release helpers run by scripts/publish.sh and the release workflow (stdlib + PyYAML).

    release.py pin-chart CHART --operator REPO@DIGEST --gateway REPO@DIGEST
        Rewrite a staged copy of charts/mlxfleet so that it pulls the images pushed for this
        release by digest (values.yaml image.repository/digest, gateway.image.repository/digest),
        keeping the file's comments; the result is checked by parsing it.
    release.py formula --version V --sdist-url URL --sdist FILE --wheel-url URL --wheel FILE
                       --resolved REPORT.json [--out FILE]
        The Homebrew formula of the agent (`brew install mlxfleet-agent`): Python 3.11, a virtual
        environment in libexec with the release's wheel and every dependency of
        mlxfleet[agent] as resolved for macOS on Apple Silicon (REPORT.json: `pip install
        --dry-run --report` for that platform), each a resource pinned by its sha256.

Pure functions (`set_value`, `pin_chart_values`, `formula`) are unit-tested; the CLI only reads
and writes files. Called by: scripts/publish.sh, .github/workflows/release.yml, tests/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


class ReleaseError(ValueError):
    """Input a release step cannot use; the message names it."""


def set_value(text: str, path: Sequence[str], value: str) -> str:
    """`text` (a YAML file of block mappings) with the scalar at `path` set to `value`, every
    other line (comments included) unchanged. The key must exist and hold a scalar."""
    lines = text.splitlines(keepends=True)
    stack: list[tuple[int, str]] = []
    for number, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        found = _KEY.match(line.rstrip("\n"))
        if found is None:
            continue
        indent = len(found["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, found["key"]))
        if [k for _, k in stack] == list(path):
            rest = found["rest"]
            comment = ""
            if " #" in rest:
                rest, _, comment = rest.partition(" #")
                comment = " #" + comment
            if not rest.strip():
                raise ReleaseError(f"{'.'.join(path)}: not a scalar in values.yaml")
            lines[number] = f"{found['indent']}{found['key']}: {json.dumps(value)}{comment}\n"
            return "".join(lines)
    raise ReleaseError(f"{'.'.join(path)}: no such key in values.yaml")


@dataclass(frozen=True)
class Pushed:
    """An image pushed for the release: `repository@digest`."""

    repository: str
    digest: str

    @classmethod
    def parse(cls, ref: str, *, flag: str) -> Pushed:
        repository, sep, digest = ref.partition("@")
        if not sep or not repository or _DIGEST.fullmatch(digest) is None:
            raise ReleaseError(f"{flag} {ref!r}: expected REPOSITORY@sha256:<64 hex digits>")
        if ":" in repository.rsplit("/", 1)[-1]:
            repository = repository.rsplit(":", 1)[0]  # repo:tag@digest -> repo
        return cls(repository, digest)


def pin_chart_values(text: str, *, operator: Pushed, gateway: Pushed) -> str:
    """values.yaml pulling the two pushed images by digest; checked by parsing the result."""
    for path, value in (
        (("image", "repository"), operator.repository),
        (("image", "digest"), operator.digest),
        (("gateway", "image", "repository"), gateway.repository),
        (("gateway", "image", "digest"), gateway.digest),
    ):
        text = set_value(text, path, value)
    values = yaml.safe_load(text)
    got = (
        values["image"]["repository"],
        values["image"]["digest"],
        values["gateway"]["image"]["repository"],
        values["gateway"]["image"]["digest"],
    )
    want = (operator.repository, operator.digest, gateway.repository, gateway.digest)
    if got != want:  # pragma: no cover - set_value wrote what it was given
        raise ReleaseError(f"values.yaml: pinned {got}, expected {want}")
    return text


# ---- the Homebrew formula ------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """One wheel the formula downloads: its distribution name, URL and sha256."""

    name: str
    url: str
    sha256: str


def resources_from_report(report: dict[str, Any], *, skip: str = "mlxfleet") -> list[Resource]:
    """The wheels of a `pip install --dry-run --report` answer, sorted by name (`skip`: ours)."""
    out: dict[str, Resource] = {}
    for item in report.get("install", []):
        name = _canonical(item["metadata"]["name"])
        if name == skip:
            continue
        info = item.get("download_info") or {}
        url = str(info.get("url", ""))
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        digest = str(hashes.get("sha256", ""))
        if not url.startswith("https://") or not url.endswith(".whl"):
            raise ReleaseError(f"--resolved: {name} resolved to {url!r}, not a wheel on an index")
        if re.fullmatch(r"[a-f0-9]{64}", digest) is None:
            raise ReleaseError(f"--resolved: {name} has no sha256 in the report")
        out[name] = Resource(name, url, digest)
    if not out:
        raise ReleaseError("--resolved: the report installs nothing")
    return [out[k] for k in sorted(out)]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_FORMULA = """\
# Homebrew formula of the mlxfleet node agent, rendered by scripts/release.py for release {version}.
# Every Python dependency is a wheel pinned by sha256 (mlxfleet[agent] resolved for macOS 14+ on
# Apple Silicon, Python 3.11); nothing is fetched at install time but these resources.
class MlxfleetAgent < Formula
  desc "Node agent of mlxfleet: serves MLX models on this Mac for a Kubernetes fleet"
  homepage "https://github.com/mlxfleet/mlxfleet"
  url "{sdist_url}"
  sha256 "{sdist_sha256}"
  license "Apache-2.0"

  depends_on arch: :arm64
  depends_on macos: :sonoma
  depends_on "python@3.11"

  resource "mlxfleet-wheel" do
    url "{wheel_url}"
    sha256 "{wheel_sha256}"
  end
{resources}
  def install
    venv = libexec
    system Formula["python@3.11"].opt_bin/"python3.11", "-m", "venv", venv
    wheels = buildpath/"wheels"
    wheels.mkpath
    resources.each do |r|
      cp r.cached_download, wheels/File.basename(URI(r.url).path)
    end
    system venv/"bin/python", "-m", "pip", "install", "--no-index", "--no-deps",
           "--no-cache-dir", *Dir["#{{wheels}}/*.whl"]
    bin.install_symlink venv/"bin/mlxfleet-agent"
  end

  def caveats
    <<~EOS
      Join this Mac to a cluster (as root: it creates the _mlxfleet service user and
      installs the LaunchDaemon /Library/LaunchDaemons/io.mlxfleet.agent.plist):
        sudo #{{opt_bin}}/mlxfleet-agent join --server https://API-SERVER:6443 --token TOKEN
      Preview what it would write first with --dry-run.
    EOS
  end

  test do
    assert_match version.to_s, shell_output("#{{bin}}/mlxfleet-agent --version")
    system bin/"mlxfleet-agent", "join", "--help"
  end
end
"""


def formula(
    *,
    version: str,
    sdist_url: str,
    sdist_sha256: str,
    wheel_url: str,
    wheel_sha256: str,
    resources: Sequence[Resource],
) -> str:
    """The formula's Ruby text (no resource may be mlxfleet itself: that is the wheel's)."""
    for label, value in (("--sdist-url", sdist_url), ("--wheel-url", wheel_url)):
        if not value.startswith("https://") or '"' in value or "#{" in value:
            raise ReleaseError(f"{label} {value!r}: an https:// URL without quotes")
    blocks = "".join(
        f'\n  resource "{r.name}" do\n    url "{r.url}"\n    sha256 "{r.sha256}"\n  end\n'
        for r in resources
    )
    return _FORMULA.format(
        version=version,
        sdist_url=sdist_url,
        sdist_sha256=sdist_sha256,
        wheel_url=wheel_url,
        wheel_sha256=wheel_sha256,
        resources=blocks,
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pin = sub.add_parser("pin-chart", help="pin a staged chart's images by digest")
    pin.add_argument("chart", type=Path)
    pin.add_argument("--operator", required=True, metavar="REPO@DIGEST")
    pin.add_argument("--gateway", required=True, metavar="REPO@DIGEST")
    brew = sub.add_parser("formula", help="render the Homebrew formula of the agent")
    brew.add_argument("--version", required=True)
    brew.add_argument("--sdist-url", required=True)
    brew.add_argument("--sdist", type=Path, required=True)
    brew.add_argument("--wheel-url", required=True)
    brew.add_argument("--wheel", type=Path, required=True)
    brew.add_argument("--resolved", type=Path, required=True)
    brew.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "pin-chart":
            values = args.chart / "values.yaml"
            values.write_text(
                pin_chart_values(
                    values.read_text(),
                    operator=Pushed.parse(args.operator, flag="--operator"),
                    gateway=Pushed.parse(args.gateway, flag="--gateway"),
                )
            )
            return 0
        text = formula(
            version=args.version,
            sdist_url=args.sdist_url,
            sdist_sha256=_sha256(args.sdist),
            wheel_url=args.wheel_url,
            wheel_sha256=_sha256(args.wheel),
            resources=resources_from_report(json.loads(args.resolved.read_text())),
        )
    except (ReleaseError, OSError, KeyError, ValueError) as exc:
        print(f"release.py {args.command}: {exc}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
