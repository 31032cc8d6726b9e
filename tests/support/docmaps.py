"""The maps of the code in docs/development.md name only what is there and leave no package out
(issue 27: the map named the gateway's deleted `upstream` and `core/sse` and had no `peers/` or
`join/`). Part of the docs check: `make docs-check` runs it with tests/support/docscheck.py,
whose packages, findings and nearest-name hints it shares.

A map is the table or code block of the section that names a program's source folder
(`node-agent/src/mlxfleet_agent/`, ...). Each entry (a table row's first column, or a code-block
line at the block's least indentation) is a folder `name/` or a module `name` / `name.py` of that
program, and must be there. What an entry's description names must be there too, looked up in
the entry's folder and then at the program's top: in a table, each lowercase code span
(`tokencount`, `heat.HeatMeter`, `lease.py`); in a code block, where code spans do not render,
each item of a list that is one lowercase word (`catalog, plan, balancer`; text in parentheses
is prose). Every package of the program (a folder with `__init__.py`) is an entry or is named.

    python -m tests.support.docscheck        # both checks; exit 1 and one line per finding

May import: the standard library and tests.support.docscheck. Called by: docscheck.main,
tests/unit/test_docs_maps.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support import docscheck

DOC = docscheck.REPO / "docs/development.md"
NAME = re.compile(r"[a-z_][a-z0-9_]*(?:\.[A-Za-z_]\w*)*(?:\.py|/)?")
WORD = re.compile(r"[a-z_][a-z0-9_]*/?")


@dataclass(frozen=True)
class Name:
    line: int
    text: str  # as the doc writes it: `core/`, `proxy`, `heat.HeatMeter`, `lease.py`
    folder: str  # the entry's folder it is read in ("" for the program's top)
    entry: bool  # an entry of the map rather than a name in an entry's description


def check(
    doc: Path = DOC, *, packages: dict[str, Path] = docscheck.PACKAGES
) -> list[docscheck.Finding]:
    """Findings for every program's map in `doc` (a program without a map is one too)."""
    lines = doc.read_text().splitlines()
    rel = doc.relative_to(docscheck.REPO) if doc.is_relative_to(docscheck.REPO) else doc
    out: list[docscheck.Finding] = []
    for package, root in packages.items():
        found = _map(lines, root)
        if found is None:
            out.append(docscheck.Finding(f"{rel}", f"has no map of `{package}`"))
            continue
        start, names = found
        out += _check_map(package, root, names, f"{rel}", start)
    return out


def _map(lines: list[str], root: Path) -> tuple[int, list[Name]] | None:
    """(first line, names) of the map of the program in `root`: the table or code block of the
    section whose text names the folder, or None."""
    folder = re.compile(rf"(?<![\w/]){re.escape(_shown(root))}/(?!\w)")
    section: list[tuple[int, str]] = []
    for number, line in [*enumerate(lines, start=1), (len(lines) + 1, "# end")]:
        if line.startswith("#"):
            if any(folder.search(text) for _, text in section):
                return _table(section) or _block(section, folder)
            section = []
        else:
            section.append((number, line))
    return None


def _table(section: list[tuple[int, str]]) -> tuple[int, list[Name]] | None:
    rows = [(n, t) for n, t in section if t.startswith("|")][2:]  # past the header and rule
    names = []
    for number, row in rows:
        first, *rest = row.strip().strip("|").split("|")
        for span in docscheck.SPAN.findall(first):
            names.append(Name(number, span.strip(), _folder_of(span.strip()), entry=True))
        folder = _folder_of(docscheck.SPAN.findall(first)[0].strip())
        for cell in rest:
            for span in docscheck.SPAN.findall(cell):
                if NAME.fullmatch(span.strip()):
                    names.append(Name(number, span.strip(), folder, entry=False))
    return (rows[0][0], names) if rows else None


def _block(section: list[tuple[int, str]], root: re.Pattern[str]) -> tuple[int, list[Name]] | None:
    inside, block = False, []
    for number, text in section:
        if text.lstrip().startswith("```"):
            if inside:
                break
            inside = True
        elif inside and text.strip() and not root.fullmatch(text.strip()):
            block.append((number, text))
    if not block:
        return None
    indent = min(len(t) - len(t.lstrip()) for _, t in block)
    names: list[Name] = []
    entries: list[tuple[int, str, list[tuple[int, str]]]] = []  # line, entry, its description
    for number, text in block:
        if len(text) - len(text.lstrip()) == indent:
            entry, _, first = text.strip().partition(" ")
            entries.append((number, entry, [(number, first.partition(" | ")[0])]))
        else:
            entries[-1][2].append((number, text))
    for number, entry, said in entries:
        folder = _folder_of(entry)
        names.append(Name(number, entry, folder, entry=True))
        names += [Name(n, w, folder, entry=False) for n, w in _listed(said)]
    return block[0][0], names


def _listed(said: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The one-word items of the lists in a description, with their lines: text in parentheses
    is prose about the item before it; an item's words before a colon are its heading."""
    text = "\n".join(t for _, t in said).replace("`", " ")
    depth, kept = 0, []
    for char in text:
        depth += char == "("
        kept.append(char if depth == 0 or char == "\n" else " ")
        depth -= char == ")" and depth > 0
    plain, out = "".join(kept), []
    for match in re.finditer(r"[^,;]+", plain):
        for part in re.split(r"\band\b", match.group(0)):
            item = part.rpartition(":")[2].strip()
            if WORD.fullmatch(item):
                at = match.start() + match.group(0).find(item)
                out.append((said[0][0] + plain.count("\n", 0, at), item))
    return out


def _folder_of(entry: str) -> str:
    """The folder an entry's description is read in: the folder itself, or a module's folder."""
    entry = entry.removesuffix(".py")
    return entry.rstrip("/") if entry.endswith("/") else entry.rpartition("/")[0]


def _check_map(
    package: str, root: Path, names: list[Name], doc: str, start: int
) -> list[docscheck.Finding]:
    out, seen = [], set()
    for name in names:
        places = [name.folder, ""] if name.folder and not name.entry else [""]
        found = next((p for p in (_find(root, f, name.text) for f in places) if p), None)
        if found is None:
            stem = name.text.rstrip("/").removesuffix(".py")
            folder = stem.rpartition("/")[0] if name.entry else name.folder
            where = f"{_shown(root)}/{folder}/" if folder else f"{_shown(root)}/"
            also = f" (nor {_shown(root)}/)" if folder and not name.entry else ""
            last = stem.rpartition("/")[2]
            near = "" if "." in last else docscheck._near(last, _modules(root, folder))
            out.append(
                docscheck.Finding(
                    f"{doc}:{name.line}",
                    f"the map of `{package}` names `{name.text}`, which is not in {where}"
                    f"{also}{near}",
                )
            )
        else:
            seen.add(found)
    for init in sorted(root.rglob("__init__.py")):
        package_dir = init.parent
        if (
            package_dir != root
            and package_dir not in seen
            and "__pycache__" not in package_dir.parts
        ):
            out.append(
                docscheck.Finding(
                    f"{doc}:{start}",
                    f"the map of `{package}` leaves out the package "
                    f"`{package_dir.relative_to(root)}/`",
                )
            )
    return out


def _find(root: Path, folder: str, text: str) -> Path | None:
    """The module file or package folder `text` names, read in `folder` of `root`, or None."""
    base = root / folder if folder else root
    if text.endswith("/"):
        path = base / text.rstrip("/")
        return path if path.is_dir() else None
    head, *attrs = text.removesuffix(".py").split(".")
    parts = [*head.split("/"), *attrs]
    for at, part in enumerate(parts):
        if (base / f"{part}.py").is_file():
            module, rest = base / f"{part}.py", parts[at + 1 :]
            defined = not rest or re.search(rf"\b{re.escape(rest[0])}\b", module.read_text())
            return module if defined else None
        if not (base / part / "__init__.py").is_file():
            return None
        base = base / part
    return base


def _shown(root: Path) -> str:
    """A program's folder as the docs write it (`gateway/src/mlxfleet_gateway`)."""
    base = docscheck.REPO if root.is_relative_to(docscheck.REPO) else root.parents[2]
    return str(root.relative_to(base))


def _modules(root: Path, folder: str) -> set[str]:
    base = root / folder if folder else root
    if not base.is_dir():
        return set()
    return {p.stem for p in base.glob("*.py")} | {p.name for p in base.iterdir() if p.is_dir()}
