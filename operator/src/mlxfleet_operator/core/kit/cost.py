"""The cost model: what the fleet's tokens cost, per model, namespace and node (pure).

Per node and report period:
    hardware  = purchasePriceUSD / amortizationMonths x period_hours / HOURS_PER_MONTH
    energy    = kWh (measured or estimated by the agent; else idle/busy watts x hours) x USD/kWh
    total     = hardware + energy
    utilised  = total x busy_hours / period_hours      (busy: at least one request in flight)
    idle      = total - utilised                       (capacity paid for but unused: shown apart)
The utilised cost is allocated to the models on the node by their share of slot busy time.
Cost per million tokens (CPM) of a model = its allocated cost / its tokens x 1e6; the fleet's
"loaded" CPM = all cost (idle included) / all tokens. A reference API price (USD per million
input and output tokens) prices the same tokens; saving ratio = reference / loaded cost.
May import: the standard library and `mlxfleet_operator.api`. Called by: reports.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from mlxfleet_operator.api import inferencenode

HOURS_PER_MONTH = 365.25 * 24 / 12  # 730.5
MILLION = 1_000_000


class CostInputError(ValueError):
    """A node's cost inputs are missing or inconsistent (the report names the node)."""


@dataclass(frozen=True, slots=True)
class NodeCostInputs:
    purchase_price_usd: float
    amortization_months: int
    electricity_usd_per_kwh: float
    idle_power_watts: float | None = None
    busy_power_watts: float | None = None


def inputs_from_spec(node: str, cost: inferencenode.Cost | None) -> NodeCostInputs:
    """InferenceNode `spec.cost` -> inputs; raises CostInputError naming the missing field."""
    if cost is None:
        raise CostInputError(f"node {node}: spec.cost is not set")
    missing = [
        alias
        for alias, value in (
            ("purchasePriceUSD", cost.purchase_price_usd),
            ("amortizationMonths", cost.amortization_months),
            ("electricityUSDPerKWh", cost.electricity_usd_per_kwh),
        )
        if value is None
    ]
    if missing:
        raise CostInputError(f"node {node}: spec.cost.{', spec.cost.'.join(missing)} not set")
    assert cost.purchase_price_usd is not None  # narrowed by the check above
    assert cost.amortization_months is not None
    assert cost.electricity_usd_per_kwh is not None
    return NodeCostInputs(
        purchase_price_usd=cost.purchase_price_usd,
        amortization_months=cost.amortization_months,
        electricity_usd_per_kwh=cost.electricity_usd_per_kwh,
        idle_power_watts=cost.idle_power_watts,
        busy_power_watts=cost.busy_power_watts,
    )


@dataclass(frozen=True, slots=True, order=True)
class ModelKey:
    namespace: str
    model: str


@dataclass(frozen=True, slots=True)
class ModelUsage:
    key: ModelKey
    busy_seconds: float
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """What telemetry says a node did in the period. Gaps are simply hours not reported."""

    node: str
    period_hours: float
    reported_hours: float
    busy_hours: float
    energy_kwh: float | None  # None: the agent could neither measure nor estimate
    models: tuple[ModelUsage, ...] = ()


@dataclass(frozen=True, slots=True)
class ReferencePrice:
    name: str
    input_usd_per_million: float
    output_usd_per_million: float
    provider: str | None = None  # whose list prices (a reader must be able to check them)
    as_of: str | None = None  # the date they were read (list prices change)

    @property
    def label(self) -> str:
        """`gpt-4o (OpenAI) list prices as of 2025-11-01`, or says what is not configured."""
        who = f"{self.name} ({self.provider})" if self.provider else self.name
        when = f" list prices as of {self.as_of}" if self.as_of else " list prices"
        missing = [k for k, v in (("provider", self.provider), ("asOf", self.as_of)) if not v]
        unsaid = f" (reference.{' and reference.'.join(missing)} not configured)" if missing else ""
        return who + when + unsaid

    def price(self, *, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_usd_per_million
            + completion_tokens * self.output_usd_per_million
        ) / MILLION


@dataclass(frozen=True, slots=True)
class NodeCost:
    node: str
    hardware_usd: float
    energy_usd: float
    energy_kwh: float
    energy_estimated_from_spec: bool
    utilised_usd: float
    idle_usd: float
    busy_fraction: float
    tokens: int
    allocations: dict[ModelKey, float]

    @property
    def total_usd(self) -> float:
        return self.hardware_usd + self.energy_usd

    @property
    def cost_per_million(self) -> float | None:
        return per_million(self.total_usd, self.tokens)


@dataclass(slots=True)
class ModelCost:
    key: ModelKey
    allocated_usd: float = 0.0
    busy_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    nodes: set[str] = field(default_factory=set)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_per_million(self) -> float | None:
        return per_million(self.allocated_usd, self.tokens)


@dataclass(frozen=True, slots=True)
class FleetCost:
    nodes: list[NodeCost]
    models: list[ModelCost]
    namespaces: dict[str, ModelCost]
    reference: ReferencePrice | None
    reference_usd: float | None

    @property
    def total_usd(self) -> float:
        return sum(n.total_usd for n in self.nodes)

    @property
    def idle_usd(self) -> float:
        return sum(n.idle_usd for n in self.nodes)

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.models)

    @property
    def loaded_cost_per_million(self) -> float | None:
        return per_million(self.total_usd, self.tokens)

    @property
    def saving_ratio(self) -> float | None:
        """Reference price / our loaded cost for the same tokens (3.0 = three times cheaper)."""
        if self.reference_usd is None or self.total_usd <= 0:
            return None
        return self.reference_usd / self.total_usd


def per_million(usd: float, tokens: int) -> float | None:
    """USD per million tokens (None without tokens); `usd_for` is its inverse."""
    return usd / tokens * MILLION if tokens > 0 else None


def usd_for(tokens: int, usd_per_million: float) -> float:
    """What `tokens` cost at `usd_per_million` USD per million tokens."""
    return usd_per_million * tokens / MILLION


def node_cost(inputs: NodeCostInputs, usage: NodeUsage) -> NodeCost:
    if inputs.amortization_months <= 0:
        raise CostInputError(f"node {usage.node}: amortizationMonths must be positive")
    if usage.period_hours <= 0:
        raise CostInputError("the report period must be longer than zero")
    hardware = inputs.purchase_price_usd / inputs.amortization_months
    hardware *= usage.period_hours / HOURS_PER_MONTH
    busy_hours = min(usage.busy_hours, usage.period_hours)
    kwh = usage.energy_kwh
    from_spec = False
    if kwh is None:
        if inputs.idle_power_watts is None or inputs.busy_power_watts is None:
            raise CostInputError(
                f"node {usage.node}: no energy in telemetry and no idle/busy watts in spec.cost"
            )
        idle_hours = max(0.0, usage.reported_hours - busy_hours)
        kwh = (inputs.idle_power_watts * idle_hours + inputs.busy_power_watts * busy_hours) / 1000
        from_spec = True
    energy = kwh * inputs.electricity_usd_per_kwh
    total = hardware + energy
    busy_fraction = busy_hours / usage.period_hours
    utilised = total * busy_fraction
    slot_busy = sum(m.busy_seconds for m in usage.models)
    allocations: dict[ModelKey, float] = defaultdict(float)
    if slot_busy > 0:
        for m in usage.models:
            allocations[m.key] += utilised * m.busy_seconds / slot_busy
    tokens = sum(m.prompt_tokens + m.completion_tokens for m in usage.models)
    return NodeCost(
        node=usage.node,
        hardware_usd=hardware,
        energy_usd=energy,
        energy_kwh=kwh,
        energy_estimated_from_spec=from_spec,
        utilised_usd=utilised if slot_busy > 0 else 0.0,
        idle_usd=total - utilised if slot_busy > 0 else total,
        busy_fraction=busy_fraction,
        tokens=tokens,
        allocations=dict(allocations),
    )


def fleet_cost(
    nodes: list[tuple[NodeCostInputs, NodeUsage]], *, reference: ReferencePrice | None = None
) -> FleetCost:
    """Cost of every node, allocated to models and namespaces; priced against `reference`."""
    costs = [node_cost(inputs, usage) for inputs, usage in nodes]
    models: dict[ModelKey, ModelCost] = {}
    for (_, usage), nc in zip(nodes, costs, strict=True):
        for m in usage.models:
            mc = models.setdefault(m.key, ModelCost(key=m.key))
            mc.busy_seconds += m.busy_seconds
            mc.prompt_tokens += m.prompt_tokens
            mc.completion_tokens += m.completion_tokens
            mc.nodes.add(usage.node)
        for key, usd in nc.allocations.items():
            models[key].allocated_usd += usd
    namespaces: dict[str, ModelCost] = {}
    for mc in models.values():
        ns = namespaces.setdefault(
            mc.key.namespace, ModelCost(key=ModelKey(namespace=mc.key.namespace, model="*"))
        )
        ns.allocated_usd += mc.allocated_usd
        ns.busy_seconds += mc.busy_seconds
        ns.prompt_tokens += mc.prompt_tokens
        ns.completion_tokens += mc.completion_tokens
        ns.nodes |= mc.nodes
    ordered = sorted(models.values(), key=lambda mc: mc.key)
    ref_usd = (
        reference.price(
            prompt_tokens=sum(m.prompt_tokens for m in ordered),
            completion_tokens=sum(m.completion_tokens for m in ordered),
        )
        if reference is not None
        else None
    )
    return FleetCost(
        nodes=costs,
        models=ordered,
        namespaces=dict(sorted(namespaces.items())),
        reference=reference,
        reference_usd=ref_usd,
    )
