"""Deterministic names and heartbeat debounce."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.kit import heartbeat, naming

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        pytest.param("default", "chat", id="short"),
        pytest.param("team-a", "x" * 253, id="long"),
        pytest.param("ns", "llama.3-8b", id="dots"),
        pytest.param("a" * 63, "9model", id="long-namespace"),
    ],
)
def test_slot_name_is_a_dns_label_and_stable(namespace: str, name: str) -> None:
    slot = naming.slot_name(namespace, name)
    assert LABEL.match(slot)
    assert slot == naming.slot_name(namespace, name)


def test_slot_names_do_not_collide_on_dashes() -> None:
    assert naming.slot_name("a-b", "c") != naming.slot_name("a", "b-c")
    assert naming.slot_name("default", "chat").startswith("default-chat-")


def test_service_name() -> None:
    assert naming.service_name("chat") == "chat"
    long = naming.service_name("llama.3." + "x" * 80)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", long)
    assert len(long) <= 63


def test_swap_plan_name_depends_on_target_and_generation() -> None:
    a = naming.swap_plan_name("chat", ModelRef("file:///a"), generation=2)
    assert a == naming.swap_plan_name("chat", ModelRef("file:///a"), generation=2)
    assert a != naming.swap_plan_name("chat", ModelRef("file:///b"), generation=2)
    assert a != naming.swap_plan_name("chat", ModelRef("file:///a", "v2"), generation=2)
    assert a != naming.swap_plan_name("chat", ModelRef("file:///a"), generation=3)


def test_swap_plan_names_are_those_of_earlier_releases() -> None:
    """An operator restarted across an upgrade finds the plan it made (409), never a second."""
    assert naming.swap_plan_name("chat", ModelRef("file:///a"), generation=2) == "chat-05d06b60"
    assert naming.swap_plan_name("chat", ModelRef("file:///a", "v2"), generation=2) == (
        "chat-cd9dc989"
    )


def run(
    results: list[bool], threshold: int = 3, start: heartbeat.Health | None = None
) -> list[heartbeat.Observation]:
    health = start or heartbeat.Health()
    out = []
    for i, ok in enumerate(results):
        obs = heartbeat.observe(health, ok=ok, now=NOW + timedelta(seconds=i), threshold=threshold)
        out.append(obs)
        health = obs.health
    return out


def test_one_slow_answer_does_not_flap() -> None:
    obs = run([True, False, True, False, False, True])
    assert [o.health.ready for o in obs] == [True] * 6
    assert [o.flipped for o in obs] == [True, False, False, False, False, False]


def test_n_consecutive_misses_make_not_ready_once() -> None:
    obs = run([True, False, False, False, False, True])
    assert [o.health.ready for o in obs] == [True, True, True, False, False, True]
    assert [o.flipped for o in obs] == [True, False, False, True, False, True]
    assert obs[3].health.last_heartbeat == NOW


def test_new_node_waits_for_threshold_before_judging() -> None:
    obs = run([False, False, False])
    assert [o.health.ready for o in obs] == [None, None, False]


def test_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="threshold"):
        heartbeat.observe(heartbeat.Health(), ok=True, now=NOW, threshold=0)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("chat", id="short"),
        pytest.param("x" * 63, id="63"),
        pytest.param("x" * 64, id="64"),
        pytest.param(f"{'a' * 60}.{'b' * 60}.{'c' * 60}", id="dots-182"),
        pytest.param("9" * 253, id="253"),
    ],
)
def test_label_value_is_bounded_readable_and_collision_safe(name: str) -> None:
    value = naming.label_value(name)
    assert len(value) <= 63
    assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value)
    assert value == naming.label_value(name)
    if len(name) <= 63:
        assert value == name  # unchanged where it always worked: selectors keep matching
    else:
        assert value.startswith(name[:40])
        assert value != naming.label_value(name[:-1] + "z")


@pytest.mark.parametrize("length", [1, 63, 64, 100, 253])
def test_service_names_are_dns_1035_labels_for_every_name_length(length: int) -> None:
    name = ("a" + "b." * length)[:length].rstrip(".")
    service = naming.service_name(name)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", service)
    assert len(service) <= 63
    assert naming.service_name(name + "c") != service


@pytest.mark.parametrize("length", [1, 48, 49, 100, 253])
def test_agent_metrics_services_are_dns_1035_labels_for_every_node_name(length: int) -> None:
    name = ("m" + "a." * length)[:length].rstrip(".")
    service = naming.agent_metrics_service(name)
    assert re.fullmatch(r"mlxfleet-agent-[a-z0-9]([-a-z0-9]*[a-z0-9])?", service)
    assert len(service) <= 63
    assert naming.agent_metrics_service(name + "c") != service
    assert naming.agent_metrics_service("mac-1") == "mlxfleet-agent-mac-1"  # readable when it fits
