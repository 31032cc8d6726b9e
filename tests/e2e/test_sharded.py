"""Sharded replicas: a 2-rank tensor group of the tiny llama across two agents on loopback (ring
backend over TCP), served through rank 0's data plane with the `openai` client; its greedy
answer equals a single-node replica's. SIGKILL the agent of rank 1: the group leaves the
EndpointSlice, rank 0 is stopped (no rank runs alone), and after the failover delay the group
re-forms on the spare node; no process of the old formation is left anywhere."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, FAILOVER_DELAY, Agents, Operator, is_true, wait_for
from tests.e2e.loadgen import Load
from tests.support.s3 import S3Server

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.slow]
PROMPT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]


def answer(endpoint: str, model: str) -> str:
    client = openai.OpenAI(base_url=endpoint + "/v1", api_key="unused", max_retries=0, timeout=60)
    reply = client.chat.completions.create(
        model=model,
        messages=PROMPT,
        max_tokens=12,
        temperature=0.0,
    )
    return reply.choices[0].message.content or ""


def rank_processes(marker: str) -> list[int]:
    """Pids of live processes whose environment names a hostfile of formation `marker`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"MLX_HOSTFILE=" in env and f"hostfile-{marker}-".encode() in env:
            pids.append(int(proc.name))
    return pids


def leader_ready(e2e: E2E, service: str) -> list[bool]:
    return [
        bool(ep["conditions"].get("ready"))
        for s in e2e.list("endpointslices")
        if s["metadata"]["labels"].get("kubernetes.io/service-name") == service
        for ep in s.get("endpoints", [])
    ]


def watch_withdrawal(e2e: E2E, service: str) -> list[float]:
    """Watch the service's EndpointSlices from now on (the API server's own events, not a
    kubectl round trip): the returned list gets the monotonic time when an endpoint turns not
    ready."""
    # kubernetes' config and watch modules are unannotated: their calls are ignored below
    config = str(e2e.cluster.kubeconfig)
    client = kubernetes.config.new_client_from_config(config)  # type: ignore[no-untyped-call]
    api = kubernetes.client.DiscoveryV1Api(client)
    seen: list[float] = []
    started = threading.Event()

    def run() -> None:
        w = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
        stream = w.stream(  # type: ignore[no-untyped-call]
            api.list_namespaced_endpoint_slice,
            e2e.namespace,
            label_selector=f"kubernetes.io/service-name={service}",
            timeout_seconds=60,
        )
        for event in stream:
            started.set()
            eps = event["object"].endpoints or []
            if any(not (ep.conditions and ep.conditions.ready) for ep in eps):
                seen.append(time.monotonic())
                w.stop()  # type: ignore[no-untyped-call]
                return

    threading.Thread(target=run, daemon=True).start()
    assert started.wait(10), "EndpointSlice watch did not start"
    return seen


def test_two_rank_group_serves_fails_over_and_reforms(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    pool = {e2e.register(a): a for a in (agents.start("a"), agents.start("b"), agents.start("c"))}
    first = sorted(pool)[:2]
    e2e.apply(e2e.deployment("solo", model_a, replicas=1, placement={"nodes": [first[0]]}))
    started = time.monotonic()
    e2e.apply(
        e2e.deployment(
            "big",
            model_a,
            replicas=1,
            sharding={"size": 2, "mode": "Tensor"},
            placement={"nodes": first + [n for n in sorted(pool) if n not in first]},
        )
    )
    md: dict[str, Any] = wait_for(
        "sharded group Ready",
        lambda: (d := e2e.get("mdep", "big")) and is_true(d, "Ready") and d,
    )
    to_ready = time.monotonic() - started
    group = md["status"]["groups"][0]
    assert [r["rank"] for r in group["ranks"]] == [0, 1]
    assert sorted(r["node"] for r in group["ranks"]) == first
    assert group["ready"]
    assert all(r["ready"] for r in group["ranks"])
    leader = group["ranks"][0]
    # only rank 0 is published, and it answers like a single node does (greedy)
    slices = [
        s
        for s in e2e.list("endpointslices")
        if s["metadata"]["labels"].get("kubernetes.io/service-name") == "big"
    ]
    ports = [s["ports"][0]["port"] for s in slices]
    assert ports == [pool[leader["node"]].data_port]
    wait_for("solo Ready", lambda: is_true(e2e.get("mdep", "solo"), "Ready"))
    solo = answer(e2e.get("mdep", "solo")["status"]["placements"][0]["endpoint"], "solo")
    sharded = answer(leader["endpoint"], "big")
    assert sharded == solo, (sharded, solo)
    follower = group["ranks"][1]["node"]
    with pytest.raises(openai.NotFoundError):  # a follower's data plane does not serve it
        answer(pool[follower].data_url, "big")
    old = group["id"]
    assert len(rank_processes(old)) == 2

    withdrawn = watch_withdrawal(e2e, "big")
    killed = time.monotonic()
    pool[follower].kill()
    wait_for("group out of the endpoints", lambda: leader_ready(e2e, "big") == [False],
             interval=0.05)  # fmt: skip
    left = withdrawn[0] - killed
    wait_for("no rank of the old formation left", lambda: not rank_processes(old), timeout=30)
    orphans_gone = time.monotonic() - killed
    spare = next(n for n in pool if n not in first)
    reformed: dict[str, Any] = wait_for(
        "group re-formed on the spare node",
        lambda: (
            (d := e2e.get("mdep", "big"))
            and is_true(d, "Ready")
            and sorted(r["node"] for r in d["status"]["groups"][0]["ranks"])
            == sorted([leader["node"], spare])
            and d
        ),
    )
    reform = time.monotonic() - killed
    new = reformed["status"]["groups"][0]
    assert new["id"] != old
    assert leader_ready(e2e, "big") == [True]
    assert answer(new["ranks"][0]["endpoint"], "big") == solo
    assert len(rank_processes(new["id"])) == 2
    assert not rank_processes(old)
    slot = naming.slot_name(e2e.namespace, "big")
    pool[follower].start()  # the lost node returns: its stale rank slot is removed, not rerun
    wait_for(
        "stale rank slot removed",
        lambda: all(s["name"] != slot for s in pool[follower].state()["slots"]),
    )
    assert len(rank_processes(new["id"])) == 2
    print(
        f"\nsharded: Ready in {to_ready:.1f}s; out of endpoints {left:.2f}s after the kill; "
        f"old ranks gone {orphans_gone:.2f}s; re-formed Ready {reform:.1f}s "
        f"(failover delay {FAILOVER_DELAY}s)"
    )
    assert left < 1.0, left  # issue 10: the group leaves the endpoints within 1 s (the API
    # server's watch event; the operator's group watch withdraws rank 0 once its agent saw it)
    operator.assert_alive()


def test_three_rank_group_answers_like_one_node_and_survives_losing_rank_0(
    e2e: E2E, agents: Agents, operator: Operator, model_tri: Path
) -> None:
    """A 3-rank tensor group of a model with 3 KV heads: Ready on three agents, every rank
    running, rank 0 alone published, and its greedy answer equals a single node's. SIGKILL of
    rank 0's agent: the group leaves the endpoints within 1 s, the followers stop, and the group
    re-forms on the two survivors plus the spare."""
    pool = {
        e2e.register(a): a
        for a in (agents.start("a"), agents.start("b"), agents.start("c"), agents.start("d"))
    }
    names = sorted(pool)[:3]
    spare = sorted(pool)[3]
    e2e.apply(e2e.deployment("solo3", model_tri, replicas=1, placement={"nodes": [spare]}))
    started = time.monotonic()
    e2e.apply(
        e2e.deployment(
            "big3",
            model_tri,
            replicas=1,
            sharding={"size": 3, "mode": "Tensor"},
            placement={"nodes": [*names, spare]},
        )
    )
    md: dict[str, Any] = wait_for(
        "3-rank group Ready",
        lambda: (d := e2e.get("mdep", "big3")) and is_true(d, "Ready") and d,
    )
    to_ready = time.monotonic() - started
    group = md["status"]["groups"][0]
    assert [r["rank"] for r in group["ranks"]] == [0, 1, 2]
    assert sorted(r["node"] for r in group["ranks"]) == names
    assert len(rank_processes(group["id"])) == 3
    leader = group["ranks"][0]
    assert leader_ready(e2e, "big3") == [True]
    wait_for("solo3 Ready", lambda: is_true(e2e.get("mdep", "solo3"), "Ready"))
    solo = answer(e2e.get("mdep", "solo3")["status"]["placements"][0]["endpoint"], "solo3")
    assert answer(leader["endpoint"], "big3") == solo

    old = group["id"]
    withdrawn = watch_withdrawal(e2e, "big3")
    killed = time.monotonic()
    pool[leader["node"]].kill()
    wait_for("group out of the endpoints", lambda: leader_ready(e2e, "big3") == [False],
             interval=0.05)  # fmt: skip
    left = withdrawn[0] - killed
    wait_for("no rank of the old formation left", lambda: not rank_processes(old), timeout=30)
    survivors = sorted([*(n for n in names if n != leader["node"]), spare])
    reformed: dict[str, Any] = wait_for(
        "group re-formed on the survivors and the spare",
        lambda: (
            (d := e2e.get("mdep", "big3"))
            and is_true(d, "Ready")
            and sorted(r["node"] for r in d["status"]["groups"][0]["ranks"]) == survivors
            and d
        ),
    )
    reform = time.monotonic() - killed
    new = reformed["status"]["groups"][0]
    assert answer(new["ranks"][0]["endpoint"], "big3") == solo
    assert len(rank_processes(new["id"])) == 3
    print(
        f"\nsharded x3: Ready in {to_ready:.1f}s; rank 0's agent killed: out of endpoints "
        f"{left:.2f}s, re-formed Ready {reform:.1f}s"
    )
    assert left < 1.0, left
    operator.assert_alive()


def swapped(e2e: E2E, name: str, model: Path, **spec: Any) -> tuple[dict[str, Any], float]:
    """Change the deployment's model; wait for its SwapPlan to complete. The plan and seconds."""
    changed = time.monotonic()
    e2e.apply(
        e2e.deployment("big", model, replicas=1, sharding={"size": 2, "mode": "Tensor"}, **spec)
    )
    plan = str(
        wait_for(
            "SwapPlan named in status",
            lambda: (
                (s := e2e.get("mdep", "big").get("status", {}).get("swapPlan")) and s != name and s
            ),
        )
    )
    wait_for(
        "SwapPlan Completed",
        lambda: e2e.get("swp", plan).get("status", {}).get("phase") == "Completed",
        timeout=300,
    )
    return e2e.get("swp", plan), time.monotonic() - changed


def test_sharded_swap_under_load_surge_then_hold(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path
) -> None:
    """A model change of a 2-rank group is a SwapPlan with one step for the group: Surge (both
    Macs have room for old + new ranks) under load with 0 failed requests, the new formation
    beside the old one until rank 0 switched; then back under Hold (the strategy asks for it):
    requests queue at rank 0 while the group is replaced, none fails. No rank of an old
    formation is left running."""
    pool = {e2e.register(a): a for a in (agents.start("a"), agents.start("b"))}
    nodes = sorted(pool)
    e2e.apply(
        e2e.deployment(
            "big", model_a, replicas=1, sharding={"size": 2, "mode": "Tensor"},
            placement={"nodes": nodes},
        )
    )  # fmt: skip
    md: dict[str, Any] = wait_for(
        "sharded group Ready", lambda: (d := e2e.get("mdep", "big")) and is_true(d, "Ready") and d
    )
    group = md["status"]["groups"][0]
    leader = group["ranks"][0]
    before = answer(leader["endpoint"], "big")
    placement = {"placement": {"nodes": nodes}}
    withdrawn = watch_withdrawal(e2e, "big")  # Surge: rank 0 stays in the endpoints throughout
    with Load([leader["endpoint"]], "big", workers_per_endpoint=2) as surge_load:
        time.sleep(2)
        surge, surge_s = swapped(e2e, "", model_b, **placement)
        time.sleep(1)
    (step,) = surge["status"]["steps"]
    assert (step["group"], step["node"]) == (0, leader["node"]), step
    assert step["ranks"] == [r["node"] for r in group["ranks"]], step
    assert step["strategy"] == "Surge", step
    assert step["strategyReason"].startswith("surge: every node of the new group has room"), step
    assert step["groupId"] != group["id"]
    assert surge_load.failed == 0, surge_load.errors[:5]
    assert withdrawn == [], "rank 0 left the EndpointSlice during a Surge swap"
    assert surge_load.ok > 0
    assert step["requestsFailed"] == 0, step
    assert step["requestsServed"] > 0, step  # the load ran through the swap
    assert step["warmAt"] <= step["switchedAt"] <= step["drainedAt"] <= step["finishedAt"]
    done = wait_for(
        "group Ready on the new model",
        lambda: (
            (d := e2e.get("mdep", "big"))
            and is_true(d, "Ready")
            and d["status"]["groups"][0]["source"] == f"file://{model_b}"
            and d["status"]["groups"][0]["id"] == step["groupId"]
            and d
        ),
    )
    wait_for("no rank of the old formation left", lambda: not rank_processes(group["id"]),
             timeout=30)  # fmt: skip
    assert len(rank_processes(step["groupId"])) == 2
    assert leader_ready(e2e, "big") == [True]
    after = answer(done["status"]["groups"][0]["ranks"][0]["endpoint"], "big")

    hold_spec = {**placement, "swap": {"strategy": "Hold"}}
    with Load([leader["endpoint"]], "big", workers_per_endpoint=2) as hold_load:
        time.sleep(2)
        hold, hold_s = swapped(e2e, surge["metadata"]["name"], model_a, **hold_spec)
        time.sleep(1)
    (back,) = hold["status"]["steps"]
    assert back["strategy"] == "Hold", back
    assert back["strategyReason"] == "hold: the swap strategy asks for Hold", back
    assert hold_load.failed == 0, hold_load.errors[:5]  # queued, never failed
    assert back["requestsFailed"] == 0, back
    wait_for("no rank of the surge formation left",
             lambda: not rank_processes(step["groupId"]), timeout=30)  # fmt: skip
    final = wait_for(
        "group Ready on the first model again",
        lambda: (
            (d := e2e.get("mdep", "big"))
            and is_true(d, "Ready")
            and d["status"]["groups"][0]["source"] == f"file://{model_a}"
            and d
        ),
    )
    assert answer(final["status"]["groups"][0]["ranks"][0]["endpoint"], "big") == before
    print(
        f"\nsharded swap: surge {surge_s:.1f}s, {surge_load.ok} ok / {surge_load.failed} failed "
        f"(step served {step['requestsServed']}); hold {hold_s:.1f}s, {hold_load.ok} ok / "
        f"{hold_load.failed} failed, max queue wait {back.get('maxQueueWaitMs', 0):.0f} ms; "
        f"answers differ between models: {before != after}"
    )
    operator.assert_alive()


@pytest.mark.s3
def test_a_new_group_copies_the_weights_from_a_peer_not_the_origin(
    e2e: E2E,
    agents: Agents,
    operator: Operator,
    model_a: Path,
    s3_server: S3Server,
    tmp_path: Path,
) -> None:
    """Prefetch ahead of need for a sharded group: a third agent (the seed) holds the model;
    both ranks' nodes copy it from the seed before their rank slots are PUT, so the origin
    (SeaweedFS's own byte counter) sends nothing while the group forms."""
    bucket = s3_server.make_bucket()
    for path in sorted(model_a.iterdir()):
        s3_server.client().upload_file(str(path), bucket, f"a/{path.name}")
    source = f"s3://{bucket}/a"
    token = tmp_path / "peer-token"
    token.write_text("fleet-peer-token-for-the-sharded-e2e")
    token.chmod(0o600)
    env: dict[str, str | None] = dict(s3_server.env())
    flags = ["--peer-token-file", str(token)]
    seed, r1, r2 = (agents.start(n, env=env, flags=flags) for n in ("seed", "r1", "r2"))
    seed_node = e2e.register(seed)
    ranks = sorted([e2e.register(r1), e2e.register(r2)])
    resp = httpx.post(
        f"{seed.url}/v1/models/prefetch",
        json={"source": source},
        headers={"Authorization": f"Bearer {seed.token}"},
        timeout=30,
    )
    assert resp.status_code == 202, resp.text
    wait_for(
        "seed's cachedModels",
        lambda: (
            source
            in {
                c["source"]
                for c in e2e.get("inode", seed_node, namespaced=False)
                .get("status", {})
                .get("cachedModels", [])
            }
        ),
        timeout=60,
    )
    before = s3_server.bytes_sent(bucket)
    assert before > 0  # the seed's own copy came from the origin
    body = e2e.deployment(
        "big", model_a, replicas=1, sharding={"size": 2, "mode": "Tensor"},
        placement={"nodes": ranks},
    )  # fmt: skip
    body["spec"]["model"] = {"source": source}
    started = time.monotonic()
    e2e.apply(body)
    md = wait_for(
        "sharded group Ready",
        lambda: (d := e2e.get("mdep", "big")) and is_true(d, "Ready") and d,
        timeout=180,
    )
    ready_s = time.monotonic() - started
    assert sorted(r["node"] for r in md["status"]["groups"][0]["ranks"]) == ranks
    assert s3_server.bytes_sent(bucket) - before == 0, "a rank's weights came from the origin"
    for agent in (r1, r2):
        state = agent.state()
        assert state["counters"]["peer_bytes_received"] > 0, state["counters"]
        assert source in {c["source"] for c in state["cachedModels"]}
    print(f"\nsharded group from a peer: Ready in {ready_s:.1f}s, origin bytes 0")
    operator.assert_alive()
