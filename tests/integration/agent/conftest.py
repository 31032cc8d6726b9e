"""A real `mlxfleet-agent serve` subprocess on loopback (ephemeral ports), and helpers to drive it.

`agent_factory(...)` starts an agent and returns an `Agent`; every agent (and any backend it left)
is stopped after the test. `serving_agent` is a module-wide agent with slot `a` serving `model_a`
as `tiny-a`, for tests that only read or send requests.
May import: pytest, httpx, openai, psutil, tests.support. Called by: tests/integration/agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest

from tests.support import models as support_models

READY_TIMEOUT_S = 30.0
SLOT_TIMEOUT_S = 90.0


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    state_dir: Path
    models_dir: Path
    log_path: Path
    control_url: str
    data_url: str
    token: str
    args: list[str] = field(default_factory=list)
    clients: list[openai.OpenAI] = field(default_factory=list, repr=False)  # closed by cleanup

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self.auth, **kwargs.pop("headers", {})}
        return httpx.request(
            method, self.control_url + path, headers=headers, timeout=30.0, **kwargs
        )

    def state(self) -> dict[str, Any]:
        resp = self.api("GET", "/v1/state")
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    def slot(self, name: str) -> dict[str, Any]:
        resp = self.api("GET", f"/v1/slots/{name}")
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    def swaps(self, name: str) -> list[dict[str, Any]]:
        resp = self.api("GET", f"/v1/slots/{name}/swaps")
        assert resp.status_code == 200, resp.text
        items: list[dict[str, Any]] = resp.json()["items"]
        return items

    def put_slot(self, name: str, spec: dict[str, Any]) -> httpx.Response:
        return self.api("PUT", f"/v1/slots/{name}", json=spec)

    def wait_ready(self, name: str, *, timeout_s: float = SLOT_TIMEOUT_S) -> dict[str, Any]:
        return self.wait_slot(name, lambda s: s["ready"] and s["phase"] == "Ready", timeout_s)

    def wait_slot(
        self, name: str, pred: Callable[[dict[str, Any]], bool], timeout_s: float = SLOT_TIMEOUT_S
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = self.slot(name)
            if pred(last):
                return last
            time.sleep(0.1)
        raise AssertionError(f"slot {name} never matched; last {last}; log:\n{self.log_tail()}")

    def wait_swap(
        self, name: str, swap_count: int, *, timeout_s: float = SLOT_TIMEOUT_S
    ) -> dict[str, Any]:
        """Wait until the slot has `swap_count` records and the newest has an outcome."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            items = self.swaps(name)
            if len(items) >= swap_count and items[0]["outcome"] is not None:
                return items[0]
            time.sleep(0.1)
        raise AssertionError(f"swap {swap_count} of {name} never finished:\n{self.log_tail()}")

    def openai(self, **kwargs: Any) -> openai.OpenAI:
        """A client of the data plane, closed when the agent is cleaned up: a test that fails
        mid-request leaves its client in the traceback, and its socket, collected later, failed
        another test as an unraisable ResourceWarning."""
        client = openai.OpenAI(
            base_url=self.data_url + "/v1", api_key="unused", max_retries=0, **kwargs
        )
        self.clients.append(client)
        return client

    def backends(self) -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [p for p in kids if _is_backend(p)]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, sig: signal.Signals = signal.SIGTERM, *, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


BACKEND_MARKS = ("mlx_lm", "mlxfleet_agent.engines.embed_server")


def _is_backend(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        cmdline = " ".join(proc.cmdline())
        return any(mark in cmdline for mark in BACKEND_MARKS)
    return False


def backend_processes_using(state_dir: Path) -> list[psutil.Process]:
    """Every live mlx_lm backend whose log lives in this state dir's logs (from any agent)."""
    logs = str(state_dir / "logs")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if any(mark in cmdline for mark in BACKEND_MARKS) and any(
                f.path.startswith(logs) for f in proc.open_files()
            ):
                found.append(proc)
    return found


def start_agent(
    *,
    state_dir: Path,
    models_dir: Path,
    allowed_root: Path,
    log_path: Path,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Agent:
    args = [
        sys.executable,
        "-m",
        "mlxfleet_agent.cli",
        "serve",
        "--state-dir",
        str(state_dir),
        "--models-dir",
        str(models_dir),
        "--allowed-root",
        str(allowed_root),
        "--control-port",
        "0",
        "--data-port",
        "0",
        "--stop-grace-s",
        "5",
        "--no-caffeinate",
        *(extra or []),
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        offset = out.tell()
        full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}  # never the network
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=full_env)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"agent exited {proc.returncode}:\n{log_path.read_text()}")
        with log_path.open("rb") as fh:
            fh.seek(offset)
            for line in fh.read().decode(errors="replace").splitlines():
                if '"agent ready"' in line:
                    ready = json.loads(line)
                    token_path = state_dir / "token"  # absent when --token-file names another
                    token = token_path.read_text().strip() if token_path.exists() else ""
                    return Agent(
                        proc=proc,
                        state_dir=state_dir,
                        models_dir=models_dir,
                        log_path=log_path,
                        control_url=f"http://127.0.0.1:{ready['control_port']}",
                        data_url=f"http://127.0.0.1:{ready['data_port']}",
                        token=token,
                        args=args,
                    )
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"agent not ready in {READY_TIMEOUT_S}s:\n{log_path.read_text()}")


def cleanup(agent: Agent) -> None:
    """Close its clients, stop the agent; kill (and report) anything it left behind."""
    for client in agent.clients:
        client.close()
    backends = agent.backends()
    agent.stop()
    for proc in backends + backend_processes_using(agent.state_dir):
        with contextlib.suppress(psutil.Error):
            proc.kill()


@pytest.fixture
def agent_factory(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Agent]]:
    started: list[Agent] = []
    root = support_models.models_root(tmp_path_factory)

    def factory(
        *,
        state_dir: Path | None = None,
        models_dir: Path | None = None,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> Agent:
        agent = start_agent(
            state_dir=state_dir or tmp_path / "state",
            models_dir=models_dir or tmp_path / "models",
            allowed_root=root,
            log_path=(state_dir.parent if state_dir else tmp_path) / "agent.log",
            extra=extra,
            env=env,
        )
        started.append(agent)
        return agent

    yield factory
    for agent in started:
        cleanup(agent)


def slot_spec(model_dir: Path, served: str, **extra: Any) -> dict[str, Any]:
    return {"source": f"file://{model_dir}", "servedName": served, **extra}


@pytest.fixture(scope="module")
def serving_agent(tmp_path_factory: pytest.TempPathFactory, model_a: Path) -> Iterator[Agent]:
    base = tmp_path_factory.mktemp("serving-agent")
    agent = start_agent(
        state_dir=base / "state",
        models_dir=base / "models",
        allowed_root=support_models.models_root(tmp_path_factory),
        log_path=base / "agent.log",
    )
    try:
        resp = agent.put_slot("a", slot_spec(model_a, "tiny-a"))
        assert resp.status_code == 202, resp.text
        agent.wait_ready("a")
        yield agent
    finally:
        cleanup(agent)
