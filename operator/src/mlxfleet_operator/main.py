"""`mlxfleet-operator`: run the kopf operator with mlxfleet's settings (the composition root).

Parses flags into `settings.OperatorSettings`, builds the runtime from them (Kubernetes facade,
fleet view, metrics server) and the kopf registry (`handlers.registry(config)`: timer intervals
from the settings), then runs kopf with both. One replica with `--standalone`; two with kopf
peering and distinct `--priority` values (docs/operator.md).
May import: kopf, settings, handlers and adapters.runtime (lazily, so `--help` stays fast).
Called by: the console script.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

import pydantic

from mlxfleet_operator import settings as opsettings


def parse(argv: list[str]) -> opsettings.OperatorSettings:
    defaults = opsettings.OperatorSettings()
    p = argparse.ArgumentParser(
        prog="mlxfleet-operator",
        description="Kubernetes operator for mlxfleet: InferenceNode heartbeats, ModelDeployment "
        "placement and endpoints, SwapPlan execution, failover.",
    )
    p.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster ServiceAccount, or $KUBECONFIG)"
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="watch every namespace (default)"
    )
    p.add_argument(
        "--standalone", action="store_true", help="no kopf peering (single replica, tests)"
    )
    p.add_argument("--priority", type=int, default=defaults.priority, help="kopf peering priority")
    p.add_argument("--peering-name", default=defaults.peering_name, help="kopf peering object name")
    p.add_argument(
        "--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    p.add_argument(
        "--poll-seconds",
        type=float,
        default=defaults.poll_seconds,
        help="agent poll interval (default 5)",
    )
    p.add_argument(
        "--misses",
        type=int,
        default=defaults.misses,
        help="missed polls before Ready=False (default 3)",
    )
    p.add_argument(
        "--failover-delay",
        type=float,
        default=defaults.failover_delay,
        help="seconds a node may be NotReady before its replicas move (default 15)",
    )
    p.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port"
    )
    p.add_argument(
        "--metrics-host", default=defaults.metrics_host, help="address of the metrics server"
    )
    p.add_argument("--log-level", default=defaults.log_level, help="DEBUG, INFO, WARNING")
    ns = p.parse_args(argv)
    kubeconfig = ns.kubeconfig or os.environ.get("KUBECONFIG") or None
    if kubeconfig and not os.access(kubeconfig, os.R_OK):
        p.error(f"--kubeconfig {kubeconfig}: no such readable file")
    try:
        return _settings(ns, kubeconfig)
    except pydantic.ValidationError as exc:
        p.error(
            "; ".join(
                f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: {e['msg']}"
                for e in exc.errors()
            )
        )


def _settings(ns: argparse.Namespace, kubeconfig: str | None) -> opsettings.OperatorSettings:
    return opsettings.OperatorSettings(
        kubeconfig=kubeconfig,
        namespaces=tuple(ns.namespace),
        standalone=ns.standalone,
        priority=ns.priority,
        peering_name=ns.peering_name,
        liveness=ns.liveness,
        poll_seconds=ns.poll_seconds,
        misses=ns.misses,
        failover_delay=ns.failover_delay,
        metrics_host=ns.metrics_host,
        metrics_port=ns.metrics_port,
        log_level=ns.log_level.upper(),
    )


def main(argv: list[str] | None = None) -> None:
    config = parse(list(sys.argv[1:] if argv is None else argv))
    if config.kubeconfig:
        os.environ["KUBECONFIG"] = config.kubeconfig  # kopf's own login reads it
    logging.basicConfig(
        level=getattr(logging, config.log_level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per agent call is noise
    import kopf

    from mlxfleet_operator import handlers
    from mlxfleet_operator.adapters import runtime

    try:
        memo = kopf.Memo({runtime.KEY: runtime.start(config)})
    except runtime.StartError as exc:  # exit 2 naming the flag, as for a bad flag value
        print(f"mlxfleet-operator: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    asyncio.run(
        kopf.operator(
            registry=handlers.registry(config),
            memo=memo,
            standalone=config.standalone,
            priority=config.priority,
            # a peering name makes peering mandatory in kopf: only when not standalone
            peering_name=None if config.standalone else config.peering_name,
            namespaces=list(config.namespaces),
            clusterwide=not config.namespaces,
            liveness_endpoint=config.liveness,
        )
    )


if __name__ == "__main__":
    main()
