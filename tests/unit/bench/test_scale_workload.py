"""The scale benchmark's generated workload fits its fleet, and its profile folding is right."""

from __future__ import annotations

import pytest
from benchmarks.scale import observe, run, workload

from mlxfleet_agent import sizing
from mlxfleet_operator.api import resources
from tests.support.hollow import config

GIB = 1024**3


@pytest.mark.parametrize("nodes", [50, 200, 500])
def test_every_deployment_fits_somewhere_and_demand_leaves_room(nodes: int) -> None:
    fleet = config.FleetConfig.generate(nodes, seed=1)
    entries = [
        {"name": n.name, "memoryBytes": n.memory_bytes, "url": "http://x", "token": n.token}
        for n in fleet.nodes
    ]
    labelled = [workload.inference_node(e, i)["metadata"]["labels"] for i, e in enumerate(entries)]
    budgets = [sizing.budget_bytes(n.memory_bytes) for n in fleet.nodes]
    items = workload.deployments(2 * nodes, namespace="scale", seed=1)
    assert workload.demand_bytes(items) < 0.5 * sum(budgets)
    for d in items:
        need = int(d["spec"]["resources"]["memory"].removesuffix("Gi")) * GIB
        selector = d["spec"]["placement"].get("nodeSelector", {})
        fits = [
            b
            for b, labels in zip(budgets, labelled, strict=True)
            if b >= need and all(labels.get(k) == v for k, v in selector.items())
        ]
        assert len(fits) >= d["spec"]["replicas"], d["metadata"]["name"]
    changed = workload.changed(items[0])
    assert changed["spec"]["model"]["source"] == items[0]["spec"]["model"]["source"] + "-v2"
    assert changed["spec"]["replicas"] == items[0]["spec"]["replicas"]


def test_profiles_fold_into_inclusive_and_own_shares() -> None:
    raw = "\n".join(
        [
            "main (x/mlxfleet_operator/main.py:1);reconcile (x/mlxfleet_operator/h.py:9) 30",
            "main (x/mlxfleet_operator/main.py:1);reconcile (x/mlxfleet_operator/h.py:12) 10",
            "main (x/mlxfleet_operator/main.py:1);poll (x/kopf/t.py:3) 60",
        ]
    )
    folded = observe.fold(raw)
    assert folded.samples == 100
    assert dict(folded.inclusive)["main (mlxfleet_operator/main.py)"] == 1.0
    assert dict(folded.inclusive)["reconcile (mlxfleet_operator/h.py)"] == 0.4
    assert folded.own[0] == ("poll (kopf/t.py)", 0.6)


def test_the_api_servers_profile_reads_into_its_heaviest_kubernetes_functions() -> None:
    text = "\n".join(
        [
            "File: kube-apiserver",
            "Duration: 45.02s, Total samples = 36.16s (80.32%)",
            "      flat  flat%   sum%        cum   cum%",
            "         0     0%     0%     18.78s 51.94%  k8s.io/apiserver/pkg/finisher.func1",
            "     0.30s  0.83% 39.02%      7.58s 20.96%  runtime.mallocgc",
            "         0     0%     0%     12.47s 34.49%  k8s.io/apiextensions-apiserver/x.Update",
            "     0.01s 0.028% 0.028%      1.21s  3.35%  sigs.k8s.io/structured-merge-diff/v.X",
            "     0.01s 0.028% 0.028%      2.84s  7.85%  encoding/json.Marshal",
            "         0     0%     0%      garbage  k8s.io/not.a.row",
        ]
    )
    assert observe.pprof_top(text) == [
        ("k8s.io/apiserver/pkg/finisher.func1", 0.5194),
        ("k8s.io/apiextensions-apiserver/x.Update", 0.3449),
        ("sigs.k8s.io/structured-merge-diff/v.X", 0.0335),
    ]
    assert observe.pprof_top(text, top=1) == [("k8s.io/apiserver/pkg/finisher.func1", 0.5194)]
    assert observe.pprof_top("") == []


def test_quantile_interpolates_inside_the_bucket_like_histogram_quantile() -> None:
    inf = float("inf")
    # 10 observations <= 0.01, 90 more <= 0.1, none slower: p50 falls in (0.01, 0.1]
    buckets = {0.01: 10.0, 0.1: 100.0, 1.0: 100.0, inf: 100.0}
    assert observe.quantile(0.5, buckets) == pytest.approx(0.01 + 0.09 * 40 / 90)
    assert observe.quantile(0.99, buckets) == pytest.approx(0.01 + 0.09 * 89 / 90)
    assert observe.quantile(0.05, buckets) == pytest.approx(0.005)
    # beyond the largest finite bound: that bound, not a made-up figure
    assert observe.quantile(0.99, {0.5: 1.0, inf: 10.0}) == 0.5
    assert observe.quantile(0.5, {0.5: 0.0, inf: 0.0}) is None
    assert observe.quantile(0.5, {}) is None


def test_a_quantile_beyond_the_largest_bucket_is_shown_as_such() -> None:
    inf = float("inf")
    buckets = {0.01: 10.0, 30.0: 50.0, inf: 100.0}
    assert run._ms(0.99, buckets) == ">30000"
    assert run._ms(0.5, buckets) == 30000.0  # the 50th observation is still <= 30 s
    assert run._ms(0.5, {0.01: 0.0, inf: 0.0}) is None


def test_token_secrets_carry_the_label_the_operator_requires() -> None:
    labels = workload.secret({"name": "n0", "token": "t"})["metadata"]["labels"]
    assert labels == {resources.AGENT_CREDENTIALS_LABEL: "true"}
