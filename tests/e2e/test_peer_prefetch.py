"""Weights Mac to Mac through the control plane: a model change becomes a SwapPlan, the operator
prefetches the new model to the plan's node from a node whose `status.cachedModels` holds it (not
from the origin: SeaweedFS's own byte counter stays put), and the plan completes. The time from
the SwapPlan's creation to Completed is printed (the bench has the with/without comparison)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import E2E, Agents, Operator, is_true, wait_for
from tests.support.s3 import S3Server

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.s3]

PEER_TOKEN = "fleet-peer-token-for-the-e2e-test"


def upload(s3: S3Server, model: Path, bucket: str, prefix: str) -> None:
    for path in sorted(model.iterdir()):
        s3.client().upload_file(str(path), bucket, f"{prefix}/{path.name}")


def cached_sources(e2e: E2E, node: str) -> set[str]:
    status = e2e.get("inode", node, namespaced=False).get("status", {})
    return {c["source"] for c in status.get("cachedModels", [])}


def test_swap_plan_prefetches_the_new_model_from_a_peer(
    e2e: E2E,
    agents: Agents,
    operator: Operator,
    model_a: Path,
    model_b: Path,
    s3_server: S3Server,
    tmp_path: Path,
) -> None:
    bucket = s3_server.make_bucket()
    upload(s3_server, model_a, bucket, "a")
    upload(s3_server, model_b, bucket, "b")
    source_a, source_b = f"s3://{bucket}/a", f"s3://{bucket}/b"
    token = tmp_path / "peer-token"
    token.write_text(PEER_TOKEN)
    token.chmod(0o600)
    flags = ["--peer-token-file", str(token)]
    env: dict[str, str | None] = dict(s3_server.env())
    runner = agents.start("runner", env=env, flags=flags)
    seed = agents.start("seed", env=env, flags=flags)
    runner_node = e2e.register(runner)
    seed_node = e2e.register(seed)

    # the seed holds model b (from the origin), and the operator sees it in status.cachedModels
    resp = httpx.post(
        f"{seed.url}/v1/models/prefetch",
        json={"source": source_b},
        headers={"Authorization": f"Bearer {seed.token}"},
        timeout=30,
    )
    assert resp.status_code == 202, resp.text
    wait_for("seed's cachedModels", lambda: source_b in cached_sources(e2e, seed_node), timeout=60)

    def deployment(source: str) -> dict[str, Any]:
        body = e2e.deployment("chat", model_a, replicas=1, placement={"nodes": [runner_node]})
        body["spec"]["model"] = {"source": source}
        return body

    e2e.apply(deployment(source_a))
    wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"), timeout=180)
    before = s3_server.bytes_sent(bucket)

    e2e.apply(deployment(source_b))
    plan = str(
        wait_for(
            "SwapPlan named in status",
            lambda: e2e.get("mdep", "chat").get("status", {}).get("swapPlan"),
        )
    )
    created = time.monotonic()
    wait_for(
        "SwapPlan Completed",
        lambda: e2e.get("swp", plan).get("status", {}).get("phase") == "Completed",
        timeout=240,
    )
    print(f"SwapPlan {plan}: created to Completed in {time.monotonic() - created:.1f} s")
    assert s3_server.bytes_sent(bucket) - before == 0, "the new model came from the origin"
    state = httpx.get(
        f"{runner.url}/v1/state", headers={"Authorization": f"Bearer {runner.token}"}, timeout=10
    ).json()
    assert state["counters"]["peer_bytes_received"] > 0
    assert source_b in {c["source"] for c in state["cachedModels"]}
    operator.assert_alive()
