"""Sharded ModelDeployment decisions (pure), one module per concern:

- `request`: placement inputs: the model's cached copy (its shape), the group request sized from
  it, each node as placement sees it, where each group's ranks are now.
- `ring`: formation ids (`g<index>-<epoch>`) and ring addresses (host and port of each rank).
- `formation`: each placed group's formation, which groups the governing SwapPlan writes
  (`Governed`), the nodes to prefetch on, whether a SwapPlan is due and the plan to create.
- `ranks`: the slot spec of one rank (rank, world size, ring hostfile, memory share).
- `health`: a rank's health, the group watch's "rank lost", the broken groups.
- `groupstatus`: groups with their ranks, rank 0's endpoints, the verdict and the whole status.

Agents run a rank until its formation id changes. A broken group (a rank failed or its node
stopped answering) leaves the endpoints at once, its survivors' slots are deleted, and it re-forms
under a new id. A kept group keeps its model: a model change goes through a SwapPlan whose group
steps (`core.swapplan.groups`) write the new formation's ranks.

This package's namespace is what callers use (`sharded.formations(...)`); each name is defined
once, in the module of its concern, and the modules import each other, never this namespace.

May import: the standard library, `api`, the agent `contract` and `sizing`, sibling core modules
(`conditions`, `naming`, `fleet`, `deployment`). Called by: the sharded
ModelDeployment handler (`handlers.sharded`) and `core.swapplan.groups`.
"""

from mlxfleet_operator.core.sharded.formation import (
    Formation,
    Governed,
    formations,
    forming,
    new_plan,
    plan_due,
)
from mlxfleet_operator.core.sharded.groupstatus import Result, status, verdict
from mlxfleet_operator.core.sharded.health import RankHealth, broken_groups, rank_health, rank_lost
from mlxfleet_operator.core.sharded.ranks import rank_spec
from mlxfleet_operator.core.sharded.request import cached_model, current, group_request, node_view
from mlxfleet_operator.core.sharded.ring import (
    PORT_BASE,
    PORT_SPAN,
    epoch,
    hosts,
    next_id,
    ring_host,
    ring_port,
)

__all__ = [
    "PORT_BASE",
    "PORT_SPAN",
    "Formation",
    "Governed",
    "RankHealth",
    "Result",
    "broken_groups",
    "cached_model",
    "current",
    "epoch",
    "formations",
    "forming",
    "group_request",
    "hosts",
    "new_plan",
    "next_id",
    "node_view",
    "plan_due",
    "rank_health",
    "rank_lost",
    "rank_spec",
    "ring_host",
    "ring_port",
    "status",
    "verdict",
]
