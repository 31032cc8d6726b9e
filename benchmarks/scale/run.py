"""One scale run: a real control plane, a hollow fleet, the operator as its own identity, and the
phases measured one after the other.

1. register: token Secrets + InferenceNodes; the operator starts; every node Ready.
2. converge: every ModelDeployment created at once (16 client threads, one connection each);
   until all are Ready (condition Ready, readyReplicas = replicas, observedGeneration current).
3. steady: nothing changes for `steady_s`: API server writes per second, operator CPU.
4. failover: `lost` nodes that carry replicas stop answering (connection refused); until every
   affected deployment is Ready with no replica on them; replicas counted from status and from
   the agents; the nodes come back: placements that change or Ready flips (flaps), stale slots.
5. swaps: `changes` deployments get a new model at once; until every SwapPlan is final; how long
   each waited and took (starvation), API requests meanwhile.
API server requests come from its own `apiserver_request_total` (read as admin, before and after
each phase); the bench's own writes are subtracted where it makes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.scale import observe, workload
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.dev import controlplane, processes

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAMESPACE = "scale"
API = f"/apis/{workload.GROUP}/{workload.VERSION}"


@dataclass
class Settings:
    nodes: int = 50
    deployments: int = 100
    lost: int | None = None  # default: a tenth of the nodes
    changes: int | None = None  # default: a fifth of the deployments
    poll_seconds: float = 5.0
    misses: int = 3
    failover_delay: float = 15.0
    download_s: float = 2.0
    load_s: float = 2.0
    warm_s: float = 0.5
    steady_s: float = 60.0
    converge_timeout_s: float = 900.0
    phase_timeout_s: float = 600.0
    flap_window_s: float | None = None  # default: 2 x (detection + failover delay)
    profile_s: float = 0.0  # py-spy the operator this long during convergence (0: no)
    apiserver_profile_s: float = 0.0  # the API server's CPU profile while converging (0: no)
    seed: int = 1
    root: Path = field(default_factory=lambda: REPO / ".dev" / "bench-scale")

    @property
    def lost_nodes(self) -> int:
        return self.lost if self.lost is not None else max(1, self.nodes // 10)

    @property
    def changed(self) -> int:
        return self.changes if self.changes is not None else max(1, self.deployments // 5)

    @property
    def longest_load_s(self) -> float:
        return (self.download_s + self.load_s + self.warm_s) * 1.2  # hollow jitter +-20 %


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return str(c["status"])
    return None


def deployment_ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status", {})
    return (
        condition(obj, "Ready") == "True"
        and status.get("readyReplicas") == obj["spec"]["replicas"]
        and status.get("observedGeneration") == obj["metadata"].get("generation")
    )


def placed(obj: dict[str, Any]) -> list[str]:
    return [p["node"] for p in obj.get("status", {}).get("placements", [])]


def say(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def until(what: str, check: Callable[[], Any], *, timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval)
    return None


# ---- processes --------------------------------------------------------------------------------


@dataclass
class Hollow:
    proc: subprocess.Popen[bytes]
    admin: str
    nodes: list[dict[str, Any]]

    def faults(self, names: list[str], **faults: Any) -> None:
        httpx.post(
            f"{self.admin}/faults", json={"nodes": names, "faults": faults}, timeout=60
        ).raise_for_status()

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.admin}/stats", timeout=60).json())


@contextlib.contextmanager
def hollow_fleet(s: Settings, root: Path) -> Iterator[Hollow]:
    out, log = root / "hollow.json", root / "hollow.log"
    out.unlink(missing_ok=True)  # a file from an earlier run would name other ports
    args = [
        sys.executable, "-m", "tests.support.hollow", f"--nodes={s.nodes}", f"--seed={s.seed}",
        f"--download-s={s.download_s}", f"--load-s={s.load_s}", f"--warm-s={s.warm_s}",
        f"--out={out}",
    ]  # fmt: skip
    proc = processes.spawn(args, log, die_with_parent=True)  # (run from the repo root)
    try:
        if until("hollow fleet", out.exists, timeout=120, interval=0.1) is None:
            raise RuntimeError(f"hollow fleet did not start:\n{log.read_text()[-2000:]}")
        data = json.loads(out.read_text())
        yield Hollow(proc, data["admin"], data["nodes"])
    finally:
        _stop(proc, signal.SIGTERM)


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def operator(
    s: Settings, plane: controlplane.ControlPlane, root: Path, *, metrics_port: int
) -> Iterator[int]:
    """`mlxfleet-operator` with the ServiceAccount kubeconfig (the shipped RBAC), standalone."""
    cmd = [
        str(BIN / "mlxfleet-operator"), "--kubeconfig", str(plane.operator_kubeconfig),
        "--standalone", "--poll-seconds", str(s.poll_seconds), "--misses", str(s.misses),
        "--failover-delay", str(s.failover_delay), "--log-level", "WARNING",
        "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    proc = processes.spawn(cmd, root / "operator.log", die_with_parent=True)
    try:
        yield proc.pid
    finally:
        _stop(proc, signal.SIGINT)


# ---- kube writes (admin) ----------------------------------------------------------------------


WRITERS = 16  # client threads of the bench's own writes, each with one kept-alive connection


def _each(
    admin: observe.Admin,
    items: list[tuple[str, dict[str, Any]]],
    send: Callable[[httpx.Client, str, dict[str, Any]], None],
) -> float:
    """`send` every (path, body) from `WRITERS` threads; returns the seconds it took. Each thread
    keeps one client (one connection) for all its requests, as kubectl or a GitOps controller
    does: a TLS handshake per request cost the API server about 2 ms of CPU each (5 % of its
    CPU while converging at 500 x 1,000, taken from the operator's share of the 2 cores)."""
    started, local, clients = time.monotonic(), threading.local(), []
    guard = threading.Lock()

    def one(item: tuple[str, dict[str, Any]]) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = admin.client()
            with guard:
                clients.append(client)
        send(client, *item)

    try:
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(one, items))
    finally:
        for client in clients:
            client.close()
    return time.monotonic() - started


def create_all(admin: observe.Admin, items: list[tuple[str, dict[str, Any]]]) -> float:
    """POST every (collection path, object); returns the seconds it took."""

    def post(c: httpx.Client, path: str, body: dict[str, Any]) -> None:
        r = c.post(path, json=body)
        if r.status_code not in (200, 201, 409):
            raise RuntimeError(f"POST {path}: {r.status_code} {r.text[:300]}")

    return _each(admin, items, post)


def patch_all(admin: observe.Admin, items: list[tuple[str, dict[str, Any]]]) -> float:
    """Merge-patch every (object path, patch); returns the seconds it took."""

    def patch(c: httpx.Client, path: str, body: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        c.patch(path, content=json.dumps(body), headers=headers).raise_for_status()

    return _each(admin, items, patch)


# ---- the run ------------------------------------------------------------------------------------


@dataclass
class Window:
    """Requests and operator CPU between two moments (and the CPU of the other processes)."""

    admin: observe.Admin
    sampler: observe.ProcessSampler
    others: dict[str, observe.ProcessSampler] = field(default_factory=dict)
    metrics_url: str = ""
    changes: observe.Changes = field(default_factory=observe.Changes)
    t0: float = 0.0
    counts0: Any = None
    ops0: Any = None
    changes0: Any = None

    def open(self) -> None:
        self.changes0 = self.changes.snapshot()
        self.counts0 = observe.request_counts(self.admin)
        self.ops0 = observe.operator_counts(self.metrics_url)
        self.t0 = time.monotonic()

    def _operator(self, seconds: float) -> dict[str, Any]:
        now = observe.operator_counts(self.metrics_url)
        d = {k: v - self.ops0.get(k, 0) for k, v in now.items()}
        out: dict[str, Any] = {}
        for kind in ("InferenceNode", "ModelDeployment", "SwapPlan"):
            n = d.get(f"reconciles:{kind}", 0)
            buckets = {
                float(k.rsplit(":", 1)[1]): v for k, v in d.items() if k.startswith(f"le:{kind}:")
            }
            out[kind] = {
                "per_s": round(n / seconds, 2),
                "mean_ms": round(1000 * d.get(f"reconcile_s:{kind}", 0) / n, 1) if n else None,
                "p50_ms": _ms(0.5, buckets),
                "p99_ms": _ms(0.99, buckets),
            }
        polls = sum(v for k, v in d.items() if k.startswith("calls:state:"))
        out["agent_polls_per_s"] = round(polls / seconds, 2)
        out["agent_calls"] = {
            k[6:]: int(v) for k, v in sorted(d.items()) if k[:6] == "calls:" and v
        }
        return out

    def close(self, *, own: dict[observe.Key, int] | None = None) -> dict[str, Any]:
        counts = observe.delta(observe.request_counts(self.admin), self.counts0)
        for key, n in (own or {}).items():
            counts[key] -= n
        seconds = time.monotonic() - self.t0
        cpu, rss = self.sampler.window(self.t0, time.monotonic())
        changed = self.changes.snapshot() - self.changes0
        return {
            "seconds": round(seconds, 1),
            "requests": sum(counts.values()),
            "writes": observe.writes(counts),
            "writes_per_s": round(observe.writes(counts) / seconds, 2) if seconds else 0.0,
            "writes_per_min": round(60 * observe.writes(counts) / seconds) if seconds else 0,
            "requests_per_s": round(sum(counts.values()) / seconds, 2) if seconds else 0.0,
            "by_verb": observe.by_verb(counts),
            "top": observe.top_requests(counts),
            "object_changes": changed.most_common(16),  # what the writes changed (watches)
            "operator_cpu_s": round(cpu, 1),
            "operator_cpu_pct": round(100 * cpu / seconds, 1) if seconds else 0.0,
            "operator_rss_mb": round(rss / 2**20, 1),
            "operator": self._operator(seconds) if seconds else {},
            "cpu_pct": {
                name: round(100 * other.window(self.t0, time.monotonic())[0] / seconds, 1)
                for name, other in self.others.items()
            }
            if seconds
            else {},
        }


def _ms(q: float, buckets: dict[float, float]) -> float | str | None:
    """A reconcile-duration quantile in ms; `">30000"` when it lies beyond the largest bucket."""
    found = observe.quantile(q, buckets)
    finite = [b for b in buckets if b != float("inf")]
    if found is None or not finite:
        return None
    top = max(finite)
    if q * buckets.get(float("inf"), 0) > buckets[top]:
        return f">{1000 * top:.0f}"
    return round(1000 * found, 1)


def run(s: Settings) -> dict[str, Any]:
    root = s.root / f"n{s.nodes}-d{s.deployments}"
    if root.exists():
        controlplane.stop(root / "cp")
        shutil.rmtree(root)  # logs of an earlier run would count as this one's
    root.mkdir(parents=True)
    result: dict[str, Any] = {"nodes": s.nodes, "deployments": s.deployments}
    with contextlib.ExitStack() as stack:
        plane = controlplane.start(
            root / "cp", die_with_parent=True, profiling=s.apiserver_profile_s > 0
        )
        stack.callback(controlplane.stop, root / "cp")
        admin = observe.Admin.from_kubeconfig(plane.kubeconfig)
        fleet = stack.enter_context(hollow_fleet(s, root))
        plane.kubectl("create", "namespace", NAMESPACE)
        say(f"{s.nodes} hollow nodes up; registering them")
        result["register_s"] = round(_register(admin, fleet), 1)
        (metrics_port,) = processes.free_ports(1)
        pid = stack.enter_context(operator(s, plane, root, metrics_port=metrics_port))
        sampler = observe.ProcessSampler(pid).start()
        stack.callback(sampler.stop)
        changes = observe.Changes()
        nodes = observe.Watcher(
            admin, f"{API}/inferencenodes", on_event=changes.seen("InferenceNode")
        ).start()
        stack.callback(nodes.stop)
        started = time.monotonic()
        ready = until(
            "nodes Ready",
            lambda: (
                sum(condition(o, "Ready") == "True" for o in nodes.snapshot().values()) == s.nodes
            ),
            timeout=s.phase_timeout_s,
        )
        result["nodes_ready_s"] = round(time.monotonic() - started, 1) if ready else None
        say(f"nodes Ready after {result['nodes_ready_s']} s; applying {s.deployments} deployments")
        deps = observe.Watcher(
            admin,
            f"{API}/namespaces/{NAMESPACE}/modeldeployments",
            on_event=changes.seen("ModelDeployment"),
        ).start()
        stack.callback(deps.stop)
        others = {
            "kube-apiserver": plane.apiserver_pid,
            "etcd": plane.etcd_pid,
            "hollow fleet": fleet.proc.pid,
            "bench (its writes and watches)": os.getpid(),
        }
        window = Window(
            admin,
            sampler,
            {k: observe.ProcessSampler(p).start() for k, p in others.items()},
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            changes=changes,
        )
        for other in window.others.values():
            stack.callback(other.stop)
        budget = sum(n["budgetBytes"] for n in fleet.nodes)
        result |= _converge(s, admin, deps, window, pid, root, budget=budget)
        say(f"converged: {result['converge_total_s']} s; steady state for {s.steady_s} s")
        result |= _steady(s, window)
        say(f"steady: {result['steady_writes_per_s']} writes/s; {s.lost_nodes} nodes lost")
        result |= _failover(s, admin, deps, nodes, fleet, window)
        say(f"failover: {result['failover_s']} s; {s.changed} deployments change model")
        result |= _swaps(s, admin, deps, window)
        say(f"swaps drained: {result['swap_drain_s']} s")
        result["agent_answers"] = fleet.stats()["answers"]
        result["operator_rss_timeline"] = [
            (round(t - started, 0), round(rss / 2**20)) for t, _, rss in sampler.samples[::60]
        ]
        result["operator_rss_mb"] = round(sampler.rss_max / 2**20, 1)
        result["operator_log_errors"] = _log_errors(root / "operator.log")
        result["operator_log_kinds"] = observe.log_kinds(_read(root / "operator.log"))
        result["load_avg_1m"] = round(os.getloadavg()[0], 1)
    return result


def _register(admin: observe.Admin, fleet: Hollow) -> float:
    secrets = [
        (f"/api/v1/namespaces/{workload.SECRET_NAMESPACE}/secrets", workload.secret(n))
        for n in fleet.nodes
    ]
    nodes = [
        (f"{API}/inferencenodes", workload.inference_node(n, i)) for i, n in enumerate(fleet.nodes)
    ]
    return create_all(admin, secrets) + create_all(admin, nodes)


def _converge(
    s: Settings,
    admin: observe.Admin,
    deps: observe.Watcher,
    window: Window,
    pid: int,
    root: Path,
    *,
    budget: int,
) -> dict[str, Any]:
    items = workload.deployments(s.deployments, namespace=NAMESPACE, seed=s.seed)
    window.open()
    profiler: list[observe.Profile] = []
    if s.profile_s:
        threading.Thread(
            target=lambda: profiler.append(
                observe.profile(pid, s.profile_s, out=root / "converge.pyspy.txt")
            ),
            daemon=True,
        ).start()
    apiserver: list[list[tuple[str, float]]] = []
    if s.apiserver_profile_s:
        threading.Thread(
            target=lambda: apiserver.append(
                observe.apiserver_profile(
                    admin, s.apiserver_profile_s, out=root / "converge.apiserver.pprof"
                )
            ),
            daemon=True,
        ).start()
    apply_s = create_all(
        admin, [(f"{API}/namespaces/{NAMESPACE}/modeldeployments", d) for d in items]
    )
    timeline: list[tuple[float, int]] = []

    def all_ready() -> bool:
        count = sum(deployment_ready(o) for o in deps.snapshot().values())
        t = round(time.monotonic() - window.t0, 1)
        if not timeline or timeline[-1][1] != count:
            timeline.append((t, count))
        return count == s.deployments

    done = until("deployments Ready", all_ready, timeout=s.converge_timeout_s, interval=1.0)
    converge_s = time.monotonic() - window.t0
    stats = window.close(own={("POST", "modeldeployments", ""): s.deployments})
    out: dict[str, Any] = {
        "apply_s": round(apply_s, 1),
        "converge_total_s": round(converge_s, 1) if done else None,
        "converge_s": round(converge_s - s.longest_load_s, 1) if done else None,
        "ready_at_end": timeline[-1][1] if timeline else 0,
        "demand_share": round(workload.demand_bytes(items) / budget, 3),
        "converge_timeline": _thin(timeline),
        "converge": stats,
    }
    if profiler:
        out["profile"] = {
            "samples": profiler[0].samples,
            "inclusive": [(f, round(p, 3)) for f, p in profiler[0].inclusive],
            "own": [(f, round(p, 3)) for f, p in profiler[0].own],
        }
    if apiserver:
        out["apiserver_profile"] = [(f, round(p, 3)) for f, p in apiserver[0]]
    return out


def _thin(timeline: list[tuple[float, int]], keep: int = 12) -> list[tuple[float, int]]:
    if len(timeline) <= keep:
        return timeline
    step = len(timeline) / keep
    picked = [timeline[int(i * step)] for i in range(keep)]
    return picked if picked[-1] == timeline[-1] else [*picked, timeline[-1]]


def _steady(s: Settings, window: Window) -> dict[str, Any]:
    time.sleep(10)  # settle: the last status writes of convergence
    window.open()
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    time.sleep(s.steady_s)
    stats = window.close()
    try:  # what the window's Event POSTs were about (late ones of convergence, or new)
        stats["events"] = observe.events_since(window.admin, since)[:12]
    except httpx.HTTPError as exc:
        stats["events"] = [(f"not listed: {exc}", 0)]
    return {"steady_writes_per_s": stats["writes_per_s"], "steady": stats}


def _failover(
    s: Settings,
    admin: observe.Admin,
    deps: observe.Watcher,
    nodes: observe.Watcher,
    fleet: Hollow,
    window: Window,
) -> dict[str, Any]:
    before = deps.snapshot()
    carrying = sorted({n for o in before.values() for n in placed(o)})
    lost = sorted(random.Random(s.seed).sample(carrying, min(s.lost_nodes, len(carrying))))
    gone = set(lost)
    affected = sorted(name for name, o in before.items() if gone & set(placed(o)))
    window.open()
    fleet.faults(lost, down="refuse")
    settled: dict[str, float] = {}
    detected: dict[str, float] = {}

    def moved() -> bool:
        now = time.monotonic() - window.t0
        for name, o in nodes.snapshot().items():
            if name in gone and name not in detected and condition(o, "Ready") != "True":
                detected[name] = now
        snap = deps.snapshot()
        for name in affected:
            dep = snap.get(name)
            if (
                name not in settled
                and dep
                and deployment_ready(dep)
                and not gone & set(placed(dep))
            ):
                settled[name] = now
        return len(settled) == len(affected)

    done = until("failover", moved, timeout=s.phase_timeout_s, interval=0.5)
    stats = window.close()
    snap = deps.snapshot()
    twice = _counted_twice(snap, fleet, exclude=gone)
    falsely = sorted(
        name
        for name, o in nodes.snapshot().items()
        if name not in gone and condition(o, "Ready") != "True"
    )
    out: dict[str, Any] = {
        "lost_nodes": len(lost),
        "affected_deployments": len(affected),
        "failover_s": round(max(settled.values()), 1) if done and settled else None,
        "failover_median_s": round(statistics.median(settled.values()), 1) if settled else None,
        "failover_moved": len(settled),
        "detect_s": round(max(detected.values()), 1) if len(detected) == len(lost) else None,
        "counted_twice": {k: v for k, v in twice.items() if k != "detail"},
        "counted_twice_detail": twice["detail"],
        "not_ready_not_lost": falsely[:20],  # healthy nodes NotReady at the phase's end
        "failover": stats,
    }
    out |= _comeback(s, deps, nodes, fleet, lost, sorted(settled))
    out["counted_twice_after_comeback"] = _counted_twice(deps.snapshot(), fleet, exclude=set())
    return out


def _counted_twice(
    snap: dict[str, dict[str, Any]], fleet: Hollow, *, exclude: set[str]
) -> dict[str, Any]:
    """Deployments whose status lists a node twice or more ready replicas than wanted
    (`status`), and deployments with more live serving slots on the agents than replicas,
    split by why: `handover` (every extra slot is a replica the status lists as Removing:
    make-before-break keeps it serving until its replacement serves, by design) and `agents`
    (an extra slot the status does not list at all: a slot the operator lost track of)."""
    status = sum(
        1
        for o in snap.values()
        if len(set(placed(o))) != len(placed(o))
        or (o.get("status", {}).get("readyReplicas") or 0) > o["spec"]["replicas"]
    )
    slots: dict[str, set[str]] = {}
    for node, found in fleet.stats()["slots"].items():
        if node in exclude:
            continue
        for slot, info in found.items():
            if info["ready"] and not info["deleted"]:
                slots.setdefault(slot, set()).add(node)
    handover, agents = 0, 0
    detail: list[dict[str, Any]] = []
    for name, o in sorted(snap.items()):
        holding = slots.get(naming.slot_name(NAMESPACE, name), set())
        if len(holding) <= o["spec"]["replicas"]:
            continue
        listed = o.get("status", {}).get("placements", [])
        chosen = {p["node"] for p in listed if p.get("phase") != "Removing"}
        removing = {p["node"] for p in listed if p.get("phase") == "Removing"}
        extra = holding - chosen
        if extra <= removing:
            handover += 1
        else:
            agents += 1
        if len(detail) < 10:
            ready: dict[str, Any] = next(
                (c for c in o.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {}
            )
            detail.append(
                {
                    "deployment": name,
                    "replicas": o["spec"]["replicas"],
                    "slots_on": sorted(holding),
                    "placements": [(p["node"], p.get("phase")) for p in listed],
                    "ready": (ready.get("status"), ready.get("reason")),
                }
            )
    return {"status": status, "agents": agents, "handover": handover, "detail": detail}


def _comeback(
    s: Settings,
    deps: observe.Watcher,
    nodes: observe.Watcher,
    fleet: Hollow,
    lost: list[str],
    moved: list[str],
) -> dict[str, Any]:
    """The lost nodes answer again: nothing moves back, nothing flaps, stale slots go. A flap
    is a deployment that had failed over (Ready elsewhere within the phase) and is Ready now
    whose serving nodes change or whose Ready turns False while the nodes come back; one that
    had not finished its failover is still moving, which is no flap (counted apart)."""
    start = deps.snapshot()
    where = {
        name: _serving(o) for name, o in start.items() if name in moved and deployment_ready(o)
    }
    fleet.faults(lost)
    t0 = time.monotonic()
    window = s.flap_window_s or 2 * (s.poll_seconds * s.misses + s.failover_delay)
    flaps: dict[str, dict[str, Any]] = {}
    back_s: float | None = None
    while time.monotonic() - t0 < window:
        snap = deps.snapshot()
        for name, nodes_then in where.items():
            o = snap.get(name)
            now = _serving(o) if o is not None else []
            if name not in flaps and (now != nodes_then or condition(o or {}, "Ready") != "True"):
                ready: dict[str, Any] = next(
                    (c for c in (o or {}).get("status", {}).get("conditions", [])
                     if c["type"] == "Ready"),
                    {},
                )  # fmt: skip
                flaps[name] = {
                    "t": round(time.monotonic() - t0, 1),
                    "before": nodes_then,
                    "after": now,
                    "ready": (ready.get("status"), ready.get("reason"), ready.get("message")),
                }
        if back_s is None and all(
            condition(nodes.snapshot().get(n, {}), "Ready") == "True" for n in lost
        ):
            back_s = time.monotonic() - t0
        time.sleep(1.0)
    stats = fleet.stats()["slots"]
    stale = sum(
        1
        for node in lost
        for slot, info in stats.get(node, {}).items()
        if not info["deleted"] and not _placed_there(deps.snapshot(), slot, node)
    )
    return {
        "comeback_ready_s": round(back_s, 1) if back_s is not None else None,
        "comeback_window_s": round(window, 1),
        "flapping_deployments": len(flaps),
        "flap_watched": len(where),  # failed over and Ready when the nodes came back
        "flap_detail": [{"deployment": k, **v} for k, v in sorted(flaps.items())[:10]],
        "stale_slots_after_window": stale,
    }


def _serving(o: dict[str, Any]) -> list[str]:
    """The nodes whose replicas count (a Removing one is on its way out, by design)."""
    return sorted(
        p["node"] for p in o.get("status", {}).get("placements", []) if p.get("phase") != "Removing"
    )


def _placed_there(snap: dict[str, dict[str, Any]], slot: str, node: str) -> bool:
    for name, o in snap.items():
        if naming.slot_name(NAMESPACE, name) == slot:
            return node in placed(o)
    return False


def _swaps(
    s: Settings, admin: observe.Admin, deps: observe.Watcher, window: Window
) -> dict[str, Any]:
    snap = deps.snapshot()
    ready = sorted(name for name, o in snap.items() if deployment_ready(o))
    chosen = sorted(random.Random(s.seed + 1).sample(ready, min(s.changed, len(ready))))
    target = {n: workload.changed(snap[n])["spec"]["model"]["source"] for n in chosen}
    seen: dict[str, float] = {}
    final: dict[str, tuple[float, str]] = {}
    waited: dict[str, float] = {}

    def on_plan(kind: str, obj: dict[str, Any], at: float) -> None:
        spec = obj.get("spec", {})
        dep = spec.get("deploymentRef", {}).get("name")
        if dep not in target or spec.get("target", {}).get("source") != target[dep]:
            return
        seen.setdefault(dep, at)
        status = obj.get("status", {})
        if status.get("startedAt") and dep not in waited:
            created = _ts(obj["metadata"]["creationTimestamp"])
            waited[dep] = (_ts(status["startedAt"]) - created).total_seconds()
        if status.get("phase") in ("Completed", "Failed", "RolledBack") and dep not in final:
            final[dep] = (at, status["phase"])

    plans = observe.Watcher(
        admin, f"{API}/namespaces/{NAMESPACE}/swapplans", on_event=on_plan
    ).start()
    window.open()
    patches = [
        (
            f"{API}/namespaces/{NAMESPACE}/modeldeployments/{n}",
            {"spec": {"model": {"source": target[n]}}},
        )
        for n in chosen
    ]
    patch_all(admin, patches)
    done = until("SwapPlans final", lambda: len(final) == len(chosen), timeout=s.phase_timeout_s)
    stats = window.close(own={("PATCH", "modeldeployments", ""): len(chosen)})
    plans.stop()
    took = [final[d][0] - seen[d] for d in final if d in seen]
    phases: dict[str, int] = {}
    for _, phase in final.values():
        phases[phase] = phases.get(phase, 0) + 1
    return {
        "swap_deployments": len(chosen),
        "swap_plans_final": len(final),
        "swap_plan_phases": phases,
        "swap_drain_s": round(max(a for a, _ in final.values()) - window.t0, 1)
        if done and final
        else None,
        "swap_plan_s_median": round(statistics.median(took), 1) if took else None,
        "swap_plan_s_max": round(max(took), 1) if took else None,
        "swap_wait_to_start_s_max": round(max(waited.values()), 1) if waited else None,
        "swaps": stats,
    }


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _log_errors(path: Path) -> int:
    return sum(1 for line in _read(path).splitlines() if "ERROR" in line)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
