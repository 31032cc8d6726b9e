"""The shell blocks the docs give people, so tests run exactly what a reader would.

A block is marked in the Markdown by an HTML comment on the line before its fence:
`<!-- test: NAME -->`. `run_block` runs one with bash (-euo pipefail) after plain text
substitutions (real names -> loopback ones). `anchors` lists a page's heading anchors as GitHub
makes them (link checks, runbook links). `table` reads the Markdown table under a heading (the
reports' tables) by column name.
May import: the standard library. Called by: tests.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def block(doc: str, name: str) -> str:
    """The fenced block after `<!-- test: name -->` in docs/<doc>."""
    text = (REPO / "docs" / doc).read_text()
    found = re.search(rf"<!-- test: {re.escape(name)} -->\n```[a-z]*\n(.*?)\n```", text, flags=re.S)
    if found is None:
        raise AssertionError(f"docs/{doc} has no block marked `<!-- test: {name} -->`")
    return found.group(1) + "\n"


def run_block(
    doc: str,
    name: str | tuple[str, ...],
    *,
    cwd: Path,
    replace: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    prelude: str = "",
) -> subprocess.CompletedProcess[str]:
    names = (name,) if isinstance(name, str) else name
    script = "".join(block(doc, n) for n in names)  # one shell: variables carry over
    for old, new in (replace or {}).items():
        script = script.replace(old, new)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", prelude + script],
        cwd=cwd,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of every heading of a Markdown page (not those inside code blocks)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def table(markdown: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first table under the heading `heading` (any level), each by its column
    names: a cell is found by name, whatever other tables hold the same first column."""
    found = re.search(rf"^#{{1,6}} {re.escape(heading)}\n(.*?)(?=^#{{1,6}} |\Z)", markdown,
                      flags=re.S | re.M)  # fmt: skip
    if found is None:
        raise AssertionError(f"no heading {heading!r}")
    lines = [line for line in found.group(1).splitlines() if line.startswith("|")]
    if len(lines) < 2:
        raise AssertionError(f"no table under {heading!r}")
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    names = cells[0]
    return [dict(zip(names, row, strict=True)) for row in cells[2:]]
