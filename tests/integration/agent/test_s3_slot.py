"""A slot whose weights come from a real S3-compatible server: downloaded into the store, served,
listed as cached and in use (eviction refused while the slot wants it, allowed after delete)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.agent.conftest import Agent
from tests.support.s3 import S3Server

pytestmark = [pytest.mark.mlx, pytest.mark.s3, pytest.mark.timeout(300)]


def test_s3_model_is_fetched_served_and_pinned(
    agent_factory: Callable[..., Agent], model_a: Path, s3_server: S3Server
) -> None:
    bucket = s3_server.make_bucket()
    for path in sorted(model_a.iterdir()):
        s3_server.client().upload_file(str(path), bucket, f"tiny/{path.name}")
    agent = agent_factory(env=s3_server.env())
    source = f"s3://{bucket}/tiny"
    resp = agent.put_slot("s3", {"source": source, "servedName": "tiny-s3"})
    assert resp.status_code == 202, resp.text
    slot = agent.wait_ready("s3")
    assert slot["source"] == source
    reply = agent.openai(timeout=30.0).completions.create(
        model="tiny-s3", prompt="hi", max_tokens=3
    )
    assert reply.choices[0].finish_reason == "length"

    [cached] = [m for m in agent.state()["cachedModels"] if m["source"] == source]
    assert cached["inUse"] is True
    assert cached["sizeBytes"] > 0
    refused = agent.api("DELETE", f"/v1/models/{cached['id']}")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["field"] == "id"

    assert agent.api("DELETE", "/v1/slots/s3").status_code == 202
    deadline = time.monotonic() + 60
    while agent.api("GET", "/v1/slots/s3").status_code != 404:
        assert time.monotonic() < deadline, agent.log_tail()
        time.sleep(0.1)
    assert agent.api("DELETE", f"/v1/models/{cached['id']}").status_code == 204
    assert all(m["id"] != cached["id"] for m in agent.api("GET", "/v1/models").json()["items"])
