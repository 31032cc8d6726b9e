"""Preemption: time from a higher-priority ModelDeployment's apply to its Ready when it must first
evict a lower-priority replica from the only Mac it fits on, beside the same apply on an empty
Mac (the baseline), in the same run.

Real parts: the local control plane (etcd + kube-apiserver), one agent with mlx-lm whose memory
budget holds one replica and not two, and `mlxfleet-operator` (`--poll-seconds 1`, as the e2e
tests run it). Each round applies a fresh `high` (priority 10) twice: once on the empty Mac, once
while a `low` (priority 0, `minReplicas: 0`, `idleTimeout: 1h`) serves there; the order alternates
between rounds.
With preemption it also times the eviction: from the apply to the moment the agent no longer
lists the low replica's slot. Medians (min-max) of `--rounds` each, the difference, and the load
average are printed as a Markdown table.
Run: `python -m benchmarks.preemption_bench [--rounds 3]` (`make bench-preemption`, `make bench`).
May import: the standard library, tests.e2e.conftest, mlxfleet packages.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.e2e.conftest import E2E, POLL, Agent, Agents, Operator, is_true, wait_for

from mlxfleet_agent.dev import devmodels
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.dev import controlplane

BUDGET = 1024 * 2**20  # one 600Mi replica fits, two do not
MEMORY = "600Mi"
BACKOFF_S = 2.0

until = functools.partial(wait_for, timeout=300, interval=0.05)


def manifest(ws: E2E, name: str, model: Path, **spec: Any) -> dict[str, Any]:
    return ws.deployment(name, model, replicas=1, resources={"memory": MEMORY}, **spec)


def slots(agent: Agent) -> set[str]:
    return {s["name"] for s in agent.state()["slots"]}


def ready(ws: E2E, name: str) -> bool:
    return is_true(ws.get("mdep", name), "Ready")


def remove(ws: E2E, agent: Agent, *names: str) -> None:
    """Delete the deployments and wait until the agent holds none of their slots."""
    for name in names:
        ws.kubectl("delete", "mdep", name, "-n", ws.namespace, "--wait=true", "--timeout=120s")
    gone = {naming.slot_name(ws.namespace, n) for n in names}
    until("slots gone", lambda: not (slots(agent) & gone))


def timed_apply(
    ws: E2E, agent: Agent, name: str, model: Path, victim: str | None
) -> dict[str, float]:
    """Apply `name` (priority 10); seconds to its Ready and, with a victim, to the victim's
    slot gone from the agent."""
    out: dict[str, float] = {}
    victim_slot = naming.slot_name(ws.namespace, victim) if victim else None
    t0 = time.monotonic()
    ws.apply(manifest(ws, name, model, priority=10))
    while not ready(ws, name):
        if victim_slot and "evicted_s" not in out and victim_slot not in slots(agent):
            out["evicted_s"] = time.monotonic() - t0
        if time.monotonic() - t0 > 300:
            raise SystemExit(f"{name} not Ready after 300 s: {ws.get('mdep', name).get('status')}")
        time.sleep(0.05)
    out["ready_s"] = time.monotonic() - t0
    return out


def run(rounds: int, base: Path) -> list[dict[str, Any]]:
    low_model = devmodels.generate_model(base / "low-model", seed=1)
    high_model = devmodels.generate_model(base / "high-model", seed=2)
    results: list[dict[str, Any]] = []
    with controlplane.running(base / "cp") as plane:
        pool = Agents(root=base / "agents", models_root=base)
        op = Operator(cluster=plane, root=base / "operator")
        try:
            mac = pool.start("mac", memory_budget=BUDGET)
            ws = E2E(cluster=plane, namespace="bench", label="bench")
            plane.kubectl("create", "namespace", "bench")
            ws.register(mac)
            op.start("--preemption-backoff", str(BACKOFF_S))
            warm = "warm-up"  # the first load pays for imports and page cache: not measured
            ws.apply(manifest(ws, warm, high_model))
            until("warm-up Ready", functools.partial(ready, ws, warm))
            remove(ws, mac, warm)
            for n in range(rounds):
                order = (False, True) if n % 2 == 0 else (True, False)
                for preempting in order:
                    high, low = f"high-{n}-{int(preempting)}", f"low-{n}"
                    if preempting:
                        ws.apply(manifest(ws, low, low_model, minReplicas=0, idleTimeout="1h"))
                        until(f"{low} Ready", functools.partial(ready, ws, low))
                    got = timed_apply(ws, mac, high, high_model, low if preempting else None)
                    got["preemption"] = preempting
                    results.append(got)
                    print(f"round {n + 1}: {got}", file=sys.stderr)
                    remove(ws, mac, high, *([low] if preempting else []))
        finally:
            op.stop()
            for agent in pool.started:
                agent.stop()
    return results


def render(results: list[dict[str, Any]], rounds: int, load: tuple[float, ...]) -> str:
    med = statistics.median
    base = [r["ready_s"] for r in results if not r["preemption"]]
    pre = [r["ready_s"] for r in results if r["preemption"]]
    evicted = [r["evicted_s"] for r in results if r["preemption"] and "evicted_s" in r]

    def cell(values: list[float]) -> str:
        return f"{med(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join([
        f"Higher-priority apply -> Ready on one Mac (budget {BUDGET // 2**20} MiB, replicas "
        f"{MEMORY} each), {rounds} round(s) each, alternating; operator --poll-seconds {POLL:g}; "
        f"{sys.platform}, {os.cpu_count()} CPUs",
        "",
        "| high-priority apply | apply -> Ready, s (median, min-max) | apply -> victim's slot "
        "gone, s |",
        "|---|---:|---:|",
        f"| on an empty Mac (baseline) | {cell(base)} | - |",
        f"| evicting a lower-priority replica | {cell(pre)} | "
        f"{cell(evicted) if evicted else '?'} |",
        "",
        f"preemption adds {med(pre) - med(base):.2f} s (median); load average (1, 5, 15 min) at "
        f"the start: {' '.join(f'{x:.2f}' for x in load)}; at the end: {end}",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="preemption_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="applies with and without (3 each)")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 20:
        parser.error("--rounds in 1..20")
    base = Path(tempfile.mkdtemp(prefix="preemption-bench-"))
    try:
        load = os.getloadavg()
        results = run(args.rounds, base)
        print(render(results, args.rounds, load))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
