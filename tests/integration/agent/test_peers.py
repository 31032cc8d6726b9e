"""Weights Mac to Mac with real agents and a real S3 origin (SeaweedFS): a second agent takes a
model from the first, not from the origin (the origin's own byte counter proves it); a tampered
byte on the peer is caught and that file comes from the origin instead; an interrupted peer
transfer (a link frozen a third of the way, the receiving agent killed) resumes where it
stopped; the peer file server refuses bad credentials, paths and
ranges without falling over."""

from __future__ import annotations

import hashlib
import http.client
import json
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxfleet_agent import contract
from tests.integration.agent.conftest import Agent
from tests.support.s3 import S3Server
from tests.support.tcpgate import Gate

pytestmark = [pytest.mark.s3, pytest.mark.timeout(300)]

PEER_TOKEN = "fleet-peer-secret-for-tests"
FLEET_KEY = "fleet-key-of-the-peer-tests-never-on-an-agent"


@pytest.fixture
def peer_token_file(tmp_path: Path) -> Path:
    path = tmp_path / "peer-token"
    path.write_text(PEER_TOKEN + "\n")
    path.chmod(0o600)
    return path


def upload(s3: S3Server, model: Path, bucket: str, prefix: str) -> int:
    total = 0
    for path in sorted(model.iterdir()):
        s3.client().upload_file(str(path), bucket, f"{prefix}/{path.name}")
        total += path.stat().st_size
    return total


def big_model(root: Path, size: int) -> Path:
    """A config.json plus one valid safetensors file holding a `size`-byte U8 tensor of
    pseudo-random bytes (these tests move bytes; they never load the model)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text('{"model_type": "llama"}')
    header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
    head = header.encode() + b" " * (-len(header) % 8)
    seed = hashlib.sha256(b"peers").digest() * 32768  # 1 MiB
    with (root / "model.safetensors").open("wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for i in range(size // len(seed)):
            f.write(seed[i % 7 :] + seed[: i % 7])
    return root


def start(
    factory: Callable[..., Agent], tmp: Path, name: str, s3: S3Server, token_file: Path
) -> Agent:
    return factory(
        state_dir=tmp / name / "state",
        models_dir=tmp / name / "models",
        extra=["--peer-token-file", str(token_file)],
        env=s3.env(),
    )


def prefetch(
    agent: Agent, source: str, peers: list[Agent | str | dict[str, str]] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"source": source}
    if peers:
        body["peers"] = [p.control_url if isinstance(p, Agent) else p for p in peers]
    resp = agent.api("POST", "/v1/models/prefetch", json=body)
    assert resp.status_code == 202, resp.text
    body_out: dict[str, Any] = resp.json()
    return body_out


def wait_cached(agent: Agent, source: str, timeout_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = agent.state()
        for m in state["cachedModels"]:
            if m["source"] == source and not any(
                t["modelId"] == m["id"] for t in state.get("transfers", [])
            ):
                found: dict[str, Any] = m
                return found
        time.sleep(0.1)
    raise AssertionError(f"{source} never cached:\n{agent.log_tail()}")


def model_files(agent: Agent, model_id: str) -> dict[str, bytes]:
    root = next(p for p in agent.models_dir.rglob(model_id) if p.is_dir() and "s3" in p.parts)
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def test_second_agent_copies_from_first_not_origin(
    agent_factory: Callable[..., Agent],
    tmp_path: Path,
    model_a: Path,
    s3_server: S3Server,
    peer_token_file: Path,
) -> None:
    bucket = s3_server.make_bucket()
    size = upload(s3_server, model_a, bucket, "tiny")
    source = f"s3://{bucket}/tiny"
    first = start(agent_factory, tmp_path, "a", s3_server, peer_token_file)
    second = start(agent_factory, tmp_path, "b", s3_server, peer_token_file)

    before = s3_server.bytes_sent(bucket)
    prefetch(first, source)
    cached = wait_cached(first, source)
    from_origin_first = s3_server.bytes_sent(bucket) - before
    assert from_origin_first >= size  # the first agent had to go to the origin

    before = s3_server.bytes_sent(bucket)
    prefetch(second, source, peers=[first])
    wait_cached(second, source)
    assert s3_server.bytes_sent(bucket) - before == 0, "the second copy came from the origin"
    assert model_files(second, cached["id"]) == model_files(first, cached["id"])
    assert second.state()["counters"]["peer_bytes_received"] >= size - 1024
    assert first.state()["counters"]["peer_bytes_sent"] >= size - 1024


def test_tampered_byte_on_peer_is_caught(
    agent_factory: Callable[..., Agent],
    tmp_path: Path,
    model_a: Path,
    s3_server: S3Server,
    peer_token_file: Path,
) -> None:
    bucket = s3_server.make_bucket()
    upload(s3_server, model_a, bucket, "tiny")
    source = f"s3://{bucket}/tiny"
    liar = start(agent_factory, tmp_path, "liar", s3_server, peer_token_file)
    prefetch(liar, source)
    cached = wait_cached(liar, source)
    weights = next(liar.models_dir.rglob("model.safetensors"))
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte different
    weights.write_bytes(bytes(data))

    honest = start(agent_factory, tmp_path, "honest", s3_server, peer_token_file)
    before = s3_server.bytes_sent(bucket)
    prefetch(honest, source, peers=[liar])
    wait_cached(honest, source)
    refetched = s3_server.bytes_sent(bucket) - before
    assert refetched >= len(data), "the tampered file was not fetched again from the origin"
    got = model_files(honest, cached["id"])["model.safetensors"]
    assert got == (model_a / "model.safetensors").read_bytes()
    assert honest.state()["counters"]["peer_files_rejected"] >= 1
    assert "peer sent bad data" in honest.log_tail(200)


def test_interrupted_peer_transfer_resumes(
    agent_factory: Callable[..., Agent],
    tmp_path: Path,
    s3_server: S3Server,
    peer_token_file: Path,
) -> None:
    size = 256 * 1024 * 1024
    model = big_model(tmp_path / "big", size)
    bucket = s3_server.make_bucket()
    upload(s3_server, model, bucket, "big")
    source = f"s3://{bucket}/big"
    first = start(agent_factory, tmp_path, "a", s3_server, peer_token_file)
    prefetch(first, source)
    wait_cached(first, source, timeout_s=240)
    (model / "model.safetensors").unlink()  # keep the disk free: the origin has it

    host, port = first.control_url.removeprefix("http://").split(":")
    link = Gate(host, int(port), hold_after=size // 3)  # the link freezes a third of the way
    try:
        second = start(agent_factory, tmp_path, "b", s3_server, peer_token_file)
        prefetch(second, source, peers=[link.url])
        assert link.held.wait(120), f"the copy never reached the freeze\n{second.log_tail()}"
        time.sleep(0.5)  # let the agent write what arrived before the freeze
        written = sum(p.stat().st_size for p in second.models_dir.rglob("*.part"))
        second.proc.kill()
        second.proc.wait(timeout=30)
        assert size // 4 < written < size, f"nothing partial to resume ({written} bytes written)"
        link.release()
        sent_before = link.sent

        before = s3_server.bytes_sent(bucket)
        again = start(agent_factory, tmp_path, "b", s3_server, peer_token_file)
        prefetch(again, source, peers=[link.url])
        wait_cached(again, source, timeout_s=240)
        assert s3_server.bytes_sent(bucket) - before == 0
        resent = link.sent - sent_before
        assert resent <= size - written + 64 * 1024, f"{resent} sent again, {written} were there"
    finally:
        link.close()
    cached = [m for m in again.state()["cachedModels"] if m["source"] == source]
    assert cached
    assert cached[0]["totalBytes"] >= size


def raw_get(agent: Agent, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """A GET with the path sent byte for byte (httpx would normalise '..' away)."""
    host, port = agent.control_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def test_peer_server_refuses_bad_requests(
    agent_factory: Callable[..., Agent],
    tmp_path: Path,
    model_a: Path,
    s3_server: S3Server,
    peer_token_file: Path,
) -> None:
    bucket = s3_server.make_bucket()
    upload(s3_server, model_a, bucket, "tiny")
    source = f"s3://{bucket}/tiny"
    agent = start(agent_factory, tmp_path, "a", s3_server, peer_token_file)
    prefetch(agent, source)
    mid = wait_cached(agent, source)["id"]
    secret = tmp_path / "outside-secret.txt"
    secret.write_text("not a model file")
    model_dir = next(p for p in agent.models_dir.rglob(mid) if p.is_dir() and "s3" in p.parts)
    (model_dir / "leak.json").symlink_to(secret)

    ok = {"Authorization": f"Bearer {PEER_TOKEN}"}
    base = f"/peer/v1/models/{mid}"
    cases = [
        (f"{base}/files/config.json", {}, 401),
        (f"{base}/files/config.json", {"Authorization": "Bearer wrong"}, 403),
        (f"{base}/files/config.json", {"Authorization": f"Bearer {agent.token}"}, 403),
        (f"{base}/files/config.json", {"Authorization": "Basic abc"}, 401),
        (f"{base}/files/../../../../etc/passwd", ok, 400),
        (f"{base}/files/%2e%2e/%2e%2e/index.json", ok, 400),
        (f"{base}/files/a%00b", ok, 400),
        (f"{base}/files/%ff%fe", ok, 400),
        (f"{base}/files/leak.json", ok, 404),
        (f"{base}/files/nope.json", ok, 404),
        ("/peer/v1/models/0123456789abcdef/files/config.json", ok, 404),
        ("/peer/v1/models/NOT-AN-ID/files/config.json", ok, 400),
        (f"{base}/files/config.json", {**ok, "Range": "bytes=99999999-"}, 416),
        (f"{base}/files/config.json", {**ok, "Range": "bytes=abc"}, 400),
        (f"{base}/files/config.json", {**ok, "Range": "bytes=0-1,4-5"}, 400),
        (f"{base}/files/config.json", {**ok, "Range": "bytes=5-1"}, 400),
        # "²".isdigit() is True: once a 500 with a traceback (sent as latin-1, as a client may)
        (f"{base}/files/config.json", {**ok, "Range": "bytes=\u00b2-"}, 400),
        (f"{base}/files/config.json", {**ok, "Range": "bytes=0-\u00b9"}, 400),
        (f"{base}/files/config.json", {**ok, "Range": "bytes=-\u00b3"}, 400),
    ]
    for path, headers, status in cases:
        got, body = raw_get(agent, path, headers)
        assert got == status, f"{path} {headers}: {got} {body}"
        assert "not a model file" not in body
        assert "Traceback" not in body
    got, body = raw_get(agent, f"{base}/files/config.json", {**ok, "Range": "bytes=0-3"})
    assert got == 206
    assert body == (model_a / "config.json").read_text()[:4]
    listing = httpx.get(agent.control_url + base, headers=ok, timeout=10).json()
    assert "leak.json" not in {f["path"] for f in listing["files"]}
    assert {"config.json", "model.safetensors"} <= {f["path"] for f in listing["files"]}
    # the control API keeps its own token: the peer token opens nothing there
    assert httpx.get(agent.control_url + "/v1/state", headers=ok, timeout=10).status_code == 401
    assert agent.proc.poll() is None
    assert httpx.get(agent.control_url + "/healthz", timeout=10).status_code == 200


def with_own_keys(agent: Agent, node: str) -> contract.NodeCredentials:
    """Send the agent its node's keys, as the operator does."""
    creds = contract.credentials.for_node((FLEET_KEY,), node)
    sent = agent.api("PUT", "/v1/credentials", json=creds.model_dump(by_alias=True))
    assert sent.status_code == 200, sent.text
    return creds


def test_per_node_fetch_tokens_open_one_model_to_one_node(
    agent_factory: Callable[..., Agent], tmp_path: Path, model_a: Path, s3_server: S3Server
) -> None:
    """No shared peer token: the operator gives B a token A accepts from B for this model (made
    with A's own peer key). B copies from A with it; the same token for another model, a token
    B makes with its own key, A's key itself, the fleet key: 403. A bare peer URL (no token, no
    legacy shared token) is not asked at all."""
    bucket = s3_server.make_bucket()
    size = upload(s3_server, model_a, bucket, "tiny")
    source = f"s3://{bucket}/tiny"
    a = agent_factory(state_dir=tmp_path / "a" / "s", models_dir=tmp_path / "a" / "m",
                      env=s3_server.env())  # fmt: skip
    b = agent_factory(state_dir=tmp_path / "b" / "s", models_dir=tmp_path / "b" / "m",
                      env=s3_server.env())  # fmt: skip
    keys_a, keys_b = with_own_keys(a, "node-a"), with_own_keys(b, "node-b")
    prefetch(a, source)
    mid = wait_cached(a, source)["id"]
    assert mid == contract.credentials.model_id(source, None)
    token = contract.credentials.fetch_token(keys_a.peer[0], fetcher="node-b", model_id=mid)

    base = f"/peer/v1/models/{mid}"
    other = "0123456789abcdef"
    for bearer in (
        contract.credentials.fetch_token(keys_a.peer[0], fetcher="node-b", model_id=other),
        contract.credentials.fetch_token(keys_b.peer[0], fetcher="node-b", model_id=mid),
        token.replace("node-b/", "node-c/"),
        keys_a.peer[0],
        keys_b.peer[0],
        FLEET_KEY,
    ):
        got, body = raw_get(a, f"{base}/files/config.json", {"Authorization": f"Bearer {bearer}"})
        assert got == 403, (bearer, got, body)
    got, _ = raw_get(a, f"{base}/files/config.json", {"Authorization": f"Bearer {token}"})
    assert got == 200

    before = s3_server.bytes_sent(bucket)
    prefetch(b, source, peers=[{"url": a.control_url, "token": token}])
    wait_cached(b, source)
    assert s3_server.bytes_sent(bucket) - before == 0, "the copy came from the origin"
    assert b.state()["counters"]["peer_bytes_received"] >= size - 1024
    assert model_files(b, mid) == model_files(a, mid)

    c = agent_factory(state_dir=tmp_path / "c" / "s", models_dir=tmp_path / "c" / "m",
                      env=s3_server.env())  # fmt: skip
    prefetch(c, source, peers=[a])  # a bare URL: this agent has no token to show
    wait_cached(c, source)
    assert c.state()["counters"]["peer_bytes_received"] == 0
