"""Real embeddings/rerank engine processes on loopback, serving locally generated tiny models.

`embedding_model` / `reranker_model`: tiny Qwen3 checkpoints (mlxfleet_agent.dev.testmodels),
generated once per session. `embed_engine` / `rerank_engine`: one `embed_server` process each
for the session, with small limits (so limit tests need no process of their own) and small
batches (so a request of a few dozen inputs spans several forward passes). `start_engine`
starts one with other flags; every process is stopped after its scope.
May import: pytest, httpx, openai, tokenizers, mlx, tests.support. Called by:
tests/integration/engines.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from mlxfleet_operator.dev import processes

START_TIMEOUT_S = 120.0
EMBED_LIMITS = {
    "max_inputs": 256,
    "max_input_tokens": 256,
    "max_request_tokens": 20_000,
    "max_body_bytes": 1 << 20,
}
RERANK_LIMITS = {"max_inputs": 128, "max_input_tokens": 160}


@dataclass
class Engine:
    proc: subprocess.Popen[bytes]
    url: str
    name: str
    log_path: Path
    _client: openai.OpenAI | None = None

    def openai(self) -> openai.OpenAI:
        """One client per engine (closed by stop(), so no socket outlives the test)."""
        if self._client is None:
            self._client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0)
        return self._client

    def post(self, path: str, body: object, **kwargs: object) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=60.0, **kwargs)  # type: ignore[arg-type]

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return ""

    def stop(self, sig: signal.Signals = signal.SIGTERM, *, timeout_s: float = 20.0) -> float:
        """Signal the process and wait; returns how long it took to exit."""
        if self._client is not None:
            self._client.close()
            self._client = None
        began = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return time.monotonic() - began


def limit_flags(limits: dict[str, int]) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in limits.items()]


def launch(model: Path, name: str, log_dir: Path, *flags: str) -> Engine:
    """Start an engine; does not wait for it."""
    (port,) = processes.free_ports(1)
    log_path = log_dir / f"engine-{name}-{port}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlxfleet_agent.engines.embed_server",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--served-model-name",
                name,
                *flags,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Engine(proc, f"http://127.0.0.1:{port}", name, log_path)


def wait_ready(engine: Engine, *, timeout_s: float = START_TIMEOUT_S) -> Engine:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine.proc.poll() is not None:
            raise AssertionError(f"engine exited {engine.proc.returncode}:\n{engine.log_tail()}")
        try:
            if httpx.get(engine.url + "/health", timeout=2.0).status_code == 200:
                return engine
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    engine.stop()
    raise AssertionError(f"engine not ready in {timeout_s}s:\n{engine.log_tail()}")


@pytest.fixture(scope="session")
def engine_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-logs")


@pytest.fixture(scope="session")
def start_engine(engine_logs: Path) -> Iterator[Callable[..., Engine]]:
    started: list[Engine] = []

    def start(model: Path, name: str, *flags: str, wait: bool = True) -> Engine:
        engine = launch(model, name, engine_logs, *flags)
        started.append(engine)
        return wait_ready(engine) if wait else engine

    yield start
    for engine in started:
        engine.stop()


@pytest.fixture(scope="session")
def embed_engine(start_engine: Callable[..., Engine], embedding_model: Path) -> Engine:
    return start_engine(
        embedding_model,
        "tiny-embed",
        *limit_flags(EMBED_LIMITS),
        "--batch-tokens=512",
        "--batch-rows=8",
    )


@pytest.fixture(scope="session")
def rerank_engine(start_engine: Callable[..., Engine], reranker_model: Path) -> Engine:
    return start_engine(
        reranker_model,
        "tiny-rerank",
        "--task=rerank",
        *limit_flags(RERANK_LIMITS),
        "--batch-tokens=1024",
        "--batch-rows=8",
    )
