"""The package-circle check (tests/support/pkgcircles.py) on small graphs, and on the tree."""

from __future__ import annotations

from tests.support import pkgcircles

ROOTS = ("app",)


def _circles(imports: dict[str, list[str]], packages: set[str]) -> list[pkgcircles.Circle]:
    return pkgcircles.circles(imports, frozenset(packages), ROOTS)


def test_a_loose_module_and_a_subpackage_that_import_each_other_are_a_circle() -> None:
    # issue 27's first case (before the kit and the node package): core.nodes -> core.fleet.facts,
    # core.fleet.nodeviews -> core.thermal
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


# issue 27's layout before the move: three loose modules of core beside its subpackages
OLD_CORE = {
    "app.core": ["app.core.nodes"],
    "app.core.nodes": ["app.core.fleet.facts", "app.core.doctor"],
    "app.core.doctor": ["app.core.fleet.groupplacement"],
    "app.core.modelroute": ["app.core.kit.conditions"],
    "app.core.fleet": [],
    "app.core.fleet.facts": [],
    "app.core.fleet.groupplacement": [],
    "app.core.kit": [],
    "app.core.kit.conditions": [],
}
OLD_PACKAGES = frozenset({"app", "app.core", "app.core.fleet", "app.core.kit"})


def test_modules_beside_subpackages_are_loose_though_no_circle_closes() -> None:
    # the old layout has no circle between homes, yet a reader folding a module into its folder
    # sees core import core.fleet, which lives inside core: the stricter rule names each module
    assert pkgcircles.circles(OLD_CORE, OLD_PACKAGES, ROOTS) == []
    found = pkgcircles.loose_modules(OLD_CORE, OLD_PACKAGES, ("app.core",))
    assert found == [
        pkgcircles.Loose("app.core", ("app.core.doctor", "app.core.modelroute", "app.core.nodes"))
    ]
    assert "app.core: app.core.doctor, app.core.modelroute, app.core.nodes" in str(found[0])


def test_each_kind_in_a_package_of_its_own_leaves_no_loose_module() -> None:
    moved = {
        "app.core": [],
        "app.core.node": [],
        "app.core.node.status": ["app.core.fleet.facts", "app.core.node.doctor"],
        "app.core.node.doctor": ["app.core.fleet.groupplacement"],
        "app.core.modelroute": [],
        "app.core.modelroute.status": ["app.core.kit.conditions"],
        "app.core.fleet.facts": [],
        "app.core.fleet.groupplacement": [],
        "app.core.kit.conditions": [],
    }
    packages = frozenset(
        {
            "app",
            "app.core",
            "app.core.node",
            "app.core.modelroute",
            "app.core.fleet",
            "app.core.kit",
        }
    )
    assert pkgcircles.loose_modules(moved, packages, ("app.core",)) == []


def test_the_rule_reaches_below_and_only_below_the_packages_named() -> None:
    imports: dict[str, list[str]] = {
        "app.cli": [],  # the root's own loose module: not under app.core, not checked
        "app.slots.lease": [],
        "app.core.kind.status": [],
        "app.core.kind.helper": [],  # beside a subpackage, one level down
        "app.core.kind.sub.x": [],
    }
    packages = frozenset({"app", "app.slots", "app.core", "app.core.kind", "app.core.kind.sub"})
    found = pkgcircles.loose_modules(imports, packages, ("app.core",))
    assert found == [
        pkgcircles.Loose("app.core.kind", ("app.core.kind.helper", "app.core.kind.status"))
    ]


def test_the_operators_core_holds_no_module_beside_its_subpackages() -> None:
    assert [str(x) for x in pkgcircles.check_loose()] == []
    assert pkgcircles.NO_LOOSE_MODULES == ("mlxfleet_operator.core",)
