"""Real traffic through a real agent (mlx-lm backend): shipped token counts match what the
OpenAI clients received, and no request or response text reaches the bucket or /metrics."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageParam

from mlxfleet_agent import contract
from tests.integration.agent import conftest as agent_support
from tests.support import models as support_models
from tests.support import s3 as s3support

pytestmark = [pytest.mark.mlx, pytest.mark.s3]
PREFIX = "traffic"
NODE = "mac-traffic"


def bucket_bodies(s3: s3support.S3Server, bucket: str) -> dict[str, str]:
    client = s3.client()
    out: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = (
                client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
            )
    return out


def shipped(s3: s3support.S3Server, bucket: str) -> list[contract.TelemetryInterval]:
    return [
        contract.TelemetryInterval.model_validate_json(body)
        for key, body in sorted(bucket_bodies(s3, bucket).items())
        if key.endswith(".jsonl")
    ]


@pytest.fixture
def agent(
    s3_server: s3support.S3Server,
    model_a: Path,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[agent_support.Agent, str]]:
    bucket = s3_server.make_bucket()
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", s3_server.secret_key)
    config = tmp_path / "agent.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "nodeName": NODE,
                "telemetryIntervalS": 2,
                "telemetryBucket": bucket,
                "telemetryPrefix": PREFIX,
                "telemetryEndpointUrl": s3_server.endpoint_url,
                "telemetryRegion": s3_server.region,
                "idlePowerWatts": 5,
                "busyPowerWatts": 30,
            }
        )
    )
    agent = agent_support.start_agent(
        state_dir=tmp_path / "state",
        models_dir=tmp_path / "models",
        allowed_root=support_models.models_root(tmp_path_factory),
        log_path=tmp_path / "agent.log",
        extra=["--config", str(config)],
    )
    try:
        resp = agent.put_slot("a", agent_support.slot_spec(model_a, "tiny-a"))
        assert resp.status_code == 202, resp.text
        agent.wait_ready("a")
        yield agent, bucket
    finally:
        agent_support.cleanup(agent)


def test_shipped_tokens_match_the_clients_and_no_text_leaves_the_node(
    agent: tuple[agent_support.Agent, str], s3_server: s3support.S3Server
) -> None:
    ag, bucket = agent
    client = ag.openai(timeout=60)
    canaries: list[str] = []
    answers: list[str] = []
    prompt_tokens = completion_tokens = 0
    for i in range(4):
        canary = f"CANARY-{uuid.uuid4().hex}"
        canaries.append(canary)
        resp = client.chat.completions.create(
            model="tiny-a",
            messages=[{"role": "user", "content": f"please repeat {canary} number {i}"}],
            max_tokens=12,
        )
        assert resp.usage is not None
        prompt_tokens += resp.usage.prompt_tokens
        completion_tokens += resp.usage.completion_tokens
        answers.append(resp.choices[0].message.content or "")
    for i in range(3):
        canary = f"CANARY-{uuid.uuid4().hex}"
        canaries.append(canary)
        text = []
        usage = None
        for chunk in client.chat.completions.create(
            model="tiny-a",
            messages=[{"role": "user", "content": f"stream {canary} back {i}"}],
            max_tokens=10,
            stream=True,
            stream_options={"include_usage": True},
        ):
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                text.append(chunk.choices[0].delta.content)
        assert usage is not None
        prompt_tokens += usage.prompt_tokens
        completion_tokens += usage.completion_tokens
        answers.append("".join(text))
    # a stream whose client did not ask for usage: it gets none, the agent still counts it
    # (same prompt as a non-streamed request, so its prompt tokens are known)
    prompt: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": f"plain {canaries[0]} again"}
    ]
    once = client.chat.completions.create(model="tiny-a", messages=prompt, max_tokens=8)
    assert once.usage is not None
    prompt_tokens += 2 * once.usage.prompt_tokens
    completion_tokens += once.usage.completion_tokens
    chunks = list(
        client.chat.completions.create(model="tiny-a", messages=prompt, max_tokens=8, stream=True)
    )
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason is not None
    unseen = sum(1 for c in chunks if c.choices and c.choices[0].delta.content)
    requests = 9  # warm-up requests go to the backend directly, not through the data plane

    deadline = time.monotonic() + 60
    intervals: list[contract.TelemetryInterval] = []
    while time.monotonic() < deadline:
        intervals = shipped(s3_server, bucket)
        if sum(s.requests for iv in intervals for s in iv.slots) >= requests:
            break
        time.sleep(0.5)
    slots = [s for iv in intervals for s in iv.slots if s.slot == "a"]
    assert sum(s.requests for s in slots) == requests, ag.log_tail()
    assert sum(s.prompt_tokens for s in slots) == prompt_tokens
    hidden = sum(s.completion_tokens for s in slots) - completion_tokens
    assert unseen <= hidden <= 8  # the unasked-for stream: counted from the hidden usage event
    assert all(s.model == "tiny-a" for s in slots)
    assert {iv.node for iv in intervals} == {NODE}
    assert all(iv.host.power_source == "estimated" for iv in intervals)
    keys = bucket_bodies(s3_server, bucket)
    assert all(k.startswith(f"{PREFIX}/v1/date=") and f"/node={NODE}/" in k for k in keys)

    metrics = httpx.get(ag.control_url + "/metrics", timeout=10).text
    assert 'mlxfleet_agent_requests_total{endpoint="chat.completions",model="tiny-a"' in metrics
    everything = "\n".join(keys.values()) + "\n" + "\n".join(keys) + "\n" + metrics
    for secret in canaries:
        assert secret not in everything
        assert secret[len("CANARY-") :] not in everything
    for answer in answers:
        if len(answer.strip()) >= 12:  # long enough not to match by chance
            assert answer not in everything
