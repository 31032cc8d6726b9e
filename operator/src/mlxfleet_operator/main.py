"""`mlxfleet-operator`: run the kopf operator with mlxfleet's settings, as an elected leader
(the composition root).

Parses flags into `settings.OperatorSettings` (and `leader.ElectionSettings`), builds the runtime
from them (Kubernetes facade, fleet view, metrics server) and the kopf registry
(`handlers.registry(config)`: timer intervals from the settings), then runs kopf with both.
By default every replica campaigns for the Lease `--lease-name` in the operator's namespace: the
leader runs kopf (handlers, agents); a standby only waits, its runtime and registry already built
(docs/operator.md, "High availability"). A leader that cannot renew before its renew deadline
exits at once (fencing); on SIGTERM it stops kopf, lets in-flight Kubernetes calls finish, then
releases the Lease so a standby takes over. `--standalone` is one operator with no election
(tests, local demo); it refuses to start while an elected leader renews the Lease.
May import: kopf, settings, adapters.leader / adapters.election, handlers and adapters.runtime
(lazily, so `--help` stays fast).
Called by: the console script.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pydantic

from mlxfleet_agent import contract
from mlxfleet_operator import __version__
from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import election, leader

if TYPE_CHECKING:
    import kopf

DEPRECATED_PEERING = (
    "--priority and --peering-name are deprecated and ignored: replicas elect a leader on a "
    "Lease (--lease-name); kopf peering is not used"
)


def _parser() -> argparse.ArgumentParser:
    defaults = opsettings.OperatorSettings()
    p = argparse.ArgumentParser(
        prog="mlxfleet-operator",
        description="Kubernetes operator for mlxfleet: InferenceNode heartbeats, ModelDeployment "
        "placement and endpoints, SwapPlan execution, failover. Replicas elect a leader on a "
        "Lease; only the leader acts.",
    )
    p.add_argument("--version", action="version", version=__version__)
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
        "--standalone",
        action="store_true",
        help="one operator, no leader election (tests, local demo); never run two",
    )
    election = p.add_argument_group("leader election (ignored with --standalone)")
    election.add_argument(
        "--leader-election-namespace",
        default=None,
        help="namespace of the Lease (default: $POD_NAMESPACE, the ServiceAccount's namespace "
        "in a pod, else mlxfleet-system)",
    )
    election.add_argument(
        "--lease-name", default=leader.DEFAULT_LEASE_NAME, help="name of the Lease"
    )
    election.add_argument(
        "--identity",
        default=None,
        help="this replica's name in the Lease (default: $POD_NAME or the host name, plus a "
        "random suffix)",
    )
    election.add_argument(
        "--lease-duration",
        type=int,
        default=leader.ElectionSettings.model_fields["lease_duration"].default,
        help="seconds a standby waits for an unrenewed lease before taking over (default 3)",
    )
    election.add_argument(
        "--renew-deadline",
        type=float,
        default=leader.ElectionSettings.model_fields["renew_deadline"].default,
        help="seconds a leader may go without renewing before it stops (default 2; less than "
        "--lease-duration)",
    )
    election.add_argument(
        "--retry-period",
        type=float,
        default=leader.ElectionSettings.model_fields["retry_period"].default,
        help="seconds between renews and between a standby's tries (default 0.5)",
    )
    p.add_argument(
        "--provider-keys-namespace",
        default=None,
        help="namespace of the provider-key Secrets ModelRoute external backends name (the "
        "gateway's; default: $POD_NAMESPACE, the ServiceAccount's namespace in a pod, else "
        "mlxfleet-system)",
    )
    # Deprecated: kopf peering (replaced by the Lease). Accepted so old manifests still start.
    p.add_argument("--priority", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--peering-name", default=None, help=argparse.SUPPRESS)
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
        "--preemption-backoff",
        type=float,
        default=defaults.preemption_backoff,
        help="seconds a replica evicted for a higher-priority deployment stays off that node "
        "(doubled for each further eviction within a while, up to 16x; default 30)",
    )
    p.add_argument(
        "--capacity-stall-seconds",
        type=float,
        default=defaults.capacity_stall_seconds,
        help="seconds replicas may wait for a node that can take them before the deployment is "
        "Stalled, still WaitingForCapacity (default 120)",
    )
    p.add_argument(
        "--heartbeat-write-seconds",
        type=float,
        default=defaults.heartbeat_write_seconds,
        help="write an unchanged node's lastHeartbeatTime at most this often (default 60; "
        "longer above 120 nodes: heartbeats alone write at most twice a second)",
    )
    p.add_argument(
        "--swap-prefetch",
        action=argparse.BooleanOptionalAction,
        default=defaults.swap_prefetch,
        help="copy a SwapPlan's new weights to all its nodes as soon as the plan exists (default "
        "on; --no-swap-prefetch: each node fetches them when its step starts, e.g. on a metered "
        "link)",
    )
    scaling = p.add_argument_group("autoscaler (ModelDeployments with minReplicas/maxReplicas)")
    scaling.add_argument(
        "--scale-up-window",
        type=float,
        default=defaults.scale_up_window,
        help="seconds the load must ask for more replicas before they are placed (default 5)",
    )
    scaling.add_argument(
        "--scale-down-window",
        type=float,
        default=defaults.scale_down_window,
        help="seconds the load must ask for fewer replicas before they go (default 120)",
    )
    scaling.add_argument(
        "--demand-namespace",
        default=None,
        help="namespace where gateways write their ModelDemands (requests held for sleeping "
        "deployments; the gateway's; default: $POD_NAMESPACE, the ServiceAccount's namespace in "
        "a pod, else mlxfleet-system)",
    )
    p.add_argument(
        "--fleet-key-file",
        default=None,
        help="the fleet key (the gateway's --fleet-key-file; one key a line, the current first): "
        "each approved node is sent its own data-plane and peer keys derived from it, and peers "
        "get fetch tokens (default: none sent; docs/install.md)",
    )
    p.add_argument(
        "--fleet-key-optional",
        action="store_true",
        help="a --fleet-key-file that does not exist is not an error: no node gets keys of its "
        "own (the chart mounts the fleet-key Secret as optional)",
    )
    p.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port"
    )
    p.add_argument(
        "--metrics-host", default=defaults.metrics_host, help="address of the metrics server"
    )
    p.add_argument(
        "--agent-metrics-namespace",
        default=None,
        help="publish every InferenceNode's agent /metrics as a scrape target (a headless Service "
        "and EndpointSlice per node, selected by the chart's ServiceMonitor) in this namespace, "
        "usually the operator's own (default: not published)",
    )
    p.add_argument("--log-level", default=defaults.log_level, help="DEBUG, INFO, WARNING")
    return p


def _flag_errors(exc: pydantic.ValidationError) -> str:
    return "; ".join(
        f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: {e['msg']}"
        for e in exc.errors()
    )


def parse_all(argv: list[str]) -> tuple[opsettings.OperatorSettings, leader.ElectionSettings]:
    """Operator settings, and the election's (with --standalone: only to check that no elected
    leader runs)."""
    p = _parser()
    ns = p.parse_args(argv)
    kubeconfig = ns.kubeconfig or os.environ.get("KUBECONFIG") or None
    if kubeconfig and not os.access(kubeconfig, os.R_OK):
        p.error(f"--kubeconfig {kubeconfig}: no such readable file")
    if ns.priority is not None or ns.peering_name is not None:
        print(f"mlxfleet-operator: warning: {DEPRECATED_PEERING}", file=sys.stderr)
    try:
        keys = _fleet_keys(ns.fleet_key_file, optional=ns.fleet_key_optional)
    except ValueError as exc:
        p.error(str(exc))
    try:
        config = _settings(ns, kubeconfig, keys)
    except pydantic.ValidationError as exc:
        p.error(_flag_errors(exc))
    try:
        elected = leader.ElectionSettings(
            namespace=(
                leader.default_namespace()
                if ns.leader_election_namespace is None
                else ns.leader_election_namespace
            ),
            lease_name=ns.lease_name,
            identity=leader.default_identity() if ns.identity is None else ns.identity,
            lease_duration=ns.lease_duration,
            renew_deadline=ns.renew_deadline,
            retry_period=ns.retry_period,
        )
    except pydantic.ValidationError as exc:
        p.error(
            "; ".join(f"--{_election_flag(e['loc'], e['msg'])}: {e['msg']}" for e in exc.errors())
        )
    return config, elected


def _election_flag(loc: tuple[int | str, ...], msg: str) -> str:
    """The flag an election error is about (a cross-field check names it first in its message)."""
    name = str(loc[0]) if loc else msg.removeprefix("Value error, ").split(":")[0]
    return "leader-election-namespace" if name == "namespace" else name.replace("_", "-")


def parse(argv: list[str]) -> opsettings.OperatorSettings:
    return parse_all(argv)[0]


def _fleet_keys(path: str | None, *, optional: bool = False) -> tuple[str, ...]:
    """The keys of --fleet-key-file (none without it, nor without its file when `optional`);
    ValueError naming the flag."""
    if path is None:
        return ()
    if optional and not Path(path).exists():
        print(
            f"mlxfleet-operator: warning: --fleet-key-file {path} does not exist: nodes get no "
            "keys of their own (create the fleet-key Secret, then restart the operator)",
            file=sys.stderr,
        )
        return ()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ValueError(f"--fleet-key-file {path}: cannot read it ({why})") from None
    return contract.credentials.parse_fleet_keys(text, flag=f"--fleet-key-file {path}")


def _settings(
    ns: argparse.Namespace, kubeconfig: str | None, fleet_keys: tuple[str, ...] = ()
) -> opsettings.OperatorSettings:
    return opsettings.OperatorSettings(
        kubeconfig=kubeconfig,
        fleet_keys=fleet_keys,
        namespaces=tuple(ns.namespace),
        standalone=ns.standalone,
        liveness=ns.liveness,
        poll_seconds=ns.poll_seconds,
        misses=ns.misses,
        failover_delay=ns.failover_delay,
        preemption_backoff=ns.preemption_backoff,
        capacity_stall_seconds=ns.capacity_stall_seconds,
        heartbeat_write_seconds=ns.heartbeat_write_seconds,
        swap_prefetch=ns.swap_prefetch,
        provider_keys_namespace=ns.provider_keys_namespace or leader.default_namespace(),
        scale_up_window=ns.scale_up_window,
        scale_down_window=ns.scale_down_window,
        demand_namespace=ns.demand_namespace or leader.default_namespace(),
        metrics_host=ns.metrics_host,
        metrics_port=ns.metrics_port,
        agent_metrics_namespace=ns.agent_metrics_namespace,
        log_level=ns.log_level.upper(),
    )


async def _operate(
    config: opsettings.OperatorSettings,
    registry: kopf.OperatorRegistry,
    memo: kopf.Memo,
    stop: asyncio.Event | None = None,
) -> None:
    """kopf with our handlers; returns when it stopped. Never kopf peering: one replica acts at a
    time, by the Lease or by `--standalone`. With `stop` (elected), SIGTERM/SIGINT set it instead
    of kopf's own handlers, so the caller sees the signal and bounds kopf's shutdown."""
    import kopf

    namespaces, clusterwide = list(config.namespaces), not config.namespaces
    if stop is None:
        await kopf.operator(
            registry=registry,
            memo=memo,
            standalone=True,
            namespaces=namespaces,
            clusterwide=clusterwide,
            liveness_endpoint=config.liveness,
        )
        return
    loop = asyncio.get_running_loop()
    current = asyncio.current_task()
    existing = {t for t in asyncio.all_tasks() if t is not current}
    tasks = await kopf.spawn_tasks(
        registry=registry,
        memo=memo,
        standalone=True,
        namespaces=namespaces,
        clusterwide=clusterwide,
        liveness_endpoint=config.liveness,
        stop_flag=stop,
    )
    for sig in (signal.SIGTERM, signal.SIGINT):  # kopf installed its own: ours again
        loop.add_signal_handler(sig, stop.set)
    await kopf.run_tasks(tasks, ignored=existing)


def main(argv: list[str] | None = None) -> None:
    config, elected = parse_all(list(sys.argv[1:] if argv is None else argv))
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

    try:  # built before the campaign: a standby is ready to lead at once
        memo = kopf.Memo({runtime.KEY: runtime.start(config)})
    except runtime.StartError as exc:  # exit 2 naming the flag, as for a bad flag value
        print(f"mlxfleet-operator: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    registry = handlers.registry(config)
    if config.standalone:
        asyncio.run(
            election.alone(
                elected,
                kubeconfig=config.kubeconfig,
                operate=lambda: _operate(config, registry, memo),
            )
        )
    else:
        asyncio.run(
            election.run(
                elected,
                kubeconfig=config.kubeconfig,
                liveness=config.liveness,
                operate=lambda stop: _operate(config, registry, memo, stop),
            )
        )


if __name__ == "__main__":
    main()
