"""Election test wiring: candidate processes (driver.py) against the real API server as the
operator's identity, the Lease as the admin sees it, and checks on who acted when.

Fixtures: `election` (start/kill/stop candidates, read their ticks, sample the Lease).
Everything started here is stopped at teardown, by process id.
May import: pytest, httpx, the control plane, tests.faults.tcpproxy. Called by: election tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mlxfleet_operator.dev import controlplane
from tests.support import tcpproxy
from tests.support.kubeapi import AdminApi, LeaseSampler, Sample


@dataclass
class Candidate:
    identity: str
    proc: subprocess.Popen[bytes]
    log: Path
    proxy: tcpproxy.Proxy | None = None

    def signal(self, sig: int) -> float:
        at = time.time()
        os.kill(self.proc.pid, sig)
        return at

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def logged_at(self, needle: str) -> float | None:
        """Unix time of the first log line containing `needle`."""
        for line in self.text().splitlines():
            if needle in line:
                with contextlib.suppress(ValueError, IndexError):
                    return float(line.split()[0])
        return None


@dataclass
class Election:
    cluster: controlplane.ControlPlane
    root: Path
    api: AdminApi
    ticks_file: Path
    started: list[Candidate] = field(default_factory=list)
    samplers: list[LeaseSampler] = field(default_factory=list)

    def kubeconfig_via(self, proxy: tcpproxy.Proxy) -> Path:
        """The operator's kubeconfig with the API server reached through `proxy`."""
        config = json.loads(self.cluster.operator_kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://{proxy.address}"
        fd, name = tempfile.mkstemp(dir=self.root, suffix=".kubeconfig")
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        return Path(name)

    def start(self, identity: str, *extra: str, through: bool = False) -> Candidate:
        """A candidate as the operator identity; `through`: its API traffic via a proxy."""
        proxy = None
        kubeconfig = self.cluster.operator_kubeconfig
        if through:
            host, port = self.cluster.server.removeprefix("https://").rsplit(":", 1)
            proxy = tcpproxy.Proxy(host, int(port))
            kubeconfig = self.kubeconfig_via(proxy)
        log = self.root / f"{identity}.log"
        cmd = [
            sys.executable, "-m", "tests.integration.election.driver",
            "--kubeconfig", str(kubeconfig), "--identity", identity,
            "--ticks", str(self.ticks_file), *extra,
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        candidate = Candidate(identity, proc, log, proxy)
        self.started.append(candidate)
        return candidate

    def ticks(self) -> list[tuple[str, float]]:
        if not self.ticks_file.exists():
            return []
        out = []
        for line in self.ticks_file.read_text().splitlines():
            who, at = line.split()
            out.append((who, float(at)))
        return sorted(out, key=lambda x: x[1])

    def first_tick(self, identity: str) -> float | None:
        return next((t for who, t in self.ticks() if who == identity), None)

    def last_tick(self, identity: str) -> float | None:
        found = [t for who, t in self.ticks() if who == identity]
        return found[-1] if found else None

    def sample(self) -> LeaseSampler:
        """Start reading the Lease every 50 ms (stopped at teardown)."""
        sampler = LeaseSampler(self.api)
        self.samplers.append(sampler)
        return sampler

    def wait_acting(
        self, identity: str | None = None, *, timeout: float = 60, after: float = 0.0
    ) -> str:
        """Who acts now (ticked in the last 0.5 s, after `after`), or `identity` once it does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ticks = self.ticks()
            now = time.time()
            recent = [who for who, t in ticks if now - t < 0.5 and t > after]
            if recent and (identity is None or recent[-1] == identity):
                return recent[-1]
            for c in self.started:  # a candidate that failed (not: stopped, fenced, killed)
                if (c.proc.poll() or 0) > 0 and c.proc.returncode != 75:
                    raise AssertionError(f"{c.identity} crashed:\n{c.text()[-3000:]}")
            time.sleep(0.05)
        logs = "\n".join(f"--- {c.identity}\n{c.text()[-2000:]}" for c in self.started)
        raise AssertionError(f"nobody acting ({identity=}) after {timeout}s\n{logs}")

    def candidate(self, identity: str) -> Candidate:
        return next(c for c in self.started if c.identity == identity)


def runs(ticks: list[tuple[str, float]]) -> list[tuple[str, float, float]]:
    """(identity, first, last) of each uninterrupted run of one identity's ticks."""
    out: list[tuple[str, float, float]] = []
    for who, at in ticks:
        if out and out[-1][0] == who:
            out[-1] = (who, out[-1][1], at)
        else:
            out.append((who, at, at))
    return out


def assert_one_actor_at_a_time(
    ticks: list[tuple[str, float]], samples: list[Sample] | None = None
) -> list[tuple[str, float, float]]:
    """Every candidate acted in one uninterrupted run (no two ever interleave), and while it did,
    every Lease read named it as the holder."""
    found = runs(ticks)
    who = [r[0] for r in found]
    assert len(who) == len(set(who)), f"acting interleaved: {found}"
    for identity, first, last in found:
        for s in samples or ():
            if s.sent >= first and s.received <= last:
                assert s.holder == identity, (identity, first, last, s)
    return found


@pytest.fixture
def election(cluster: controlplane.ControlPlane, tmp_path: Path) -> Iterator[Election]:
    api = AdminApi(cluster.kubeconfig)
    api.delete_lease()
    ws = Election(cluster=cluster, root=tmp_path, api=api, ticks_file=tmp_path / "ticks")
    yield ws
    for sampler in ws.samplers:
        sampler.stop()
    for c in ws.started:
        if c.proc.poll() is None:
            c.proc.send_signal(signal.SIGKILL)
            c.proc.wait(timeout=10)
        if c.proxy is not None:
            c.proxy.stop()
    api.delete_lease()
    api.close()
