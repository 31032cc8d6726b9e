"""The nodes a report knows, and each one's cost inputs: InferenceNodes, then report.yaml.

One name per node: an InferenceNode's `metadata.name` is the name its agent ships telemetry
under (the agent's `nodeName`); report.yaml `aliases` map any other telemetry name onto it.
With InferenceNodes read from the cluster (`cluster`), they are the inventory and their
`spec.cost` the cost inputs; a report.yaml `nodes` entry overrides the fields it sets (and a
report.yaml node that is no InferenceNode is kept, as outside a cluster). Without a cluster,
report.yaml `nodes` is the inventory. Pure: the caller lists the InferenceNodes.
May import: the standard library, pydantic, `api`, `core.kit.cost`, reports.config. Called by: cli.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from mlxfleet_operator.api import inferencenode
from mlxfleet_operator.core.kit import cost
from mlxfleet_operator.reports import config

LEFT_OUT = "left out of the cost figures"


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """What a report needs of one InferenceNode."""

    name: str
    cost: inferencenode.Cost | None
    problem: str | None = None  # why spec.cost could not be read


@dataclass(frozen=True, slots=True)
class Inventory:
    """Known nodes: name -> (cost spec or None, where it came from)."""

    nodes: dict[str, inferencenode.Cost | None] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # name -> why its inputs cannot be used

    def cost_inputs(self) -> tuple[dict[str, cost.NodeCostInputs], list[str]]:
        """Usable inputs per node, and one line per node whose inputs are missing or partial."""
        inputs: dict[str, cost.NodeCostInputs] = {}
        problems: list[str] = []
        for name, spec in self.nodes.items():
            if name in self.broken:
                problems.append(self.broken[name])
                continue
            try:
                inputs[name] = cost.inputs_from_spec(name, spec)
            except cost.CostInputError as exc:
                message = str(exc)
                if self.origins.get(name) == "InferenceNode":
                    message = "InferenceNode" + message.removeprefix("node")
                problems.append(f"{message}; {LEFT_OUT}")
        return inputs, problems


def _merged(base: inferencenode.Cost | None, override: inferencenode.Cost) -> inferencenode.Cost:
    if base is None:
        return override
    fields = base.model_dump(by_alias=True, exclude_none=True)
    fields |= override.model_dump(by_alias=True, exclude_unset=True)
    return inferencenode.Cost.model_validate(fields)


def build(cfg: config.ReportConfig, cluster: Sequence[ClusterNode] | None) -> Inventory:
    """The inventory from the cluster's InferenceNodes (None: not read) and the report config."""
    inv = Inventory()
    for n in cluster or ():
        inv.nodes[n.name] = n.cost
        inv.origins[n.name] = "InferenceNode"
        if n.problem is not None:
            inv.broken[n.name] = f"InferenceNode {n.name}: {n.problem}; {LEFT_OUT}"
    for name, override in cfg.nodes.items():
        try:
            inv.nodes[name] = _merged(inv.nodes.get(name), override)
            inv.broken.pop(name, None)  # report.yaml replaces what could not be read
        except ValidationError as exc:  # e.g. busy watts below the InferenceNode's idle watts
            why = exc.errors()[0]["msg"]
            inv.broken[name] = f"report config nodes.{name}: {why}; {LEFT_OUT}"
        inv.origins.setdefault(name, "report config")
    return inv
