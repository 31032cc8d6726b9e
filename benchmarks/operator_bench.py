"""Operator benchmark: control-plane latencies on a real API server with real agents.

    python -m benchmarks.operator_bench [--rounds N] [--out docs/benchmarks.md]

Starts the local control plane (etcd + kube-apiserver), three `mlxfleet-agent serve` processes
with generated tiny models, and `mlxfleet-operator` with its ServiceAccount kubeconfig, then
measures, each figure next to its baseline from the same run:
- apply-to-Ready of a 2-replica ModelDeployment with the weights cached, vs the agents' own
  slot start (PUT /v1/slots straight to an agent, until the slot is ready);
- node loss (SIGKILL of an agent and its backends) to the EndpointSlice endpoint not ready, and
  to the replica Ready on another node, vs the configured detection floor (misses x poll) and
  failover delay;
- SwapPlan creation to Completed vs the agents' own swap time (sum of the swap records).
Prints a Markdown section and replaces the "Operator" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from tests.e2e.conftest import E2E, Agent, Agents, Operator, is_true

from mlxfleet_agent.dev import devmodels
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.dev import controlplane

SECTION = "## Operator"
POLL, MISSES, FAILOVER = 1.0, 3, 5.0


def until(
    what: str, check: Callable[[], Any], *, timeout: float = 300, interval: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def iso(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def ready(ws: E2E, name: str) -> bool:
    return is_true(ws.get("mdep", name), "Ready")


def baseline_slot_start(agent: Agent, model: Path) -> float:
    """The agent alone: PUT a slot with cached weights, until it reports ready; then delete it."""
    headers = {"Authorization": f"Bearer {agent.token}"}
    body = {"source": f"file://{model}", "servedName": "baseline", "contextLength": 1024}
    started = time.monotonic()
    httpx.put(
        f"{agent.url}/v1/slots/baseline", json=body, headers=headers, timeout=30
    ).raise_for_status()

    def slot_ready() -> bool:
        return any(s["name"] == "baseline" and s["ready"] for s in agent.state()["slots"])

    until("baseline slot ready", slot_ready)
    took = time.monotonic() - started
    httpx.delete(f"{agent.url}/v1/slots/baseline", headers=headers, timeout=30)
    until(
        "baseline slot gone", lambda: all(s["name"] != "baseline" for s in agent.state()["slots"])
    )
    return took


def no_slot(agents: list[Agent]) -> bool:
    slot = naming.slot_name("bench", "bench")
    return all(all(s["name"] != slot for s in x.state()["slots"]) for x in agents)


def endpoint_ready(ws: E2E, port: int) -> bool | None:
    for s in ws.list("endpointslices"):
        if (
            s["metadata"]["labels"].get("kubernetes.io/service-name") == "bench"
            and s["ports"][0]["port"] == port
        ):
            return all(ep["conditions"]["ready"] for ep in s["endpoints"])
    return None


def run(rounds: int) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="operator-bench-"))
    models = base / "models"
    a = devmodels.generate_model(models / "a", seed=1)
    b = devmodels.generate_model(models / "b", seed=2)
    results: dict[str, Any] = {"rounds": rounds}
    with controlplane.running(base / "cp") as plane:
        pool = Agents(root=base / "agents", models_root=models)
        op = Operator(cluster=plane, root=base / "operator", metrics_port=0, liveness_port=0)
        try:
            agents = [pool.start(n) for n in ("n1", "n2", "n3")]
            ws = E2E(cluster=plane, namespace="bench", label="bench")
            plane.kubectl("create", "namespace", "bench")
            nodes = {ws.register(x): x for x in agents}
            op.start("--misses", str(MISSES), "--failover-delay", str(FAILOVER))
            until(
                "nodes Ready",
                lambda: all(is_true(ws.get("inode", n, namespaced=False), "Ready") for n in nodes),
            )
            # warm the weights into every agent's cache, and measure the agents' own start
            results["baseline_start_s"] = [
                baseline_slot_start(x, a) for x in agents[:2] for _ in range(rounds)
            ]
            apply_s = []
            for i in range(rounds):
                manifest = ws.deployment("bench", a, replicas=2)
                t0 = time.monotonic()
                ws.apply(manifest)
                until("Ready", lambda: ready(ws, "bench"))
                apply_s.append(time.monotonic() - t0)
                if i < rounds - 1:
                    plane.kubectl("-n", "bench", "delete", "mdep", "bench", "--timeout=120s")
                    until("slots gone", lambda: no_slot(agents))
            results["apply_to_ready_s"] = apply_s

            # node loss
            md = ws.get("mdep", "bench")
            placed = [p["node"] for p in md["status"]["placements"]]
            victim = nodes[placed[0]]
            t0 = time.monotonic()
            victim.kill()
            until("endpoint not ready", lambda: endpoint_ready(ws, victim.data_port) is False)
            results["loss_to_endpoint_not_ready_s"] = time.monotonic() - t0

            def moved() -> bool:
                d = ws.get("mdep", "bench")
                return placed[0] not in [p["node"] for p in d["status"]["placements"]] and ready(
                    ws, "bench"
                )

            until("replica Ready elsewhere", moved)
            results["loss_to_replica_ready_s"] = time.monotonic() - t0
            victim.start()
            until(
                "node back", lambda: is_true(ws.get("inode", placed[0], namespaced=False), "Ready")
            )

            # SwapPlan creation -> Completed vs the agents' own swap time
            t0 = time.monotonic()
            ws.apply(ws.deployment("bench", b, replicas=2))
            plan = until(
                "plan named", lambda: ws.get("mdep", "bench").get("status", {}).get("swapPlan")
            )
            until(
                "plan Completed",
                lambda: ws.get("swp", plan).get("status", {}).get("phase") == "Completed",
                timeout=600,
            )
            spec_to_completed = time.monotonic() - t0
            swp = ws.get("swp", plan)
            created = iso(swp["metadata"]["creationTimestamp"])
            completed = iso(swp["status"]["completedAt"])
            slot = naming.slot_name("bench", "bench")
            agent_swap = 0.0
            for step in swp["status"]["steps"]:
                for rec in nodes[step["node"]].swaps(slot):
                    if rec["toSource"] == f"file://{b}" and rec.get("finishedAt"):
                        agent_swap += (
                            iso(rec["finishedAt"]) - iso(rec["startedAt"])
                        ).total_seconds()
            results["plan"] = {
                "spec_change_to_completed_s": spec_to_completed,
                "created_to_completed_s": (completed - created).total_seconds(),
                "agent_swaps_s": agent_swap,
                "steps": len(swp["status"]["steps"]),
                "requests_failed": sum(s.get("requestsFailed", 0) for s in swp["status"]["steps"]),
            }
        finally:
            op.stop()
            for agent in pool.started:
                agent.stop()
    shutil.rmtree(base, ignore_errors=True)  # kept after a failure: its logs explain it
    return results


def render(r: dict[str, Any]) -> str:
    med = statistics.median
    p = r["plan"]
    apply_s, base_s = r["apply_to_ready_s"], r["baseline_start_s"]
    floor = MISSES * POLL
    overhead = p["spec_change_to_completed_s"] - p["agent_swaps_s"]
    rows = [
        (
            f"apply 2-replica ModelDeployment -> `Ready` (weights cached, n={len(apply_s)})",
            f"{med(apply_s):.2f} s (min {min(apply_s):.2f})",
            f"agent alone, PUT slot -> ready: {med(base_s):.2f} s (median of {len(base_s)})",
        ),
        (
            "agent SIGKILL -> its EndpointSlice endpoint not ready",
            f"{r['loss_to_endpoint_not_ready_s']:.2f} s",
            f"expected {floor - POLL:.1f}-{floor:.1f} s: {MISSES} missed polls {POLL:g} s apart",
        ),
        (
            "agent SIGKILL -> replica `Ready` on another node",
            f"{r['loss_to_replica_ready_s']:.2f} s",
            f"detection ({floor:.1f} s) + failover delay ({FAILOVER:.1f} s) + agent slot start "
            f"({med(base_s):.2f} s) = {floor + FAILOVER + med(base_s):.2f} s",
        ),
        (
            f"SwapPlan created -> `Completed` ({p['steps']} nodes, one at a time)",
            f"{p['created_to_completed_s']:.2f} s "
            f"(spec change -> Completed {p['spec_change_to_completed_s']:.2f} s)",
            f"agents' own swaps, summed: {p['agent_swaps_s']:.2f} s",
        ),
    ]
    lines = [
        SECTION,
        "",
        f"`python -m benchmarks.operator_bench --rounds {r['rounds']}` on {platform.machine()} "
        f"({os.cpu_count()} cores), {datetime.now().date()}: real kube-apiserver, three agents "
        "serving a generated tiny llama with mlx-lm on CPU, the operator (ServiceAccount "
        f"identity) with `--poll-seconds {POLL:g} --misses {MISSES} "
        f"--failover-delay {FAILOVER:g}`.",
        "",
        "| measurement | operator | baseline (same run) |",
        "| --- | --- | --- |",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        "",
        f"Operator overhead of the model change: {overhead:.2f} s over {p['steps']} steps (spec "
        "change -> Completed, measured by the client's clock, minus the agents' swap time; "
        "creation/completion timestamps in the API have 1 s resolution; hand-over between steps "
        f"follows a {max(0.5, POLL / 2):g} s timer and the agents' swap records). "
        f"Requests failed during the plan: {p['requests_failed']}. Apply-to-Ready includes "
        "sizing, placement, the slot PUTs, the backends' warm-up and the status round trip "
        "through the API server.",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    old = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if SECTION + "\n" in old:
        head, rest = old.split(SECTION + "\n", 1)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1 :] if nxt >= 0 else ""
        new = head + text + ("\n" + tail if tail else "")
    else:
        new = old.rstrip() + "\n\n" + text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="operator_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--from-json", type=Path, help="re-render saved results, run nothing")
    args = parser.parse_args(argv)
    results = json.loads(args.from_json.read_text()) if args.from_json else run(args.rounds)
    print(json.dumps(results, indent=2), file=sys.stderr)
    text = render(results)
    print(text)
    write_section(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
