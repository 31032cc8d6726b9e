"""Every recorded tool output the heat and doctor parsers are tested against says where it came
from (tests/fixtures/host/SOURCES.md), and nothing written here passes for a recording."""

from __future__ import annotations

from pathlib import Path

HOST = Path(__file__).resolve().parents[2] / "fixtures" / "host"
SOURCES = (HOST / "SOURCES.md").read_text()


def _fixtures() -> list[str]:
    """Fixture files and sysfs trees, as SOURCES.md names them (a tree by its folder)."""
    out = set()
    for path in HOST.rglob("*"):
        if not path.is_file() or path.name == "SOURCES.md":
            continue
        rel = path.relative_to(HOST)
        tree = next((p for p in rel.parents if p.name.startswith("sysfs-")), None)
        out.add(f"{tree}/" if tree is not None else str(rel))
    return sorted(out)


def test_every_fixture_says_where_it_came_from() -> None:
    missing = [f for f in _fixtures() if f"`{f}`" not in SOURCES]
    assert missing == [], f"add these to tests/fixtures/host/SOURCES.md: {missing}"


def test_what_was_written_here_is_named_so() -> None:
    """A file SOURCES.md calls CONSTRUCTED carries the word in its name, and the reverse."""
    for line in SOURCES.splitlines():
        if not line.startswith("| `"):
            continue
        name = line.split("`")[1]
        constructed = line.rstrip(" |").endswith("CONSTRUCTED")
        assert constructed == ("CONSTRUCTED" in name), line
