"""`python -m benchmarks.scale` (`make bench-scale NODES=500 DEPLOYMENTS=1000`).

Runs the scale benchmark (benchmarks.scale.run) once, or once per size of `--growth 50,200,500`
(deployments: twice the nodes), then the monthly-report benchmark (benchmarks.report_bench) for
the largest fleet, prints a Markdown summary and, last, ONE JSON line with at least converge_s,
operator_rss_mb, steady_writes_per_s, failover_s, report_month_s and report_gets.
`--json-out FILE` also keeps every figure of every run.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import report_bench
from benchmarks.scale import run

KEYS = (
    "converge_s",
    "operator_rss_mb",
    "steady_writes_per_s",
    "failover_s",
    "report_month_s",
    "report_gets",
)


def parse(argv: list[str]) -> tuple[run.Settings, argparse.Namespace]:
    d = run.Settings()
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    p.add_argument("--nodes", type=int, default=d.nodes)
    p.add_argument("--deployments", type=int, default=d.deployments)
    p.add_argument("--lost", type=int, help="nodes lost at once (default: a tenth)")
    p.add_argument("--changes", type=int, help="deployments changing model (default: a fifth)")
    p.add_argument("--poll-seconds", type=float, default=d.poll_seconds)
    p.add_argument("--misses", type=int, default=d.misses)
    p.add_argument("--failover-delay", type=float, default=d.failover_delay)
    p.add_argument("--load-s", type=float, default=d.load_s, help="simulated model load")
    p.add_argument("--download-s", type=float, default=d.download_s)
    p.add_argument("--warm-s", type=float, default=d.warm_s)
    p.add_argument("--steady-s", type=float, default=d.steady_s)
    p.add_argument("--converge-timeout", type=float, default=d.converge_timeout_s)
    p.add_argument("--phase-timeout", type=float, default=d.phase_timeout_s)
    p.add_argument("--profile-s", type=float, default=0.0, help="py-spy the operator (seconds)")
    p.add_argument(
        "--apiserver-profile-s",
        type=float,
        default=0.0,
        help="the API server's CPU profile while converging (seconds; `go` reads it)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--growth", help="comma-separated node counts, e.g. 50,200,500")
    p.add_argument("--no-report", action="store_true", help="skip the monthly report benchmark")
    p.add_argument("--report-raw-nodes", type=int, default=20, help="nodes of the raw sample day")
    p.add_argument("--json-out", type=Path)
    ns = p.parse_args(argv)
    s = run.Settings(
        nodes=ns.nodes,
        deployments=ns.deployments,
        lost=ns.lost,
        changes=ns.changes,
        poll_seconds=ns.poll_seconds,
        misses=ns.misses,
        failover_delay=ns.failover_delay,
        download_s=ns.download_s,
        load_s=ns.load_s,
        warm_s=ns.warm_s,
        steady_s=ns.steady_s,
        converge_timeout_s=ns.converge_timeout,
        phase_timeout_s=ns.phase_timeout,
        profile_s=ns.profile_s,
        apiserver_profile_s=ns.apiserver_profile_s,
        seed=ns.seed,
    )
    return s, ns


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("nodes", "nodes"),
        ("deployments", "deployments"),
        ("converge_total_s", "apply -> all Ready (s)"),
        ("converge_s", "beyond load time (s)"),
        ("ready_at_end", "Ready at end"),
        ("operator_rss_mb", "operator RSS max (MB)"),
        ("converge_cpu_s", "operator CPU converging (s)"),
        ("converge_cpu_pct", "(% of a core)"),
        ("converge_requests_min", "API requests/min converging"),
        ("converge_writes_min", "API writes/min converging"),
        ("md_p50_ms", "MD reconcile p50 (ms)"),
        ("md_p99_ms", "MD reconcile p99 (ms)"),
        ("steady_writes_min", "steady writes/min"),
        ("steady_cpu_pct", "operator CPU steady (%)"),
        ("failover_s", "failover (s)"),
        ("swap_drain_s", "swap queue drained (s)"),
    ]
    lines = [
        "| " + " | ".join(title for _, title in cols) + " |",
        "|" + " --- |" * len(cols),
    ]
    for r in rows:
        lines.append("| " + " | ".join(_cell(flat(r).get(k)) for k, _ in cols) + " |")
    return "\n".join(lines)


def flat(r: dict[str, Any]) -> dict[str, Any]:
    """One run's figures for the table: the phase windows' numbers lifted to the top."""
    converge, steady = r.get("converge", {}), r.get("steady", {})
    md = converge.get("operator", {}).get("ModelDeployment", {})
    per_min = converge.get("requests_per_s")
    return {
        **r,
        "converge_cpu_s": converge.get("operator_cpu_s"),
        "converge_cpu_pct": converge.get("operator_cpu_pct"),
        "converge_requests_min": round(60 * per_min) if per_min is not None else None,
        "converge_writes_min": converge.get("writes_per_min"),
        "md_p50_ms": md.get("p50_ms"),
        "md_p99_ms": md.get("p99_ms"),
        "steady_writes_min": steady.get("writes_per_min"),
        "steady_cpu_pct": steady.get("operator_cpu_pct"),
    }


def _cell(v: Any) -> str:
    return "n/a" if v is None else str(v)


def _keep(path: Path | None, rows: list[dict[str, Any]]) -> None:
    """Every figure so far (after each size, so a later failure keeps the earlier runs)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=2, default=str))


def main(argv: list[str] | None = None) -> int:
    s, ns = parse(list(sys.argv[1:] if argv is None else argv))
    sizes = [int(x) for x in ns.growth.split(",")] if ns.growth else [s.nodes]
    rows = []
    for n in sizes:
        size = s if not ns.growth else run.Settings(**{**vars(s), "nodes": n, "deployments": 2 * n})
        started = time.monotonic()
        row = run.run(size)
        row["wall_s"] = round(time.monotonic() - started, 1)
        rows.append(row)
        print(f"[{n} nodes] {json.dumps({k: row.get(k) for k in KEYS[:4]})}", file=sys.stderr)
        _keep(ns.json_out, rows)
    last = rows[-1]
    if not ns.no_report:
        report = report_bench.run(
            nodes=last["nodes"], raw_nodes=ns.report_raw_nodes, root=s.root / "report"
        )
        last["report"] = report
        last["report_month_s"] = report["month_s"]
        last["report_gets"] = report["gets"]
    print(
        f"\nMachine: {platform.machine()}, {platform.system()}; python {platform.python_version()}"
    )
    print(table(rows))
    _keep(ns.json_out, rows)
    line = {k: last.get(k) for k in KEYS}
    line |= {
        "nodes": last["nodes"],
        "deployments": last["deployments"],
        "converge_total_s": last.get("converge_total_s"),
        "ready_at_end": last.get("ready_at_end"),
        "swap_drain_s": last.get("swap_drain_s"),
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
