"""Pure parts of join, bootstrap tokens and the kubectl plugin: flags, facts, objects, rendering."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from mlxfleet_agent.join import facts, plan
from mlxfleet_operator.bootstrap import tokens
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.kubectl_plugin import render


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("a=b,=c", id="empty-key"),
        pytest.param("novalue", id="no-equals"),
        pytest.param("k=" + "v" * 64, id="value-too-long"),
        pytest.param("k=-v", id="value-starts-with-dash"),
        pytest.param("Bad Prefix/k=v", id="bad-prefix"),
    ],
)
def test_bad_labels_name_the_flag(bad: str) -> None:
    with pytest.raises(plan.JoinError, match="--labels"):
        plan.labels([bad])


def test_labels_merge_repeated_and_comma_separated() -> None:
    assert plan.labels(["a=1,mlxfleet.io/room=lab-2", "b="]) == {
        "a": "1", "mlxfleet.io/room": "lab-2", "b": ""
    }  # fmt: skip


def _token_create_namespace(text: str) -> str:
    return tokens.check_namespace(text, flag="--secrets-namespace")


CHECKS = {
    "--server": (plan.server,),
    "--secrets-namespace": (plan.secrets_namespace, _token_create_namespace),
}


@pytest.mark.parametrize(
    ("flag", "text", "ok"),
    [
        pytest.param("--server", "https://k8s.example.com:6443", True, id="https"),
        pytest.param("--server", "http://k8s:6443", False, id="http"),
        pytest.param("--server", "https://k8s:6443/api", False, id="path"),
        pytest.param("--server", "https://k8s:99999", False, id="port"),
        pytest.param("--server", "k8s:6443", False, id="no-scheme"),
        pytest.param("--secrets-namespace", "mlxfleet-agents", True, id="namespace-default"),
        pytest.param("--secrets-namespace", "mlxfleet-system", True, id="namespace-legacy"),
        pytest.param("--secrets-namespace", "Agents", False, id="namespace-upper"),
        pytest.param("--secrets-namespace", "a/b", False, id="namespace-slash"),
        pytest.param("--secrets-namespace", "", False, id="namespace-empty"),
    ],
)
def test_flag_values_of_join_and_token_create(flag: str, text: str, ok: bool) -> None:
    for check in CHECKS[flag]:
        if ok:
            assert check(text) == text
        else:
            with pytest.raises((plan.JoinError, tokens.TokenError), match=flag):
                check(text)


def test_node_objects_point_only_at_their_own_secret_and_wait_for_approval() -> None:
    """The InferenceNode join writes takes nothing before a person approves it: approved: false,
    unschedulable: true, no label (the labels it asks for wait in an annotation)."""
    node = plan.inference_node(
        "mac-1", namespace=plan.NAMESPACE, url="https://10.0.0.2:8470",
        facts=plan.Facts(chip="Apple M2 Ultra", memory_bytes=192 * 2**30, gpu_cores=76),
        extra_labels={"room": "a"},
    )  # fmt: skip
    assert node["spec"]["agent"]["tokenSecretRef"] == {
        "name": "mac-1-agent",
        "namespace": "mlxfleet-agents",
    }
    assert node["spec"]["agent"]["caSecretRef"]["name"] == "mac-1-agent"
    assert "labels" not in node["metadata"]
    assert json.loads(node["metadata"]["annotations"][plan.REQUESTED_LABELS]) == {
        "mlxfleet.io/chip-family": "m2-ultra", "mlxfleet.io/gpu-cores": "76",
        "mlxfleet.io/memory-gib": "192", "room": "a",
    }  # fmt: skip
    assert set(node["metadata"]) == {"name", "annotations"}
    assert (node["spec"]["approved"], node["spec"]["unschedulable"]) == (False, True)
    assert set(node["spec"]) == {"agent", "hardware", "approved", "unschedulable"}
    assert node["spec"]["hardware"] == {"chip": "Apple M2 Ultra", "memory": "196608Mi"}
    secret = plan.secret("mac-1", namespace=plan.NAMESPACE, token="t", ca_pem="pem")
    assert secret["metadata"]["namespace"] == "mlxfleet-agents"
    assert secret["metadata"]["labels"][plan.CREDENTIALS_LABEL] == "true"
    assert set(secret["stringData"]) == {"token", "ca.crt"}


def test_hardware_fact_parsers() -> None:
    assert facts.meminfo_bytes("MemTotal:       24576000 kB\nMemFree: 1 kB\n") == 24576000 * 1024
    assert facts.meminfo_bytes("garbage") is None
    profiler = '{"SPDisplaysDataType": [{"sppci_cores": "38", "sppci_model": "Apple M2 Max"}]}'
    assert facts.gpu_cores(profiler) == 38
    assert facts.gpu_cores("not json") is None
    assert plan.chip_family("Apple M3") == "m3"
    assert plan.chip_family("Intel(R) Xeon(R)") is None
    assert plan.default_node_name("Mac-Studio_1.local") == "mac-studio-1"


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        pytest.param("30m", True, id="minutes"),
        pytest.param("7d", True, id="days"),
        pytest.param("31d", False, id="too-long"),
        pytest.param("10s", False, id="too-short"),
        pytest.param("1 hour", False, id="words"),
    ],
)
def test_token_ttl(text: str, ok: bool) -> None:
    if ok:
        assert tokens.parse_ttl(text) >= timedelta(minutes=1)
    else:
        with pytest.raises(tokens.TokenError, match="--ttl"):
            tokens.parse_ttl(text)


def test_token_secret_is_what_the_apiserver_reads() -> None:
    token = tokens.generate()
    assert tokens.parse(str(token)) == token
    now = datetime(2026, 1, 1, tzinfo=UTC)
    body = tokens.secret(token, now=now, ttl=timedelta(hours=2), group=tokens.DEFAULT_GROUP,
                         description="d")  # fmt: skip
    assert body["type"] == "bootstrap.kubernetes.io/token"
    assert body["stringData"]["expiration"] == "2026-01-01T02:00:00Z"
    assert tokens.listed(body["stringData"]).expired(now + timedelta(hours=3))
    with pytest.raises(tokens.TokenError, match="--group"):
        tokens.check_group("system:masters")
    with pytest.raises(tokens.TokenError, match="--token"):
        tokens.parse("abc.def")


def test_memory_bar_and_top_arithmetic() -> None:
    assert render.bar(5, 20, width=4) == "[#...]  25%"
    assert "?" in render.bar(1, None)
    deployment = {"metadata": {"namespace": "ns", "name": "chat"}}
    slot = naming.slot_name("ns", "chat")
    labels = frozenset({("slot", slot), ("model", "chat")})

    def sample(tokens_: float, ttft_sum: float, count: float) -> render.Samples:
        return {
            ("mlxfleet_agent_completion_tokens_total", labels): tokens_,
            ("mlxfleet_agent_time_to_first_token_seconds_sum", labels): ttft_sum,
            ("mlxfleet_agent_time_to_first_token_seconds_count", labels): count,
        }

    (row,) = render.top([sample(100, 1.0, 10)], [sample(400, 2.0, 20)], seconds=3,
                        deployments=[deployment])  # fmt: skip
    assert (row.deployment, row.tokens_per_s, row.requests) == ("ns/chat", 100.0, 10)
    assert row.ttft_s == pytest.approx(0.1)
