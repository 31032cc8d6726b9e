"""The maps of the code in docs/development.md name only folders and modules that exist and
leave no package out (issue 27: the map named the gateway's deleted `upstream` and `core/sse` and
had no `peers/`); `make docs-check` runs the same check (tests/support/docmaps.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support import bigmodules, docmaps


def _program(root: Path, files: list[str]) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text('"""A module."""\nclass Meter: ...\n')
    return root


def test_the_maps_name_only_what_exists_and_every_package() -> None:
    assert [str(f) for f in docmaps.check()] == []


def test_each_kind_of_mistake_is_found_with_its_line(tmp_path: Path) -> None:
    table = _program(
        tmp_path / "agent/src/mlxfleet_a",
        ["__init__.py", "sizing.py", "host/__init__.py", "host/heat.py", "peers/__init__.py"],
    )
    block = _program(
        tmp_path / "gateway/src/mlxfleet_b",
        ["__init__.py", "proxy.py", "relay.py", "core/__init__.py", "core/plan.py"],
    )
    doc = tmp_path / "development.md"
    doc.write_text(
        "# Developing\n"
        "\n"
        "## Map of the code: a\n"
        "\n"
        "`agent/src/mlxfleet_a/`, one folder per row.\n"
        "\n"
        "| folder | what lives there | may import |\n"
        "| --- | --- | --- |\n"
        "| `host/` | readings (`heat.Meter`, `heat.Gone`), `heatparse` | `sizing`, stdlib |\n"
        "| `sizing.py`, `refusals.py` | the estimate; refusals (`Rejected`: prose) | `host` |\n"
        "\n"
        "## The gateway's code\n"
        "\n"
        "```\n"
        "gateway/src/mlxfleet_b/\n"
        "  core/      pure: plan (route rules, weights), sse,\n"
        "             keys\n"
        "  upstream   a client that went away\n"
        "  proxy      the ASGI path (authenticate, failover); its parts: relay, calls\n"
        "```\n"
    )
    found = [
        str(f) for f in docmaps.check(doc, packages={"mlxfleet_a": table, "mlxfleet_b": block})
    ]
    where = f"{doc}:"
    assert found == [
        f"{where}9: the map of `mlxfleet_a` names `heat.Gone`, which is not in "
        "agent/src/mlxfleet_a/host/ (nor agent/src/mlxfleet_a/)",
        f"{where}9: the map of `mlxfleet_a` names `heatparse`, which is not in "
        "agent/src/mlxfleet_a/host/ (nor agent/src/mlxfleet_a/) (did you mean `heat`?)",
        f"{where}10: the map of `mlxfleet_a` names `refusals.py`, which is not in "
        "agent/src/mlxfleet_a/",
        f"{where}9: the map of `mlxfleet_a` leaves out the package `peers/`",
        f"{where}16: the map of `mlxfleet_b` names `sse`, which is not in "
        "gateway/src/mlxfleet_b/core/ (nor gateway/src/mlxfleet_b/)",
        f"{where}17: the map of `mlxfleet_b` names `keys`, which is not in "
        "gateway/src/mlxfleet_b/core/ (nor gateway/src/mlxfleet_b/)",
        f"{where}18: the map of `mlxfleet_b` names `upstream`, which is not in "
        "gateway/src/mlxfleet_b/",
        f"{where}19: the map of `mlxfleet_b` names `calls`, which is not in "
        "gateway/src/mlxfleet_b/",
    ]


def test_a_program_without_a_map_is_a_finding(tmp_path: Path) -> None:
    root = _program(tmp_path / "x/src/mlxfleet_x", ["__init__.py"])
    doc = tmp_path / "development.md"
    doc.write_text("# Developing\n\nNo map here.\n")
    assert [str(f) for f in docmaps.check(doc, packages={"mlxfleet_x": root})] == [
        f"{doc}: has no map of `mlxfleet_x`"
    ]


def test_every_module_over_the_limit_is_named_with_its_concept() -> None:
    assert [str(f) for f in bigmodules.check()] == []


def test_a_big_module_left_out_and_a_stale_row_are_both_found(tmp_path: Path) -> None:
    root = tmp_path / "agent/src/mlxfleet_a"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text('"""A package."""\n')
    (root / "big.py").write_text("x = 1\n" * (bigmodules.LIMIT + 1))
    (root / "named.py").write_text("x = 1\n" * (bigmodules.LIMIT + 5))
    (root / "small.py").write_text("x = 1\n" * bigmodules.LIMIT)
    doc = tmp_path / "development.md"
    doc.write_text(
        "# Developing\n"
        "\n"
        "## Modules over 450 lines\n"
        "\n"
        "| module | the one concept it holds |\n"
        "| --- | --- |\n"
        "| `agent/src/mlxfleet_a/named.py` | one concept |\n"
        "| `agent/src/mlxfleet_a/small.py` | it was big once |\n"
        "| `agent/src/mlxfleet_a/gone.py` | deleted since |\n"
        "\n"
        "## Tests\n"
    )
    found = [str(f) for f in bigmodules.check(doc, packages={"mlxfleet_a": root}, repo=tmp_path)]
    assert found == [
        f"development.md: `agent/src/mlxfleet_a/big.py` has {bigmodules.LIMIT + 1} lines (over "
        f'{bigmodules.LIMIT}) and is not in "Modules over 450 lines": split it, or name the one '
        "concept it holds there",
        f"development.md:8: `agent/src/mlxfleet_a/small.py` has {bigmodules.LIMIT} lines: "
        "drop its row",
        "development.md:9: `agent/src/mlxfleet_a/gone.py` does not exist: drop its row",
    ]
