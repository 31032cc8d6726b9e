"""Scenarios 2, 3 and 5: a model change becomes a SwapPlan that runs node by node under load with
zero failed requests; Manual approval waits paused; an operator SIGKILLed mid-plan resumes it
without repeating a finished step."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, Agent, Agents, Operator, condition, is_true, wait_for
from tests.e2e.loadgen import Load

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]


def ready_deployment(
    e2e: E2E, agents: Agents, model: Path, **spec: Any
) -> tuple[dict[str, Any], list[Agent]]:
    started = [agents.start("a"), agents.start("b")]
    for agent in started:
        e2e.register(agent)
    e2e.apply(e2e.deployment("chat", model, **spec))
    md = wait_for(
        "deployment Ready", lambda: (d := e2e.get("mdep", "chat")) and is_true(d, "Ready") and d
    )
    return md, started


def change_model(e2e: E2E, model: Path, **spec: Any) -> str:
    e2e.apply(e2e.deployment("chat", model, **spec))
    return str(
        wait_for(
            "SwapPlan named in status",
            lambda: e2e.get("mdep", "chat").get("status", {}).get("swapPlan"),
        )
    )


def plan_phase(e2e: E2E, name: str) -> str | None:
    phase = e2e.get("swp", name).get("status", {}).get("phase")
    return str(phase) if phase is not None else None


@pytest.mark.slow
def test_model_change_under_load_has_zero_failures(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path
) -> None:
    md, started = ready_deployment(e2e, agents, model_a)
    endpoints = [p["endpoint"] for p in md["status"]["placements"]]
    with Load(endpoints, "chat") as load:
        time.sleep(2)
        plan = change_model(e2e, model_b)
        wait_for("SwapPlan Completed", lambda: plan_phase(e2e, plan) == "Completed", timeout=300)
        time.sleep(1)
    assert load.failed == 0, load.errors[:5]
    assert load.ok > 0
    swp = e2e.get("swp", plan)
    steps = swp["status"]["steps"]
    assert [s["phase"] for s in steps] == ["Completed", "Completed"]
    assert all(s["requestsFailed"] == 0 for s in steps)
    assert sum(s["requestsServed"] for s in steps) > 0  # the load really ran through the swaps
    assert swp["status"]["progress"] == "2/2"
    assert is_true(swp, "Ready")
    assert swp["status"]["observedGeneration"] == swp["metadata"]["generation"]
    new = f"file://{model_b}"
    done = wait_for(
        "placements on the new source",
        lambda: (
            (d := e2e.get("mdep", "chat"))
            and is_true(d, "Ready")
            and all(p["source"] == new for p in d["status"]["placements"])
            and d
        ),
    )
    assert done["status"]["readyReplicas"] == 2
    slot = naming.slot_name(e2e.namespace, "chat")
    for agent in started:
        assert [s["toSource"] for s in agent.swaps(slot)] == [new]
    operator.assert_alive()


def test_manual_approval_waits_paused(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path
) -> None:
    manual = {"swap": {"approval": "Manual"}}
    _, started = ready_deployment(e2e, agents, model_a, **manual)
    plan = change_model(e2e, model_b, **manual)
    wait_for("plan Paused", lambda: plan_phase(e2e, plan) == "Paused")
    time.sleep(3)
    assert plan_phase(e2e, plan) == "Paused"
    slot = naming.slot_name(e2e.namespace, "chat")
    assert all(agent.swaps(slot) == [] for agent in started)
    wait_for(
        "deployment says it awaits approval",
        lambda: condition(e2e.get("mdep", "chat"), "Ready").get("reason") == "AwaitingApproval",
    )
    e2e.kubectl(
        "-n", e2e.namespace, "patch", "swp", plan, "--type=merge", "-p", '{"spec":{"paused":false}}'
    )
    wait_for(
        "plan Completed after approval", lambda: plan_phase(e2e, plan) == "Completed", timeout=300
    )
    new = f"file://{model_b}"  # Ready alone held while it awaited approval (old model serving)
    wait_for(
        "deployment Ready on the new model",
        lambda: (
            is_true(d := e2e.get("mdep", "chat"), "Ready")
            and all(p["source"] == new for p in d["status"]["placements"])
        ),
    )


@pytest.mark.slow
def test_operator_killed_mid_plan_resumes_without_repeating(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path
) -> None:
    _, started = ready_deployment(e2e, agents, model_a)
    plan = change_model(e2e, model_b)
    slot = naming.slot_name(e2e.namespace, "chat")
    seen: list[tuple[Any, ...]] = []  # each distinct status the test saw, for a failure

    def first_step_finished() -> bool:
        status = e2e.get("swp", plan).get("status", {})
        steps = tuple((s.get("phase"), s.get("message")) for s in status.get("steps", []))
        now = (status.get("phase"), status.get("progress"), steps)
        if not seen or seen[-1] != now:
            seen.append(now)
        progress: str | None = status.get("progress")
        return progress == "1/2"

    try:
        wait_for("first step finished", first_step_finished, timeout=300, interval=0.2)
    except AssertionError as exc:  # say which way it went: stuck, skipped past 1/2, rolled back
        by_node = {agent.name: agent.swaps(slot) for agent in started}
        raise AssertionError(
            f"{exc}\nstatuses seen: {seen[-12:]}\nswap records: {by_node}\n"
            f"operator log:\n{operator.log()[-6000:]}"
        ) from exc
    operator.kill()
    time.sleep(2)
    operator.start()
    wait_for(
        "plan Completed after restart", lambda: plan_phase(e2e, plan) == "Completed", timeout=300
    )
    for agent in started:
        records = agent.swaps(slot)
        assert len(records) == 1, records  # each node swapped exactly once
        assert records[0]["outcome"] == "Completed"
    wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    operator.assert_alive()


def set_paused(e2e: E2E, plan: str, paused: bool) -> None:
    value = "true" if paused else "false"
    e2e.kubectl(
        "-n", e2e.namespace, "patch", "swp", plan, "--type=merge",
        "-p", f'{{"spec":{{"paused":{value}}}}}',
    )  # fmt: skip


def test_failed_step_rolls_back_the_whole_plan_under_load(
    e2e: E2E,
    agents: Agents,
    operator: Operator,
    model_a: Path,
    model_b: Path,
    broken_model: Path,
) -> None:
    """Step 1 (node a) swaps to the target, then the target breaks and step 2 (node b) fails:
    the plan swaps a back too, so both serve the old model; clients never see an error."""
    manual = {"swap": {"approval": "Manual"}}
    md, started = ready_deployment(e2e, agents, model_a, **manual)
    flaky = model_a.parent / f"flaky-{e2e.label}"  # inside the agents' allowed root
    shutil.copytree(model_b, flaky)
    endpoints = [p["endpoint"] for p in md["status"]["placements"]]
    with Load(endpoints, "chat") as load:
        time.sleep(1)
        plan = change_model(e2e, flaky, **manual)
        wait_for("plan Paused", lambda: plan_phase(e2e, plan) == "Paused")
        set_paused(e2e, plan, False)
        wait_for(
            "first step running",
            lambda: (
                [s["phase"] for s in e2e.get("swp", plan).get("status", {}).get("steps", [])][:1]
                not in ([], ["Pending"])
            ),
            interval=0.1,
        )
        set_paused(e2e, plan, True)  # the running step finishes; the next one waits
        wait_for(
            "first step done, plan paused",
            lambda: (
                (st := e2e.get("swp", plan).get("status", {})).get("progress") == "1/2"
                and st.get("phase") == "Paused"
            ),
            timeout=300,
        )
        # a serves the target from memory; b will fail to load it
        shutil.copyfile(broken_model / "model.safetensors", flaky / "model.safetensors")
        set_paused(e2e, plan, False)
        wait_for("plan RolledBack", lambda: plan_phase(e2e, plan) == "RolledBack", timeout=300)
        time.sleep(1)
    assert load.failed == 0, load.errors[:5]
    assert load.ok > 0
    swp = e2e.get("swp", plan)
    steps = swp["status"]["steps"]
    assert [s["phase"] for s in steps] == ["Reverted", "RolledBack"]
    assert steps[1]["message"]
    assert steps[0]["revert"]["requestsFailed"] == 0
    assert is_true(swp, "Stalled")
    old, new = f"file://{model_a}", f"file://{flaky}"
    assert steps[0]["fromSource"] == old
    assert condition(swp, "Ready")["message"].startswith(f"step on {steps[1]['node']} failed")
    deployment = wait_for(
        "deployment says why",
        lambda: (
            (d := e2e.get("mdep", "chat"))
            and condition(d, "Ready").get("reason") == "RolledBack"
            and d
        ),
    )
    assert is_true(deployment, "Stalled")
    assert plan in condition(deployment, "Ready")["message"]
    assert all(p["source"] == old for p in deployment["status"]["placements"])
    assert len(deployment["status"]["placements"]) == 2
    slot = naming.slot_name(e2e.namespace, "chat")
    for agent in started:  # every agent serves (and wants) the old model again

        def back_on_old(a: Agent = agent) -> bool:
            mine = [s for s in a.state()["slots"] if s["name"] == slot]
            return bool(mine) and all(s["source"] == old and s["ready"] for s in mine)

        wait_for("agent back on the old model", back_on_old)
    first = started[0]  # node a: swapped to the target, then back
    assert [s["toSource"] for s in first.swaps(slot)] == [old, new]
    for placement in md["status"]["placements"]:
        client = openai.OpenAI(
            base_url=placement["endpoint"] + "/v1", api_key="unused", max_retries=0
        )
        reply = client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert reply.choices[0].message.content
    operator.assert_alive()
