"""The demo samples work on the demo fleet (issue 28 item 10): the shipped `qwen3-8b` sample
selects `chip-family=m2-ultra`, which no demo node has, so a new user's first `kubectl apply`
of a sample never became Ready. `manifests/samples/demo` is applied here as the demo's hints say,
to a fleet laid out as `make demo` lays it out (two agents labelled `mlxfleet.io/demo=true`, the
tiny models as `hf://mlxfleet-demo/...` in an offline Hugging Face cache: `demofleet.hf_cache`),
and serves."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from mlxfleet_operator.dev import demofleet
from tests.e2e.conftest import E2E, Agents, Operator, is_true, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]
REPO = Path(__file__).resolve().parents[2]


def test_the_demo_samples_become_ready_and_serve_on_the_demo_fleet(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path, tmp_path: Path
) -> None:
    demofleet.hf_cache(tmp_path / "hf" / "hub", {"tiny-a": model_a, "tiny-b": model_b})
    env: dict[str, str | None] = {**demofleet.hf_env(tmp_path), "HF_HUB_CACHE": None}
    started = [agents.start(n, env=env) for n in ("demo-1", "demo-2")]
    nodes = [e2e.register(a) for a in started]
    for node in nodes:
        e2e.kubectl("label", "inode", node, "mlxfleet.io/demo=true")
    wait_for(
        "both nodes Ready",
        lambda: all(is_true(e2e.get("inode", n, namespaced=False), "Ready") for n in nodes),
    )

    e2e.kubectl("apply", "-k", str(REPO / "manifests" / "samples" / "demo"), "-n", e2e.namespace)
    e2e.kubectl(
        "-n", e2e.namespace, "wait", "--for=condition=Ready", "mdep/demo-chat", "--timeout=150s"
    )
    status = e2e.get("mdep", "demo-chat")["status"]
    assert status["readyReplicas"] == 2
    assert sorted(p["node"] for p in status["placements"]) == sorted(nodes)
    wait_for("the route Ready", lambda: is_true(e2e.get("modelroute", "demo"), "Ready"))
    client = openai.OpenAI(base_url=status["placements"][0]["endpoint"] + "/v1", api_key="x")
    reply = client.chat.completions.create(
        model="demo-chat", messages=[{"role": "user", "content": "hi"}], max_tokens=8
    )
    assert reply.choices[0].message.content

    def reasons() -> set[str]:
        found = e2e.kubectl(
            "-n", e2e.namespace, "get", "events", "-o", "json",
            "--field-selector", "involvedObject.kind=ModelDeployment,involvedObject.name=demo-chat",
        )  # fmt: skip
        return {e["reason"] for e in json.loads(found)["items"]}

    # ModelDeployments said nothing in `kubectl describe` (issue 28 item 9)
    wait_for("a Ready event on the deployment", lambda: "Ready" in reasons())


def test_the_hf_cache_layout_serves_offline(tmp_path: Path, model_a: Path) -> None:
    """What the demo agents resolve `hf://mlxfleet-demo/tiny-a` from (no hub)."""
    demofleet.hf_cache(tmp_path / "hub", {"tiny-a": model_a})
    demofleet.hf_cache(tmp_path / "hub", {"tiny-a": model_a})  # again: a re-run of make demo
    snapshot = tmp_path / "hub" / "models--mlxfleet-demo--tiny-a" / "snapshots"
    (commit,) = [p.name for p in snapshot.iterdir()]
    assert (snapshot / commit / "config.json").read_bytes() == (
        model_a / "config.json"
    ).read_bytes()
