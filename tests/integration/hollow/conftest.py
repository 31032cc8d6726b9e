"""A hollow fleet as its own process (`python -m tests.support.hollow`), like the benchmark runs it.

`hollow_factory(*args)` starts one with those CLI flags and returns a `HollowFleet` (its nodes,
admin URL, a client per node); every fleet started is stopped (SIGTERM) after the test.
May import: pytest, httpx, tests.support.hollow. Called by: tests/integration/hollow.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

START_TIMEOUT_S = 60.0


@dataclass
class HollowFleet:
    proc: subprocess.Popen[bytes]
    admin: str
    nodes: list[dict[str, Any]]
    log: Path

    def api(self, index: int, method: str, path: str, **kwargs: Any) -> httpx.Response:
        node = self.nodes[index]
        headers = {"Authorization": f"Bearer {node['token']}", **kwargs.pop("headers", {})}
        return httpx.request(method, node["url"] + path, headers=headers, timeout=10, **kwargs)

    def faults(self, names: list[str], **faults: Any) -> None:
        r = httpx.post(f"{self.admin}/faults", json={"nodes": names, "faults": faults}, timeout=10)
        r.raise_for_status()

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.admin}/stats", timeout=10).json())


def start(args: list[str], root: Path) -> HollowFleet:
    root.mkdir(parents=True, exist_ok=True)
    out, log = root / "fleet.json", root / "hollow.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.hollow", "--out", str(out), *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not out.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"hollow fleet did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    data = json.loads(out.read_text())
    return HollowFleet(proc=proc, admin=data["admin"], nodes=data["nodes"], log=log)


def stop(fleet: HollowFleet) -> None:
    if fleet.proc.poll() is None:
        fleet.proc.send_signal(signal.SIGTERM)
        try:
            fleet.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fleet.proc.kill()
            fleet.proc.wait(timeout=10)


@pytest.fixture
def hollow_factory(tmp_path: Path) -> Iterator[Callable[..., HollowFleet]]:
    started: list[HollowFleet] = []

    def factory(*args: str) -> HollowFleet:
        fleet = start(list(args), tmp_path / f"hollow-{len(started)}")
        started.append(fleet)
        return fleet

    yield factory
    for fleet in started:
        stop(fleet)
