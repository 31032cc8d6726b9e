"""The package-circle check (tests/support/pkgcircles.py) on small graphs, and on the tree."""

from __future__ import annotations

from tests.support import pkgcircles

ROOTS = ("app",)


def _circles(imports: dict[str, list[str]], packages: set[str]) -> list[pkgcircles.Circle]:
    return pkgcircles.circles(imports, frozenset(packages), ROOTS)


def test_a_loose_module_and_a_subpackage_that_import_each_other_are_a_circle() -> None:
    # issue 27's case: core.nodes -> core.fleet.facts, core.fleet.nodeviews -> core.thermal
    imports = {
        "app.core.nodes": ["app.core.fleet.facts"],
        "app.core.fleet.nodeviews": ["app.core.thermal"],
        "app.core.fleet.facts": [],
        "app.core.thermal": [],
    }
    found = _circles(imports, {"app", "app.core", "app.core.fleet"})
    assert [c.homes for c in found] == [("app.core", "app.core.fleet")]
    assert ("app.core.fleet.nodeviews", "app.core.thermal") in found[0].imports
    assert "app.core <-> app.core.fleet" in str(found[0])


def test_the_same_modules_with_the_kit_in_a_package_of_its_own_are_no_circle() -> None:
    imports = {
        "app.core.nodes": ["app.core.fleet.facts", "app.core.kit.thermal"],
        "app.core.fleet.nodeviews": ["app.core.kit.thermal"],
    }
    assert _circles(imports, {"app", "app.core", "app.core.fleet", "app.core.kit"}) == []


def test_a_circle_through_three_packages_is_found_once() -> None:
    imports = {"app.a.x": ["app.b.y"], "app.b.y": ["app.c.z"], "app.c.z": ["app.a.w"]}
    found = _circles(imports, {"app", "app.a", "app.b", "app.c"})
    assert [c.homes for c in found] == [("app.a", "app.b", "app.c")]


def test_a_roots_loose_modules_are_each_their_own_home() -> None:
    # cli (top) imports a package that imports sizing (bottom): ordered, no circle at the root
    imports = {"app.cli": ["app.slots.registry"], "app.slots.registry": ["app.sizing"]}
    assert _circles(imports, {"app", "app.slots"}) == []
    # ...but a real circle between two of them still shows
    imports["app.sizing"] = ["app.slots.registry"]
    assert [c.homes for c in _circles(imports, {"app", "app.slots"})] == [
        ("app.sizing", "app.slots")
    ]


def test_the_tree_has_no_package_circle() -> None:
    assert [str(c) for c in pkgcircles.check()] == []
