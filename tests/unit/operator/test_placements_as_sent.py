"""A reconcile reads the placements this process last wrote while kopf's body is still the
version that write was computed against: a body from before a failover lists the lost Mac, and
once that Mac came back (its agent still listing the slot) the replica moved back to it and the
node it had failed over to was dropped (the scale benchmark's flaps: 62 of 249 failed-over
deployments at 500 x 1,000)."""

from __future__ import annotations

from typing import Any

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import runtime, statuspatch
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.deployment import replicas
from mlxfleet_operator.handlers import deployments
from tests.unit.operator.builders import kopf_body, md


def _ready(*nodes: str) -> list[dict[str, Any]]:
    return [{"node": n, "phase": "Ready", "ready": True} for n in nodes]


def _body(found: mdep.ModelDeployment, rv: str) -> kopf.Body:
    wire = found.model_dump(mode="json", by_alias=True, exclude_none=True)
    wire["metadata"]["resourceVersion"] = rv
    return kopf_body(wire)


def test_a_lagging_body_reads_the_placements_last_written() -> None:
    none: Any = None
    rt = runtime.Runtime(
        config=opsettings.OperatorSettings(), kube=none, fleet=none, publisher=none
    )
    before = md(placements=_ready("lost", "a"))  # the body before the failover's write
    stale = _body(before, "5")
    failed_over = before.status.model_copy(
        update={"placements": mdep.ModelDeploymentStatus.model_validate(
            {"placements": _ready("a", "f")}
        ).placements}
    )  # fmt: skip
    statuspatch.write_status({}, failed_over, stale, rt.objects)

    seen = deployments._as_sent(rt, before, stale)
    assert replicas.current_nodes(seen, {}) == ["a", "f"]
    assert seen.spec == before.spec  # only the placements are read from the write

    moved_on = _body(before, "6")  # a newer body (someone else's write): it counts as it is
    assert deployments._as_sent(rt, before, moved_on) is before
    other = md(placements=_ready("lost", "a")).model_copy(
        update={"metadata": before.metadata.model_copy(update={"uid": "another"})}
    )
    assert deployments._as_sent(rt, other, _body(other, "5")) is other  # nothing written
