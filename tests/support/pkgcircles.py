"""No circle between packages, with a package's loose modules counted as the package itself.

import-linter's layers contracts order the members of one container; they do not see a circle
that runs from a package's own modules into one of its subpackages and back (what issue 27 found
as `core <-> core.fleet`: `core.nodes` imported `core.fleet.facts`, which imported `core.thermal`).
This check folds every module into its home package (a package is its own home, a plain module's
home is the package that holds it) and reports every strongly connected set of homes.

The programs' roots are left out as homes: a root's loose modules (`cli`, `sizing`, `settings`)
are ordered one by one by the root layers contracts in pyproject.toml, so each is its own home
there. Below the root, every package is one home.

Stricter where it holds: in the packages of `NO_LOOSE_MODULES` (and every package below them), a
package with subpackages holds no module but its `__init__` (`loose_modules`). A module beside
subpackages is read as its package importing its own subpackages, the shape of the circle above
(issue 27: `core/nodes.py`, `core/doctor.py`, `core/modelroute.py` beside `core/fleet/`); each
such module goes into a package of its own (`core/node/`, `core/modelroute/`).

Run: `python -m tests.support.pkgcircles` (part of `make contracts`); exit 1 on a circle or a
loose module; `--all` also lists, without failing, where the stricter rule would fire elsewhere.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

ROOTS = ("mlxfleet_operator", "mlxfleet_agent", "mlxfleet_gateway", "mlxfleet_common")
# packages (with everything below them) where no module sits beside a subpackage
NO_LOOSE_MODULES = ("mlxfleet_operator.core",)


@dataclass(frozen=True)
class Circle:
    homes: tuple[str, ...]
    imports: tuple[tuple[str, str], ...]  # (importer, imported) that close it

    def __str__(self) -> str:
        lines = [f"package circle: {' <-> '.join(self.homes)}"]
        lines += [f"    {a} imports {b}" for a, b in self.imports]
        return "\n".join(lines)


def home(module: str, packages: frozenset[str], roots: Iterable[str] = ROOTS) -> str:
    """The package a module belongs to; a root's loose modules are their own home."""
    if module in packages:
        return module
    parent = module.rpartition(".")[0]
    return module if parent in roots or not parent else parent


def circles(
    imports: Mapping[str, Iterable[str]], packages: frozenset[str], roots: Iterable[str] = ROOTS
) -> list[Circle]:
    """Strongly connected sets of homes (Tarjan, iterative) in the graph of module imports."""
    roots = tuple(roots)
    edges: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for importer, targets in imports.items():
        a = home(importer, packages, roots)
        for target in targets:
            b = home(target, packages, roots)
            if a != b:
                edges[a].add(b)
                why[(a, b)].append((importer, target))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[Circle] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    ms = set(members)
                    closing = sorted(
                        pair
                        for (a, b), pairs in why.items()
                        if a in ms and b in ms
                        for pair in pairs
                    )
                    found.append(Circle(tuple(sorted(members)), tuple(closing)))
    return found


@dataclass(frozen=True)
class Loose:
    package: str
    modules: tuple[str, ...]  # plain modules beside the package's subpackages

    def __str__(self) -> str:
        return (
            f"loose modules beside subpackages in {self.package}: {', '.join(self.modules)}"
            " (move each into a package of its own)"
        )


def loose_modules(
    modules: Iterable[str], packages: frozenset[str], within: Iterable[str] = NO_LOOSE_MODULES
) -> list[Loose]:
    """Packages at or below `within` that hold a plain module beside a subpackage."""
    within = tuple(within)
    children: dict[str, list[str]] = defaultdict(list)
    for module in {*modules, *packages}:
        parent = module.rpartition(".")[0]
        if parent and any(parent == w or parent.startswith(w + ".") for w in within):
            children[parent].append(module)
    found = []
    for package, members in sorted(children.items()):
        if any(m in packages for m in members):
            plain = tuple(sorted(m for m in members if m not in packages))
            if plain:
                found.append(Loose(package, plain))
    return found


def _graph() -> tuple[dict[str, list[str]], frozenset[str]]:
    import grimp  # import-linter's own graph builder

    graph = grimp.build_graph(*ROOTS)
    ours = [m for m in graph.modules if m.split(".")[0] in ROOTS]
    packages = frozenset(m for m in ours if graph.find_children(m))
    imports = {
        m: [t for t in graph.find_modules_directly_imported_by(m) if t.split(".")[0] in ROOTS]
        for m in ours
    }
    return imports, packages


def check() -> list[Circle]:
    imports, packages = _graph()
    return circles(imports, packages)


def check_loose(within: Iterable[str] = NO_LOOSE_MODULES) -> list[Loose]:
    imports, packages = _graph()
    return loose_modules(imports, packages, within)


def main(argv: Sequence[str] = ()) -> int:
    imports, packages = _graph()
    found = circles(imports, packages)
    loose = loose_modules(imports, packages)
    for problem in [*found, *loose]:
        print(problem)
    if "--all" in argv:
        elsewhere = [x for x in loose_modules(imports, packages, ROOTS) if x not in loose]
        for x in elsewhere:
            print(f"(not enforced) {x}")
    if found or loose:
        print(
            f"\n{len(found)} package circle(s), {len(loose)} package(s) with loose modules"
            " (tests/support/pkgcircles.py)"
        )
        return 1
    print(
        "no package circles, no loose modules beside subpackages in " + ", ".join(NO_LOOSE_MODULES)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
