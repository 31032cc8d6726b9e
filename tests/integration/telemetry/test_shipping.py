"""Shipping intervals to a real S3 server: keys, idempotence, outage buffering, restarts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.runtime import compose, settings
from mlxfleet_agent.telemetry import recorder, shipper
from tests.integration.telemetry import netgate
from tests.support import s3 as s3support

pytestmark = pytest.mark.s3
T0 = datetime(2026, 9, 21, 14, 14, tzinfo=UTC).timestamp()
REPO = Path(__file__).resolve().parents[3]


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def gate(s3_server: s3support.S3Server) -> Iterator[netgate.Gate]:
    host, port = s3_server.endpoint_url.removeprefix("http://").split(":")
    g = netgate.Gate(host, int(port))
    try:
        yield g
    finally:
        g.stop()


def config(s3: s3support.S3Server, spool: Path, bucket: str, **kw: object) -> shipper.ShipperConfig:
    values: dict[str, object] = {
        "spool_dir": spool,
        "bucket": bucket,
        "prefix": "fleet/telemetry",
        "endpoint_url": s3.endpoint_url,
        "region": s3.region,
        "access_key_id": s3.access_key,
        "secret_access_key": s3.secret_key,
        "interval_seconds": 60.0,
    }
    values |= kw
    return shipper.ShipperConfig(**values)  # type: ignore[arg-type]


def agent_settings(
    state: Path, file_values: dict[str, object], environ: dict[str, str]
) -> settings.Settings:
    """The agent's settings as `serve` builds them: a config file and the environment."""
    values = {"stateDir": str(state), "modelsDir": str(state / "models"), "telemetryIntervalS": 1}
    return settings.build(file_values={**values, **file_values}, flag_values={}, environ=environ)


def serve_requests(
    tel: recorder.Telemetry, n: int, *, prompt: int = 4, completion: int = 6
) -> None:
    for _ in range(n):
        tel.request_started("chat")
        tel.request_finished(
            recorder.RequestRecord(
                slot="chat",
                served_name="tiny",
                source="file:///m",
                endpoint="completions",
                stream=False,
                prompt_tokens=prompt,
                completion_tokens=completion,
                queue_wait_s=0.0,
                ttft_s=0.05,
                e2e_s=0.05,
            )
        )


def objects(
    s3: s3support.S3Server, bucket: str, prefix: str = ""
) -> dict[str, contract.TelemetryInterval]:
    client = s3.client()
    out: dict[str, contract.TelemetryInterval] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
            lines = body.splitlines()
            assert len(lines) == 1, obj["Key"]
            out[obj["Key"]] = contract.TelemetryInterval.model_validate_json(lines[0])
    return out


def test_each_interval_lands_once_at_its_partitioned_key(
    s3_server: s3support.S3Server, tmp_path: Path
) -> None:
    bucket = s3_server.make_bucket()
    clock = Clock(T0 + 1)
    tel = recorder.Telemetry(node="mini-1", interval_seconds=60, clock=clock)
    ship = shipper.Shipper(tel, config(s3_server, tmp_path, bucket))
    serve_requests(tel, 5)
    clock.t = T0 + 61
    ship.tick()
    serve_requests(tel, 2)
    clock.t = T0 + 121
    ship.tick()
    found = objects(s3_server, bucket)
    assert sorted(found) == [
        "fleet/telemetry/v1/date=2026-09-21/node=mini-1/20260921T141400Z.jsonl",
        "fleet/telemetry/v1/date=2026-09-21/node=mini-1/20260921T141500Z.jsonl",
    ]
    first, second = (found[k] for k in sorted(found))
    assert first.schema_version == contract.TELEMETRY_SCHEMA_VERSION
    assert (first.slots[0].requests, first.slots[0].prompt_tokens) == (5, 20)
    assert (second.slots[0].requests, second.slots[0].completion_tokens) == (2, 12)
    assert ship.spool.pending() == []

    # a retried upload (say the agent died after the PUT, before deleting the queue file)
    # goes to the same key: still two objects, nothing counted twice
    ship.spool.push(first)
    assert ship.flush() == 1
    again = objects(s3_server, bucket)
    assert sorted(again) == sorted(found)
    assert sum(iv.slots[0].requests for iv in again.values()) == 7


def test_full_buffer_drops_the_oldest_and_says_how_many(
    s3_server: s3support.S3Server, gate: netgate.Gate, tmp_path: Path
) -> None:
    bucket = s3_server.make_bucket()
    clock = Clock(T0 + 1)
    tel = recorder.Telemetry(node="mini-1", interval_seconds=60, clock=clock)
    cfg = config(s3_server, tmp_path, bucket, endpoint_url=gate.url, max_buffered=2)
    ship = shipper.Shipper(tel, cfg)
    gate.close_gate()
    for i in range(5):
        serve_requests(tel, i + 1)
        clock.t += 60
        ship.tick()
    assert len(ship.spool.pending()) == 2  # intervals 4 and 5 kept, 1-3 dropped
    gate.open_gate()
    clock.t += 60
    ship.tick()
    found = [iv for _, iv in sorted(objects(s3_server, bucket).items())]
    assert [iv.slots[0].requests if iv.slots else 0 for iv in found] == [4, 5, 0]
    assert sum(iv.dropped_intervals for iv in found) == 3  # carried by the intervals after
    assert 'result="dropped"} 3.0' in tel.metrics.exposition().decode()


def _driver(
    s3: s3support.S3Server, gate: netgate.Gate, spool: Path, bucket: str, fed: Path, *, final: bool
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env |= {
        "MLXFLEET_TELEMETRY_ACCESS_KEY_ID": s3.access_key,
        "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": s3.secret_key,
        "MLXFLEET_TELEMETRY_REGION": s3.region,
        "PYTHONPATH": str(REPO),
    }
    cmd = [
        sys.executable,
        "-m",
        "tests.integration.telemetry.shipper_driver",
        "--spool",
        str(spool),
        "--endpoint",
        gate.url,
        "--bucket",
        bucket,
        "--fed-file",
        str(fed),
        "--interval",
        "2",
    ]
    proc = subprocess.Popen(
        [*cmd, *(["--final"] if final else [])],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def test_store_down_agent_restarted_store_back_every_interval_once_in_order(
    s3_server: s3support.S3Server, gate: netgate.Gate, tmp_path: Path
) -> None:
    bucket = s3_server.make_bucket()
    spool = tmp_path / "spool"
    gate.close_gate()
    first = _driver(s3_server, gate, spool, bucket, tmp_path / "fed1", final=False)
    time.sleep(5.2)  # two or three intervals close while the store is unreachable
    err1 = _stop(first)  # SIGTERM mid-interval: the open interval is checkpointed
    queued = sorted(p.name for p in (spool / "queue").glob("*.json"))
    assert len(queued) >= 2, err1
    assert (spool / "open-interval.json").exists()
    assert "buffering on disk" in err1
    assert objects(s3_server, bucket) == {}

    second = _driver(s3_server, gate, spool, bucket, tmp_path / "fed2", final=True)
    time.sleep(2.5)  # still down after the restart
    gate.open_gate()
    time.sleep(4.5)
    err2 = _stop(second)

    fed = int((tmp_path / "fed1").read_text()) + int((tmp_path / "fed2").read_text())
    found = objects(s3_server, bucket)
    starts = [iv.interval_start for _, iv in sorted(found.items())]
    assert len(set(starts)) == len(starts)
    assert sum(iv.slots[0].requests for iv in found.values() if iv.slots) == fed
    assert sum(iv.slots[0].prompt_tokens for iv in found.values() if iv.slots) == 3 * fed
    shipped = re.findall(r"^shipped (\S+)$", err2, re.M)
    assert shipped == sorted(shipped), "replayed out of order"
    assert sorted(shipped) == sorted(found)
    # the intervals queued during the outage were replayed first, oldest first
    replayed = [k.rsplit("/", 1)[1] for k in shipped[: len(queued)]]
    assert len(replayed) == len(queued)
    assert list((spool / "queue").glob("*.json")) == []


def test_a_run_without_a_bucket_leaves_nothing_to_ship_under_its_old_name(
    s3_server: s3support.S3Server, tmp_path: Path
) -> None:
    """Issue 15 item 3, the way a new user gets there: the agent first runs with no bucket and
    the default node name (the host name), then with a bucket and nodeName = its InferenceNode.
    Before: the first run's checkpoint shipped under the host name, a phantom node."""
    state = tmp_path / "state"
    env = {
        "MLXFLEET_TELEMETRY_ACCESS_KEY_ID": s3_server.access_key,
        "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": s3_server.secret_key,
    }
    tel, ship = compose.telemetry(agent_settings(state, {}, env))
    old_name = tel.node
    ship.start()
    serve_requests(tel, 3)
    time.sleep(1.2)  # at least one interval closes, and several ticks run
    serve_requests(tel, 2)
    ship.stop()
    assert not (state / "telemetry").exists()

    bucket = s3_server.make_bucket()
    file_values: dict[str, object] = {
        "nodeName": "mac-studio-1",
        "telemetryBucket": bucket,
        "telemetryPrefix": "fleet",
        "telemetryEndpointUrl": s3_server.endpoint_url,
        "telemetryRegion": s3_server.region,
    }
    tel, ship = compose.telemetry(agent_settings(state, file_values, env))
    ship.start()
    serve_requests(tel, 4)
    deadline = time.monotonic() + 30
    while not ship.uploaded_keys and time.monotonic() < deadline:
        time.sleep(0.1)
    ship.stop()
    found = objects(s3_server, bucket)
    assert found, "the renamed agent shipped nothing"
    assert {iv.node for iv in found.values()} == {"mac-studio-1"}, sorted(found)
    assert not any(f"node={old_name}/" in key for key in found)
    assert sum(s.requests for iv in found.values() for s in iv.slots) == 4


def test_a_rename_ships_each_count_once_under_the_name_it_was_measured_under(
    s3_server: s3support.S3Server, tmp_path: Path
) -> None:
    """With a bucket all along: the old name's unfinished interval (the checkpoint) ships under
    the old name, the new name's intervals under the new one; nothing twice, nothing lost, even
    when both start in the same minute."""
    bucket = s3_server.make_bucket()
    clock = Clock(T0 + 5)
    tel = recorder.Telemetry(node="Mac-Studio", interval_seconds=60, clock=clock)
    ship = shipper.Shipper(tel, config(s3_server, tmp_path, bucket))
    ship.recover()
    serve_requests(tel, 3)
    ship.tick(upload=False)  # checkpointed, then the agent is restarted with a new nodeName
    clock.t = T0 + 30
    tel = recorder.Telemetry(node="mac-studio-1", interval_seconds=60, clock=clock)
    ship = shipper.Shipper(tel, config(s3_server, tmp_path, bucket))
    ship.recover()
    serve_requests(tel, 2)
    clock.t = T0 + 61
    ship.tick()
    for _ in range(5):  # a store that failed a PUT (SeaweedFS answers 500 under load) gets the
        if not ship.spool.pending():  # buffered object on the next tick, as in the agent
            break
        time.sleep(0.5)
        ship.tick()
    found = objects(s3_server, bucket)
    assert sorted((iv.node, iv.slots[0].requests) for iv in found.values()) == [
        ("Mac-Studio", 3),
        ("mac-studio-1", 2),
    ]
    assert not (tmp_path / "queue").exists() or ship.spool.pending() == []
