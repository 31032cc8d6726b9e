"""Fault-injection wiring: the e2e fixtures (real agents, the real API server) plus operator
replicas that elect a leader, supervised the way a Deployment restarts its pods, a Lease watch,
data-plane load through the EndpointSlices, and a table of measured figures.

Fixtures: `agents`, `e2e` (from tests/e2e), `operators` (replicas of `mlxfleet-operator` as the
operator identity; exited ones are restarted after a second, like a pod), `lease` (the Lease as
the admin reads it), `figures` (each scenario's measurements, printed at the end of the session
and written to <basetemp>/faults-figures.json).
Everything started here is stopped at teardown, by process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.dev import controlplane
from tests.e2e.conftest import (
    BIN,
    E2E,
    FAILOVER_DELAY,
    MISSES,
    POLL,
    Agent,
    Agents,
    stop_process,
    wait_for,
)
from tests.e2e.conftest import agents as agents  # fixtures shared with the e2e suite
from tests.e2e.conftest import e2e as e2e
from tests.e2e.loadgen import DiscoveredLoad
from tests.support.kubeapi import AdminApi, LeaseSampler


class KnownDefect(AssertionError):
    """A check that fails today for a reason written down (docs/faults.md); scenarios mark it
    `xfail(strict=True, raises=KnownDefect)`, so any other failure still fails the test and the
    day the defect is fixed the xfail turns into a failure that asks to remove the mark."""


def expect_fixed(ok: bool, defect: str) -> None:
    """The last check of a scenario whose other checks pass today."""
    if not ok:
        raise KnownDefect(defect)


RESTART_AFTER = 1.0  # a pod's restart after its container exited (kubelet backoff, first step)
_FIGURES: list[dict[str, Any]] = []


# ------------------------------------------------------------------------ operator replicas


@dataclass
class Replica:
    name: str  # POD_NAME; the Lease holder is "<name>_<suffix>"
    cmd: list[str]
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    exits: list[int] = field(default_factory=list)  # exit status of each run that ended
    exited_at: list[float] = field(default_factory=list)  # when each exit was seen (Unix time)
    supervised: bool = True

    def start(self) -> None:
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["POD_NAME"] = self.name
        with self.log_path().open("wb") as log:
            self.proc = subprocess.Popen(
                self.cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_path(self) -> Path:
        """The log of the current (latest) run."""
        return self.log_dir / f"{self.name}-{self.starts}.log"

    def log(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.log_dir.glob(f"{self.name}-*.log"))
        )

    def agent_connections(self, ports: set[int]) -> list[str]:
        """Open TCP connections of this process to any of `ports` (agents' control APIs)."""
        if not self.alive():
            return []
        with contextlib.suppress(psutil.Error):
            return [
                f"{c.raddr.ip}:{c.raddr.port}"
                for c in psutil.Process(self.pid).net_connections(kind="tcp")
                if c.raddr and c.raddr.port in ports
            ]
        return []


@dataclass
class Operators:
    cluster: controlplane.ControlPlane
    root: Path
    api: AdminApi
    replicas: dict[str, Replica] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, name: str, *extra: str, standalone: bool = False) -> Replica:
        cmd = [
            str(BIN / "mlxfleet-operator"),
            "--kubeconfig", str(self.cluster.operator_kubeconfig),
            "--poll-seconds", str(POLL),
            "--misses", str(MISSES),
            "--failover-delay", str(FAILOVER_DELAY),
            *(["--standalone"] if standalone else []),
            *extra,
        ]  # fmt: skip
        self.root.mkdir(parents=True, exist_ok=True)
        replica = Replica(name=name, cmd=cmd, log_dir=self.root)
        with self._lock:
            self.replicas[name] = replica
        replica.start()
        return replica

    def supervise(self) -> None:
        """Restart replicas that exited (a Deployment's pods), until teardown."""
        while not self._stop.wait(0.2):
            with self._lock:
                found = list(self.replicas.values())
            for r in found:
                if r.supervised and r.proc is not None and r.proc.poll() is not None:
                    r.exits.append(r.proc.returncode)
                    r.exited_at.append(time.time())
                    time.sleep(RESTART_AFTER)
                    if not self._stop.is_set() and r.supervised:
                        r.start()

    def holder(self) -> str | None:
        """The replica named in the Lease (None: nobody holds it)."""
        with contextlib.suppress(Exception):
            who = self.api.holder()
            return who.rsplit("_", 1)[0] if who else None
        return None

    def leader(self, *, timeout: float = 60, other_than: str | None = None) -> Replica:
        name = wait_for(
            "an operator leader",
            lambda: (h := self.holder()) and h != other_than and h,
            timeout=timeout,
            interval=0.05,
        )
        return self.replicas[str(name)]

    def kill(self, name: str, sig: int = signal.SIGKILL) -> float:
        at = time.time()
        os.kill(self.replicas[name].pid, sig)
        return at

    def stop_all(self) -> None:
        self._stop.set()
        for r in self.replicas.values():
            r.supervised = False
            if r.proc is not None:
                stop_process(r.proc, sig=signal.SIGINT, grace=20)

    def logs(self) -> str:
        return "\n".join(f"===== {n}\n{r.log()[-4000:]}" for n, r in self.replicas.items())


@pytest.fixture
def operators(cluster: controlplane.ControlPlane, tmp_path: Path) -> Iterator[Operators]:
    api = AdminApi(cluster.kubeconfig)
    api.delete_lease()  # no holder left over from an earlier test
    pool = Operators(cluster=cluster, root=tmp_path / "operators", api=api)
    watcher = threading.Thread(target=pool.supervise, daemon=True)
    watcher.start()
    yield pool
    pool.stop_all()
    watcher.join(timeout=10)
    api.delete_lease()
    api.close()


def takeover(lease: LeaseSampler, since: float, *, timeout: float = 30) -> float:
    """Seconds from `since` until the Lease named a holder other than the one it named then
    (waits for the sampler to see it)."""

    def changed() -> float | None:
        samples = list(lease.samples)
        before = [s.holder for s in samples if s.received <= since]
        old = before[-1] if before else None
        return next(
            (s.received for s in samples if s.sent > since and s.holder not in (None, old)), None
        )

    return float(wait_for("the sampled Lease names a new holder", changed, timeout=timeout)) - since


def plan_status(ws: E2E, plan: str) -> dict[str, Any]:
    return dict(ws.get("swp", plan).get("status", {}))


@pytest.fixture
def lease(cluster: controlplane.ControlPlane) -> Iterator[LeaseSampler]:
    """Who holds the operator Lease, read every 50 ms for the whole test."""
    api = AdminApi(cluster.kubeconfig)
    sampler = LeaseSampler(api)
    yield sampler
    sampler.stop()
    api.close()


# ---------------------------------------------------------------------------- data plane


def endpoint_urls(api: AdminApi, namespace: str, deployment: str) -> list[str]:
    """Ready data-plane base URLs from the deployment's EndpointSlices (`loopback.localhost`,
    what the operator publishes for agents on 127.0.0.1, is 127.0.0.1)."""
    service = naming.service_name(deployment)
    found = api.get(
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        f"?labelSelector=kubernetes.io/service-name={service}"
    )
    urls = []
    for item in (found or {}).get("items", []):
        port = item["ports"][0]["port"]
        for ep in item.get("endpoints") or []:
            if ep["conditions"].get("ready"):
                for address in ep["addresses"]:
                    host = "127.0.0.1" if address == "loopback.localhost" else address
                    urls.append(f"http://{host}:{port}")
    return sorted(urls)


def traffic(
    api: AdminApi, ws: E2E, deployment: str, *, workers: int = 2, timeout: float = 15.0
) -> DiscoveredLoad:
    """Streaming clients that follow the deployment's EndpointSlices (as a Service proxy)."""
    return DiscoveredLoad(
        lambda: endpoint_urls(api, ws.namespace, deployment),
        deployment,
        workers=workers,
        timeout=timeout,
    )


@pytest.fixture
def admin(cluster: controlplane.ControlPlane) -> Iterator[AdminApi]:
    api = AdminApi(cluster.kubeconfig)
    yield api
    api.close()


@pytest.fixture
def fleet(e2e: E2E, agents: Agents, operators: Operators, admin: AdminApi) -> Any:
    """`steps.Fleet`: the workspace, agents, operator replicas and the admin API together."""
    from tests.faults import steps

    return steps.Fleet(e2e=e2e, agents=agents, operators=operators, admin=admin)


def slots_everywhere(pool: list[Agent], slot: str) -> dict[str, list[dict[str, Any]]]:
    """Each agent's entries for `slot` (an agent that does not answer: missing)."""
    out = {}
    for agent in pool:
        with contextlib.suppress(Exception):
            out[agent.name] = [s for s in agent.state()["slots"] if s["name"] == slot]
    return out


# -------------------------------------------------------------------------------- figures


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A dict the test fills with what it measured; kept for the session's table."""
    found: dict[str, Any] = {"test": request.node.nodeid.split("::")[-1]}
    yield found
    _FIGURES.append(found)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("fault scenarios: measured")
    for row in _FIGURES:
        terminalreporter.write_line(json.dumps(row, default=str))
    base = Path(terminalreporter.config._tmp_path_factory.getbasetemp())
    (base / "faults-figures.json").write_text(json.dumps(_FIGURES, indent=1, default=str))
