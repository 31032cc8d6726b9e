"""Cost model on hand-computed cases (core/cost.py)."""

from __future__ import annotations

import pytest

from mlxfleet_operator.api import inferencenode
from mlxfleet_operator.core.kit import cost

MINI = cost.NodeCostInputs(
    purchase_price_usd=1461.0, amortization_months=24, electricity_usd_per_kwh=0.30
)
A = cost.ModelKey(namespace="team-a", model="llama-a")
B = cost.ModelKey(namespace="team-b", model="qwen-b")


def month_usage(node: str = "mini-1") -> cost.NodeUsage:
    return cost.NodeUsage(
        node=node,
        period_hours=730.5,
        reported_hours=730.5,
        busy_hours=146.1,
        energy_kwh=10.0,
        models=(
            cost.ModelUsage(
                A, busy_seconds=3 * 3600, prompt_tokens=2_000_000, completion_tokens=1_000_000
            ),
            cost.ModelUsage(
                B, busy_seconds=1 * 3600, prompt_tokens=250_000, completion_tokens=250_000
            ),
        ),
    )


def test_one_node_one_month_by_hand() -> None:
    nc = cost.node_cost(MINI, month_usage())
    assert nc.hardware_usd == pytest.approx(60.875)  # 1461 / 24, one average month
    assert nc.energy_usd == pytest.approx(3.0)  # 10 kWh x 0.30
    assert nc.total_usd == pytest.approx(63.875)
    assert nc.busy_fraction == pytest.approx(0.2)  # 146.1 / 730.5
    assert nc.utilised_usd == pytest.approx(12.775)
    assert nc.idle_usd == pytest.approx(51.1)
    # busy-time shares 3:1
    assert nc.allocations[A] == pytest.approx(9.58125)
    assert nc.allocations[B] == pytest.approx(3.19375)
    assert nc.tokens == 3_500_000
    assert nc.cost_per_million == pytest.approx(63.875 / 3.5)


def test_fleet_cost_per_million_and_reference_saving() -> None:
    ref = cost.ReferencePrice("cloud", input_usd_per_million=3.0, output_usd_per_million=15.0)
    fc = cost.fleet_cost([(MINI, month_usage())], reference=ref)
    by_key = {m.key: m for m in fc.models}
    assert by_key[A].cost_per_million == pytest.approx(9.58125 / 3)
    assert by_key[B].cost_per_million == pytest.approx(3.19375 / 0.5)
    # reference: A 2 x 3 + 1 x 15 = 21; B 0.25 x 3 + 0.25 x 15 = 4.5
    assert fc.reference_usd == pytest.approx(25.5)
    assert fc.saving_ratio == pytest.approx(25.5 / 63.875)
    assert fc.loaded_cost_per_million == pytest.approx(63.875 / 3.5)
    assert fc.idle_usd == pytest.approx(51.1)


def test_half_a_month_prorates_hardware() -> None:
    usage = cost.NodeUsage(
        node="n", period_hours=365.25, reported_hours=365.25, busy_hours=0, energy_kwh=0.0
    )
    assert cost.node_cost(MINI, usage).hardware_usd == pytest.approx(30.4375)


def test_energy_estimated_from_spec_watts_when_telemetry_has_none() -> None:
    inputs = cost.NodeCostInputs(
        purchase_price_usd=0.0,
        amortization_months=36,
        electricity_usd_per_kwh=0.25,
        idle_power_watts=5.0,
        busy_power_watts=40.0,
    )
    usage = cost.NodeUsage(
        node="n", period_hours=168, reported_hours=100, busy_hours=20, energy_kwh=None
    )
    nc = cost.node_cost(inputs, usage)
    assert nc.energy_estimated_from_spec
    assert nc.energy_kwh == pytest.approx(1.2)  # (5 W x 80 h + 40 W x 20 h) / 1000
    assert nc.energy_usd == pytest.approx(0.30)


def test_idle_node_is_all_idle_and_has_no_cost_per_million() -> None:
    usage = cost.NodeUsage(node="n", period_hours=10, reported_hours=10, busy_hours=0, energy_kwh=1)
    nc = cost.node_cost(MINI, usage)
    assert nc.utilised_usd == 0
    assert nc.idle_usd == pytest.approx(nc.total_usd)
    assert nc.cost_per_million is None


def test_namespaces_add_up_across_nodes() -> None:
    fc = cost.fleet_cost([(MINI, month_usage("mini-1")), (MINI, month_usage("mini-2"))])
    assert fc.namespaces["team-a"].allocated_usd == pytest.approx(2 * 9.58125)
    assert fc.namespaces["team-a"].tokens == 6_000_000
    assert fc.namespaces["team-a"].nodes == {"mini-1", "mini-2"}
    assert fc.saving_ratio is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(None, "spec.cost", id="no-cost"),
        pytest.param(
            {"amortizationMonths": 24, "electricityUSDPerKWh": 0.3},
            "purchasePriceUSD",
            id="no-price",
        ),
        pytest.param(
            {"purchasePriceUSD": 100, "amortizationMonths": 24}, "electricityUSDPerKWh", id="no-kwh"
        ),
    ],
)
def test_missing_inputs_name_the_field(spec: dict[str, float] | None, field: str) -> None:
    model = inferencenode.Cost.model_validate(spec) if spec is not None else None
    with pytest.raises(cost.CostInputError, match=field):
        cost.inputs_from_spec("mini-1", model)


def test_inputs_from_spec_reads_the_api_fields() -> None:
    model = inferencenode.Cost.model_validate(
        {
            "purchasePriceUSD": 1461,
            "amortizationMonths": 24,
            "electricityUSDPerKWh": 0.3,
            "idlePowerWatts": 5,
            "busyPowerWatts": 40,
        }
    )
    assert cost.inputs_from_spec("mini-1", model) == cost.NodeCostInputs(
        purchase_price_usd=1461,
        amortization_months=24,
        electricity_usd_per_kwh=0.3,
        idle_power_watts=5,
        busy_power_watts=40,
    )
