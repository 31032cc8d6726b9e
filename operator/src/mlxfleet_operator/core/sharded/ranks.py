"""The slot spec of one rank of a sharded group (pure): the deployment's slot spec for the
formation's model, with the rank, world size and ring hostfile, and the rank's share of memory.

May import: the agent `contract`, `api`, `core.fleet`, `core.deployment.slots`,
`core.sharded.formation`. Called by: the sharded ModelDeployment handler and
`core.swapplan.groups` (a step's ranks), through `core.sharded`.
"""

from __future__ import annotations

from mlxfleet_agent import contract
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.deployment import slots
from mlxfleet_operator.core.fleet import groupplacement
from mlxfleet_operator.core.sharded.formation import Formation


def rank_spec(
    md: mdep.ModelDeployment,
    formation: Formation,
    rank: groupplacement.RankPlan,
    *,
    strategy: contract.SwapStrategy | None = None,
    drain_timeout_seconds: int | None = None,
) -> contract.SlotSpec:
    """What the agent on `rank`'s node runs: rank `rank.rank` of `formation`."""
    sh = md.spec.sharding
    assert sh is not None
    base = slots.slot_spec(
        md, formation.model, strategy=strategy, drain_timeout_seconds=drain_timeout_seconds
    )
    shard = contract.RankSpec(
        group=formation.id,
        rank=rank.rank,
        world_size=len(formation.plan.ranks),
        hosts=list(formation.hosts),
        backend=sh.to_agent_backend(),
        mode=sh.to_agent_mode(),
    )
    return base.model_copy(update={"shard": shard, "memory_bytes": rank.memory_bytes})
