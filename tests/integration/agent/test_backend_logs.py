"""Backend logs stay bounded (issue 28 item 3): rotated by size, `--backend-log-keep` older files
kept, and the agent's own `/health` probes (every `--health-interval-s`) never written there:
a real agent, a real mlx_lm backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mlxfleet_agent.backends import logrotate
from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = pytest.mark.mlx
LIMIT = 4096


def test_backend_logs_rotate_by_size_and_leave_out_the_agents_probes(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory(
        extra=[
            *("--backend-log-max-bytes", str(LIMIT), "--backend-log-keep", "2"),
            *("--health-interval-s", "0.1"),
        ]
    )
    assert agent.put_slot("a", slot_spec(model_a, "tiny-a")).status_code == 202
    agent.wait_ready("a")
    logs = agent.state_dir / "logs"
    (log,) = logs.glob("*.log")
    client = agent.openai()
    deadline = time.monotonic() + 90
    while not log.with_name(log.name + ".2").exists():
        assert time.monotonic() < deadline, sorted(p.name for p in logs.iterdir())
        for _ in range(5):
            client.completions.create(model="tiny-a", prompt="Once upon", max_tokens=2)
        time.sleep(0.5)
    kept = sorted(p.name for p in logs.iterdir() if p.name.startswith(log.name))
    assert kept == [log.name, log.name + ".1", log.name + ".2"]  # keep 2: no .3
    everything = "".join(p.read_text(errors="replace") for p in logs.iterdir())
    assert "POST /v1/completions" in everything  # mlx_lm's own request lines are kept
    assert "GET /health" not in everything  # ~10 probes a second, none written
    for older in (".1", ".2"):
        assert log.with_name(log.name + older).stat().st_size > LIMIT
    # the backend writes on into the truncated file, from its start
    client.completions.create(model="tiny-a", prompt="Once upon", max_tokens=2)
    assert "POST /v1/completions" in log.read_text(errors="replace")
    assert log.read_bytes()[:1] != b"\0"


def test_rotation_shifts_and_drops_the_oldest(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    for n in range(4):
        log.write_bytes(bytes([65 + n]) * 10)
        assert logrotate.rotate(log, max_bytes=5, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.log", "b.log.1", "b.log.2"]
    assert (tmp_path / "b.log.1").read_bytes() == b"D" * 10
    assert (tmp_path / "b.log.2").read_bytes() == b"C" * 10
    assert log.read_bytes() == b""
    assert not logrotate.rotate(log, max_bytes=5, keep=2)
