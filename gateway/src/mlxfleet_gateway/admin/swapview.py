"""SwapPlans as the console's swaps page shows them, built from the watched objects (pure).

Per SwapPlan: its deployment, target, phase and progress, whether it waits for approval, and
its steps (per node: phase, strategy, the times of each stage, requests served and failed). The
running and waiting plans come first, then the newest. Objects are read raw, as viewkit says
why.
May import: the standard library, admin.viewkit. Called by: admin.api, console.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlxfleet_gateway.admin import viewkit

JsonDict = viewkit.JsonDict
# the shared readers of raw values, short: the parser below is dense with them
_d, _l, _int = viewkit.as_mapping, viewkit.as_list, viewkit.as_int


TERMINAL = frozenset({"Completed", "Failed", "RolledBack"})


@dataclass(frozen=True, slots=True)
class Step:
    node: str
    phase: str
    strategy: str
    started: str
    warm: str
    switched: str
    drained: str
    finished: str
    served: int | None
    failed: int | None
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    namespace: str
    name: str
    deployment: str
    target: str
    phase: str
    progress: str
    paused: bool
    created: str
    steps: list[Step] = field(default_factory=list)
    may_approve: bool = False  # the viewer may patch it (filled in per viewer)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def waiting(self) -> bool:
        """Paused before it finished: it waits for a person to approve it."""
        return self.paused and self.phase not in TERMINAL


def _time(value: Any) -> str:
    text = str(value or "")
    return text[11:19] if len(text) >= 19 else text  # HH:MM:SS of an RFC 3339 time


def plans(raw: Iterable[JsonDict]) -> list[Plan]:
    out = []
    for p in raw:
        spec, status = _d(p.get("spec")), _d(p.get("status"))
        target = _d(spec.get("target"))
        steps = [
            Step(
                node=str(_d(s).get("node") or ""),
                phase=str(_d(s).get("phase") or "Pending"),
                strategy=str(_d(s).get("strategy") or ""),
                started=_time(_d(s).get("startedAt")),
                warm=_time(_d(s).get("warmAt")),
                switched=_time(_d(s).get("switchedAt")),
                drained=_time(_d(s).get("drainedAt")),
                finished=_time(_d(s).get("finishedAt")),
                served=_int(_d(s).get("requestsServed")),
                failed=_int(_d(s).get("requestsFailed")),
                message=str(_d(s).get("message") or ""),
            )
            for s in _l(status.get("steps"))
        ]
        out.append(
            Plan(
                namespace=viewkit.namespace_of(p),
                name=viewkit.name_of(p),
                deployment=str(_d(spec.get("deploymentRef")).get("name") or ""),
                target=str(target.get("source") or "")
                + (f"@{target['revision']}" if target.get("revision") else ""),
                phase=str(status.get("phase") or ("Paused" if spec.get("paused") else "Pending")),
                progress=str(status.get("progress") or ""),
                paused=bool(spec.get("paused")),
                created=str(_d(p.get("metadata")).get("creationTimestamp") or ""),
                steps=steps,
            )
        )
    # the running and waiting ones first, then the newest
    return sorted(out, key=lambda p: (p.phase in TERMINAL, _neg(p.created), p.id))


def _neg(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)
