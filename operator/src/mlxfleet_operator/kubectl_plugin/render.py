"""Pure text for `kubectl mlxfleet`: memory bars, the status screen, metrics arithmetic (drain
progress is `mlxfleet_agent.drainreport`, shared with `mlxfleet-agent leave`).

Works on plain dicts as the API server returns them (`kubectl get -o json` shapes), so a test can
feed it objects straight from a live cluster. No I/O.
May import: the standard library, `core.kit.naming`, `mlxfleet_agent.drainreport`.
Called by: kubectl_plugin.cli.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlxfleet_agent import drainreport
from mlxfleet_operator.core.kit import naming

Obj = Mapping[str, Any]
BAR = 20


def gib(value: int | float | None) -> str:
    return "?" if value is None else f"{value / 2**30:.1f}Gi"


def bar(used: int | None, total: int | None, width: int = BAR) -> str:
    """`[#####.........] 25%` of used/total (the node's memory budget)."""
    if not total:
        return "[" + "?" * width + "]   ?"
    share = min(max((used or 0) / total, 0.0), 1.0)
    filled = round(share * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {share * 100:3.0f}%"


def _field(obj: Obj, kind: str, name: str) -> str | None:
    """`name` (status, reason, message) of the condition of type `kind`; None: no such condition."""
    for c in obj.get("status", {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get(name) or "")
    return None


def condition(obj: Obj, kind: str) -> str:
    return _field(obj, kind, "status") or "?"


def reason(obj: Obj, kind: str) -> str:
    return _field(obj, kind, "reason") or ""


def message(obj: Obj, kind: str) -> str:
    return _field(obj, kind, "message") or ""


def node_lines(nodes: Sequence[Obj]) -> list[str]:
    lines = [f"NODES ({len(nodes)})"]
    for n in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        spec, status = n.get("spec", {}), n.get("status", {})
        memory = status.get("memory") or {}
        used, budget = memory.get("usedBytes"), memory.get("allocatableBytes")
        flags = [
            f
            for f, on in (
                ("cordoned", spec.get("unschedulable")),
                ("draining", spec.get("drain")),
                (
                    f"pressure:{reason(n, 'MemoryPressure')}",
                    condition(n, "MemoryPressure") == "True",
                ),
            )
            if on
        ]
        ready = condition(n, "Ready")
        state = "Ready" if ready == "True" else f"NotReady({reason(n, 'Ready') or ready})"
        lines.append(
            f"  {n['metadata']['name']:<24} {state:<22} {status.get('chip') or '':<16} "
            f"{bar(used, budget)} {gib(used)}/{gib(budget)} {' '.join(flags)}".rstrip()
        )
    return lines


def deployment_lines(deployments: Sequence[Obj]) -> list[str]:
    lines = [f"DEPLOYMENTS ({len(deployments)})"]
    for d in sorted(deployments, key=lambda d: (d["metadata"]["namespace"], d["metadata"]["name"])):
        spec, status = d.get("spec", {}), d.get("status", {})
        name = f"{d['metadata']['namespace']}/{d['metadata']['name']}"
        ready = f"{status.get('readyReplicas') or 0}/{spec.get('replicas', '?')}"
        state = condition(d, "Ready")
        why = reason(d, "Ready")
        lines.append(
            f"  {name:<32} ready {ready:<6} {state:<5} {why:<20} "
            f"{(spec.get('model') or {}).get('source', '')}"
        )
        if state != "True" and message(d, "Ready"):  # why it does not serve, in its own words
            stalled = " (Stalled)" if condition(d, "Stalled") == "True" else ""
            lines.append(f"      {message(d, 'Ready')}{stalled}")
        for p in status.get("placements") or []:
            mark = "ready" if p.get("ready") else p.get("phase", "?")
            why = f" ({p['message']})" if p.get("message") and not p.get("ready") else ""
            progress = f" {p['progress']}" if p.get("progress") else ""
            lines.append(f"      - {p.get('node', '?'):<24} {mark}{progress}{why}")
        lines += preemption_lines(status)
    return lines


def preemption_lines(status: Obj) -> list[str]:
    """Who this deployment evicts (or evicted, while it holds the node) and who evicted it."""
    lines = []
    for r in status.get("preempting") or []:
        lines.append(
            f"      preempting {r.get('deployment')} (priority {r.get('priority')}) "
            f"on {r.get('node')} since {r.get('at')}"
        )
    for r in status.get("preemptedBy") or []:
        until = f", back-off until {r['backoffUntil']}" if r.get("backoffUntil") else ""
        lines.append(
            f"      preempted by {r.get('deployment')} (priority {r.get('priority')}) "
            f"on {r.get('node')} at {r.get('at')}{until}"
        )
    return lines


def plan_lines(plans: Sequence[Obj]) -> list[str]:
    running = [
        p
        for p in plans
        if (p.get("status") or {}).get("phase") not in ("Completed", "RolledBack", "Failed")
    ]
    lines = [f"SWAP PLANS ({len(running)} running of {len(plans)})"]
    for p in sorted(running, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        status, spec = p.get("status") or {}, p.get("spec") or {}
        waiting = " awaiting approval (kubectl mlxfleet approve)" if spec.get("paused") else ""
        lines.append(
            f"  {p['metadata']['namespace']}/{p['metadata']['name']:<30} "
            f"{status.get('phase') or 'Pending':<12} {status.get('progress') or '':<8}{waiting}"
        )
    return lines


def status_screen(nodes: Sequence[Obj], deployments: Sequence[Obj], plans: Sequence[Obj]) -> str:
    return "\n".join(
        [*node_lines(nodes), "", *deployment_lines(deployments), "", *plan_lines(plans)]
    )


def placements_on(deployments: Iterable[Obj], node: str) -> list[str]:
    """`namespace/name` of every deployment with a replica (any phase) on `node`."""
    return [w.deployment for w in drainreport.waiting_on(deployments, node)]


# ------------------------------------------------------------------------------ top (metrics)

Samples = Mapping[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass(frozen=True)
class Top:
    deployment: str
    tokens_per_s: float
    ttft_s: float | None  # mean over the interval (lifetime mean when no request came meanwhile)
    requests: float
    unrouted: tuple[str, ...] = ()  # "<node>: why" for each replica out of routing (not ready)


def unrouted(deployment: Obj) -> tuple[str, ...]:
    """`<node>: <message>` for each placement that is not ready (out of the endpoints and the
    gateway's routing): busy, loading, failed ..., with the operator's reason."""
    out = []
    for p in (deployment.get("status") or {}).get("placements") or []:
        if not p.get("ready"):
            why = p.get("message") or p.get("phase") or "not ready"
            out.append(f"{p.get('node', '?')}: {why}")
    return tuple(out)


def _by_slot(samples: Samples, metric: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if name == metric:
            slot = dict(labels).get("slot", "")
            out[slot] = out.get(slot, 0.0) + value
    return out


def top(
    before: Sequence[Samples],
    after: Sequence[Samples],
    *,
    seconds: float,
    deployments: Iterable[Obj],
) -> list[Top]:
    """Per deployment: completion tokens/s and mean TTFT between two scrapes of every agent."""
    deployments = list(deployments)
    slots = {
        naming.slot_name(d["metadata"]["namespace"], d["metadata"]["name"]): (
            f"{d['metadata']['namespace']}/{d['metadata']['name']}"
        )
        for d in deployments
    }
    why = {
        f"{d['metadata']['namespace']}/{d['metadata']['name']}": unrouted(d) for d in deployments
    }

    def total(scrapes: Sequence[Samples], metric: str) -> dict[str, float]:
        acc: dict[str, float] = {}
        for s in scrapes:
            for slot, v in _by_slot(s, metric).items():
                acc[slot] = acc.get(slot, 0.0) + v
        return acc

    prefix = "mlxfleet_agent_"
    names = {
        k: prefix + k
        for k in (
            "completion_tokens_total",
            "time_to_first_token_seconds_sum",
            "time_to_first_token_seconds_count",
        )
    }
    b = {k: total(before, v) for k, v in names.items()}
    a = {k: total(after, v) for k, v in names.items()}
    rows = []
    for slot, deployment in sorted(slots.items(), key=lambda kv: kv[1]):
        tokens = a["completion_tokens_total"].get(slot, 0.0) - b["completion_tokens_total"].get(
            slot, 0.0
        )
        count_a = a["time_to_first_token_seconds_count"].get(slot, 0.0)
        sum_a = a["time_to_first_token_seconds_sum"].get(slot, 0.0)
        count = count_a - b["time_to_first_token_seconds_count"].get(slot, 0.0)
        total_s = sum_a - b["time_to_first_token_seconds_sum"].get(slot, 0.0)
        if count > 0:
            ttft: float | None = total_s / count
        else:
            ttft = sum_a / count_a if count_a > 0 else None
        rows.append(
            Top(
                deployment,
                max(tokens, 0.0) / seconds if seconds > 0 else 0.0,
                ttft,
                max(count, 0.0),
                why.get(deployment, ()),
            )
        )
    return rows


def top_lines(rows: Sequence[Top], *, seconds: float) -> str:
    lines = [
        f"{'DEPLOYMENT':<40} {'TOKENS/S':>9} {'TTFT':>9} {'REQUESTS':>9}   (over {seconds:.0f}s)"
    ]
    for r in rows:
        ttft = f"{r.ttft_s * 1000:.0f}ms" if r.ttft_s is not None else "-"
        lines.append(f"{r.deployment:<40} {r.tokens_per_s:>9.1f} {ttft:>9} {r.requests:>9.0f}")
        lines.extend(f"  not routed {u}" for u in r.unrouted)
    return "\n".join(lines)
