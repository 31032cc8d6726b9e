"""Report settings: per-node cost inputs (InferenceNode `spec.cost` shape), reference API price
and model -> namespace names. Read from a YAML file (a ConfigMap in the CronJobs).

May import: pydantic, yaml, `api`, `core.cost`. Called by: cli.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mlxfleet_operator.api import inferencenode
from mlxfleet_operator.core import cost


class ReferenceSpec(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_by_name=True, validate_by_alias=True)

    name: str = "reference API"
    input_usd_per_million: float = Field(alias="inputUSDPerMillion", ge=0)
    output_usd_per_million: float = Field(alias="outputUSDPerMillion", ge=0)


class ReportConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    nodes: dict[str, inferencenode.Cost] = Field(default_factory=dict)
    reference: ReferenceSpec | None = None
    namespaces: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_yaml(cls, text: str) -> ReportConfig:
        return cls.model_validate(yaml.safe_load(text) or {})

    @classmethod
    def from_file(cls, path: Path | None) -> ReportConfig:
        return cls() if path is None else cls.from_yaml(path.read_text())

    def cost_inputs(self) -> tuple[dict[str, cost.NodeCostInputs], list[str]]:
        """Usable inputs per node, and one problem line per node whose inputs are incomplete."""
        inputs: dict[str, cost.NodeCostInputs] = {}
        problems: list[str] = []
        for node, spec in self.nodes.items():
            try:
                inputs[node] = cost.inputs_from_spec(node, spec)
            except cost.CostInputError as exc:
                problems.append(str(exc))
        return inputs, problems

    def reference_price(self) -> cost.ReferencePrice | None:
        r = self.reference
        if r is None:
            return None
        return cost.ReferencePrice(r.name, r.input_usd_per_million, r.output_usd_per_million)
