"""`python -m tests.support.hollow`: run a hollow fleet until SIGINT/SIGTERM.

    python -m tests.support.hollow --nodes 500 [--seed 1] [--load-s 2 --warm-s 0.5 ...]
        [--allowed-root DIR] [--admin-port P] [--out fleet.json]
    python -m tests.support.hollow --config fleet.yaml [--out fleet.json]

When every node listens it writes `{"admin": URL, "pid": PID, "nodes": [{name, url, token,
memoryBytes, budgetBytes}, ...]}` to `--out` (atomically) and prints one JSON line
`{"event": "ready", ...}`. Faults: `POST <admin>/faults` (see hollow.server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import yaml

from tests.support.hollow import config, server


def parse(argv: list[str]) -> tuple[config.FleetConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m tests.support.hollow", description=__doc__)
    p.add_argument("--nodes", type=int, default=10, help="generated fleet size (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix", default="mac", help="node names: <prefix>-0001 ...")
    p.add_argument("--config", type=Path, help="a FleetConfig as YAML or JSON (replaces --nodes)")
    defaults = config.Timing()
    for name in ("download_s", "load_s", "warm_s", "stop_s", "jitter"):
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(defaults, name))
    p.add_argument("--allowed-root", action="append", default=[], help="for file:// sources")
    p.add_argument("--memory-budget", type=int, help="every node's slot budget in bytes")
    p.add_argument(
        "--fail-source",
        action="append",
        default=[],
        help="loads of sources containing this fail on every node (repeatable)",
    )
    p.add_argument("--admin-port", type=int, default=0)
    p.add_argument("--out", type=Path, help="write the fleet's nodes and admin URL here")
    ns = p.parse_args(argv)
    timing = config.Timing(
        download_s=ns.download_s,
        load_s=ns.load_s,
        warm_s=ns.warm_s,
        stop_s=ns.stop_s,
        jitter=ns.jitter,
    )
    if ns.config is not None:
        cfg = config.FleetConfig.model_validate(yaml.safe_load(ns.config.read_text()))
    else:
        cfg = config.FleetConfig.generate(ns.nodes, seed=ns.seed, prefix=ns.prefix, timing=timing)
    if ns.allowed_root:
        cfg = cfg.model_copy(update={"allowed_roots": [*cfg.allowed_roots, *ns.allowed_root]})
    for nc in cfg.nodes:
        if ns.memory_budget is not None:
            nc.memory_budget_bytes = ns.memory_budget
        nc.faults.fail_sources += ns.fail_source
    return cfg, ns


async def serve(cfg: config.FleetConfig, *, admin_port: int, out: Path | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server.running(cfg, admin_port=admin_port) as fleet:
        ready = {
            "admin": f"http://{cfg.host}:{fleet.admin_port}",
            "pid": os.getpid(),
            "nodes": fleet.nodes(),
        }
        if out is not None:
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(ready))
            tmp.replace(out)
        print(json.dumps({"event": "ready", "admin": ready["admin"], "nodes": len(cfg.nodes)}))
        sys.stdout.flush()
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    cfg, ns = parse(list(sys.argv[1:] if argv is None else argv))
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(serve(cfg, admin_port=ns.admin_port, out=ns.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
