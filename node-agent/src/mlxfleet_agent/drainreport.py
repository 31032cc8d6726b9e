"""What a drain says while it waits and when it gives up: pure text over ModelDeployments as the
API server returns them (plain dicts), shared by `kubectl mlxfleet drain` and
`mlxfleet-agent leave` so both report the same way.

Which deployments still hold a replica on the node and what their Ready condition says (the
operator's own words on why a replica has not moved), a progress report when that changes and
at least every `Cadence.every` seconds, and on a timeout what is still there and what a person can
do. New-user test: a drain printed one line, then nothing for 600 s, then timed out.
May import: the standard library (pure: no I/O, no clock). Called by: the kubectl plugin (the
operator's allow-list names this module) and `join.command` (leave).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Waiting:
    """A deployment with a replica still on a draining node, and what it says about itself."""

    deployment: str  # namespace/name
    reason: str  # its Ready condition's reason
    message: str  # ... and message: why the replica has not moved (when it cannot)


def _ready(obj: Obj) -> tuple[str, str]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("reason") or ""), str(c.get("message") or "")
    return "", ""


def waiting_on(deployments: Iterable[Obj], node: str) -> list[Waiting]:
    """Every deployment with a replica (any phase) on `node`, by name, with its Ready condition:
    the operator's own words on why the replica has not left (no other node can take it, the
    new replica still loads, ...)."""
    out = []
    for d in deployments:
        placed = (d.get("status") or {}).get("placements") or []
        if any(p.get("node") == node for p in placed):
            name = f"{d['metadata']['namespace']}/{d['metadata']['name']}"
            out.append(Waiting(name, *_ready(d)))
    return sorted(out, key=lambda w: w.deployment)


def drain_lines(node: str, waiting: Sequence[Waiting], elapsed: float) -> list[str]:
    """`[  30s] 1 replica(s) still on NODE: ns/a` (the line scripts read), then one indented line
    per deployment with its Ready reason and message."""
    names = ", ".join(w.deployment for w in waiting)
    lines = [f"[{elapsed:4.0f}s] {len(waiting)} replica(s) still on {node}: {names}"]
    for w in waiting:
        why = ": ".join(part for part in (w.reason, w.message) if part) or "no condition yet"
        lines.append(f"       {w.deployment}: {why}")
    return lines


def drain_timeout(node: str, waiting: Sequence[Waiting], timeout: float) -> list[str]:
    """What a drain that timed out says: what is still there and why, and what a person can do."""
    names = ", ".join(w.deployment for w in waiting)
    namespace, _, name = (waiting[0].deployment if waiting else "NS/NAME").partition("/")
    return [
        f"drain {node}: timed out after {timeout:.0f}s with {names} still there; the node stays "
        "draining: replicas move as soon as another node can take them",
        *drain_lines(node, waiting, timeout)[1:],
        "  to let them move: add a node or uncordon one (`kubectl mlxfleet uncordon NODE`), free "
        f"memory elsewhere, or scale down (`kubectl scale mdep/{name} -n {namespace} "
        f"--replicas=N`); to stop draining: `kubectl mlxfleet uncordon {node}`; wait longer with "
        "--timeout; overview: `kubectl mlxfleet status`",
    ]


@dataclass
class Cadence:
    """When a progress report is due: when what it says changes (`key`), else every `every`
    seconds, so a long wait still shows it is alive. No clock of its own (`now` is given)."""

    every: float = 30.0
    key: object = None
    at: float | None = None

    def due(self, key: object, now: float) -> bool:
        if self.at is not None and key == self.key and now - self.at < self.every:
            return False
        self.key, self.at = key, now
        return True


def report_key(waiting: Sequence[Waiting]) -> object:
    """What a progress report says, for `Cadence.due`: a new report when it changes."""
    return [(w.deployment, w.reason) for w in waiting]
