"""No module over 450 lines that is not one concept named as such in docs/development.md
(issue 27's acceptance). Part of the docs check: `make docs-check` runs it with
tests/support/docscheck.py, whose packages and findings it shares.

The section "Modules over 450 lines" of docs/development.md is a table whose first column is a
module's path from the repository's root (`gateway/src/mlxfleet_gateway/proxy.py`) and whose
second says the one concept it holds. Every module of a program over `LIMIT` lines must be a row;
a row whose module is gone or has come under the limit is stale and is a finding too, so the
list says what is true today.

    python -m tests.support.docscheck        # every docs check; exit 1 and one line per finding

May import: the standard library and tests.support.docscheck. Called by: docscheck.main,
tests/unit/test_docs_maps.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.support import docscheck

DOC = docscheck.REPO / "docs/development.md"
LIMIT = 450
HEADING = "## Modules over 450 lines"


def lines_of(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def big_modules(packages: dict[str, Path], *, repo: Path = docscheck.REPO) -> dict[str, int]:
    """Path from `repo` -> line count, for every module of the programs over the limit."""
    out: dict[str, int] = {}
    for root in packages.values():
        for path in sorted(root.rglob("*.py")):
            count = lines_of(path)
            if count > LIMIT:
                out[str(path.relative_to(repo))] = count
    return out


def listed(doc: Path) -> dict[str, tuple[int, str]]:
    """The section's rows: path -> (doc line, concept); empty when the section is missing."""
    rows: dict[str, tuple[int, str]] = {}
    inside = False
    for number, line in enumerate(doc.read_text().splitlines(), start=1):
        if line.startswith("#"):
            inside = line.strip() == HEADING
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        spans = docscheck.SPAN.findall(cells[0])
        if not spans or len(cells) < 2:
            continue  # the header and its rule
        rows[spans[0].strip()] = (number, cells[1])
    return rows


def check(
    doc: Path = DOC,
    *,
    packages: dict[str, Path] = docscheck.PACKAGES,
    repo: Path = docscheck.REPO,
) -> list[docscheck.Finding]:
    rel = doc.relative_to(repo) if doc.is_relative_to(repo) else doc
    big = big_modules(packages, repo=repo)
    rows = listed(doc)
    out: list[docscheck.Finding] = []
    for path, count in big.items():
        if path not in rows:
            out.append(
                docscheck.Finding(
                    f"{rel}",
                    f"`{path}` has {count} lines (over {LIMIT}) and is not in "
                    f'"{HEADING[3:]}": split it, or name the one concept it holds there',
                )
            )
    for path, (number, concept) in rows.items():
        where = f"{rel}:{number}"
        if path not in big:
            target = repo / path
            state = f"has {lines_of(target)} lines" if target.is_file() else "does not exist"
            out.append(docscheck.Finding(where, f"`{path}` {state}: drop its row"))
        elif not concept:
            out.append(docscheck.Finding(where, f"`{path}` names no concept"))
    return out
