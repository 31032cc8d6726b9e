"""How the agent logs a backend it stopped (info, with the signal it sent and the exit in words)
against one that exited on its own or had to be killed (warning), and that mlx_lm stopped by the
agent exits 0: real processes (mlx_lm's own exit aborted, -6, on every idle stop on Linux;
ml-explore/mlx#3126, avoided by `mlxlm.ENTRY`)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import httpx
import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.backends import process
from mlxfleet_agent.engines import mlxlm, plugin

pytestmark = pytest.mark.timeout(120)
LOGGER = process.__name__


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and "backend" in r.getMessage()]


def _run(launch: plugin.Launch, tmp_path: Path, *, settle_s: float, grace_s: float = 20) -> None:
    async def main() -> None:
        backend = process.Backend(lambda port: launch, label="b", log_dir=tmp_path)
        await backend.start()
        await asyncio.sleep(settle_s)
        await backend.stop(grace_s=grace_s)
        await backend.stop(grace_s=grace_s)  # idempotent: logged once

    asyncio.run(main())


@pytest.mark.mlx
def test_mlx_lm_stopped_by_the_agent_exits_0_and_is_logged_at_info(
    model_a: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    def launch(port: int) -> plugin.Launch:
        spec = mlxlm.LaunchSpec(
            model_dir=model_a,
            options=contract.ServerOptions(),
            max_concurrency=2,
            python=sys.executable,
        )
        return plugin.Launch(
            argv=tuple(mlxlm.command(spec, port=port)), stop_signal=mlxlm.STOP_SIGNAL
        )

    async def main() -> None:
        backend = process.Backend(launch, label="mlx", log_dir=tmp_path)
        await backend.start()
        body = {"prompt": "ping", "max_tokens": 1}
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=5) as client:
            for _ in range(300):  # served once, like a slot after its warm-up
                try:
                    if (await client.post("/v1/completions", json=body)).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
            else:
                pytest.fail(f"mlx_lm never answered: {backend.log_tail()}")
        await backend.stop(grace_s=20)

    asyncio.run(main())
    [record] = _records(caplog)[-1:]
    assert record.levelno == logging.INFO, record.getMessage()
    assert record.getMessage() == "backend stopped by the agent (SIGINT)"
    assert record.__dict__["signal"] == "SIGINT"
    assert (record.__dict__["returncode"], record.__dict__["exit"]) == (0, "exit 0"), Path(
        tmp_path / "mlx.log"
    ).read_text()[-2000:]
    assert not [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("script", "settle_s", "message", "level", "exit_text"),
    [
        pytest.param(
            "import os, signal, time\n"
            "signal.signal(signal.SIGINT, lambda *a: os.abort())\n"
            "time.sleep(60)",
            0.5,
            "backend stopped by the agent (SIGINT)",
            logging.INFO,
            "signal SIGABRT",
            id="aborts on the stop signal: info",
        ),
        pytest.param(
            "import sys; sys.exit(3)",
            1.0,
            "backend had exited on its own before the agent stopped it",
            logging.WARNING,
            "exit 3",
            id="exited on its own: warning",
        ),
        pytest.param(
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
            0.5,
            "backend stopped by the agent (SIGKILL)",
            logging.WARNING,
            "signal SIGKILL",
            id="ignores the stop signal, killed: warning",
        ),
    ],
)
def test_stop_log_says_who_stopped_it(
    script: str,
    settle_s: float,
    message: str,
    level: int,
    exit_text: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    launch = plugin.Launch(argv=(sys.executable, "-c", script), stop_signal=signal.SIGINT)
    _run(launch, tmp_path, settle_s=settle_s, grace_s=2)
    stops = [r for r in _records(caplog) if r.getMessage() != "backend started"]
    stops = [r for r in stops if "ignored" not in r.getMessage()]
    assert [(r.getMessage(), r.levelno) for r in stops] == [(message, level)]
    assert stops[0].__dict__["exit"] == exit_text
