"""`mlxfleet-operator`: run the kopf operator with mlxfleet's settings, as an elected leader
(the composition root).

Parses flags into `settings.OperatorSettings` (and `leader.ElectionSettings`), each flag
declared once on its field with the shared mechanism (mlxfleet_common.settings), builds the runtime
from them (Kubernetes facade, fleet view, metrics server) and the kopf registry
(`handlers.registry(config)`: timer intervals from the settings), then runs kopf with both.
By default every replica campaigns for the Lease `--lease-name` in the operator's namespace: the
leader runs kopf (handlers, agents); a standby only waits, its runtime and registry already built
(docs/operator.md, "High availability"). A leader that cannot renew before its renew deadline
exits at once (fencing); on SIGTERM it stops kopf, lets in-flight Kubernetes calls finish, then
releases the Lease so a standby takes over. `--standalone` is one operator with no election
(tests, local demo); it refuses to start while an elected leader renews the Lease.
May import: kopf, settings, adapters.leader / adapters.election, handlers, adapters.runtime and
adapters.heap (lazily, so `--help` stays fast).
Called by: the console script.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mlxfleet_agent import contract
from mlxfleet_common import settings as mechanism
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
    """The flags: `OperatorSettings`'s and `ElectionSettings`'s declarations (`Opt`), and the
    two deprecated peering flags."""
    p = argparse.ArgumentParser(
        prog="mlxfleet-operator",
        description="Kubernetes operator for mlxfleet: InferenceNode heartbeats, ModelDeployment "
        "placement and endpoints, SwapPlan execution, failover. Replicas elect a leader on a "
        "Lease; only the leader acts.",
    )
    p.add_argument("--version", action="version", version=__version__)
    mechanism.add_flags(p, opsettings.OperatorSettings)
    mechanism.add_flags(p, leader.ElectionSettings)
    # Deprecated: kopf peering (replaced by the Lease). Accepted so old manifests still start.
    p.add_argument("--priority", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--peering-name", default=None, help=argparse.SUPPRESS)
    return p


def parse_all(
    argv: list[str], environ: Mapping[str, str] | None = None
) -> tuple[opsettings.OperatorSettings, leader.ElectionSettings]:
    """Operator settings, and the election's (with --standalone: only to check that no elected
    leader runs)."""
    p = _parser()
    ns = p.parse_args(argv)
    if ns.priority is not None or ns.peering_name is not None:
        print(f"mlxfleet-operator: warning: {DEPRECATED_PEERING}", file=sys.stderr)
    try:
        config = mechanism.build(
            opsettings.OperatorSettings,
            file_values={},
            flag_values=mechanism.flag_values(opsettings.OperatorSettings, ns),
            environ=environ,
        )
        if config.kubeconfig and not os.access(config.kubeconfig, os.R_OK):
            raise mechanism.SettingsError(
                f"--kubeconfig {config.kubeconfig}: no such readable file"
            )
        keys = _fleet_keys(config.fleet_key_file, optional=config.fleet_key_optional)
        defaults = {
            name: leader.default_namespace()
            for name in ("provider_keys_namespace", "demand_namespace")
            if name not in config.model_fields_set
        }
        config = config.model_copy(update={"fleet_keys": keys, **defaults})
        election_flags = mechanism.flag_values(leader.ElectionSettings, ns)
        if election_flags["namespace"] is None:
            election_flags["namespace"] = leader.default_namespace()
        if election_flags["identity"] is None:
            election_flags["identity"] = leader.default_identity()
        elected = mechanism.build(
            leader.ElectionSettings, file_values={}, flag_values=election_flags, environ={}
        )
    except ValueError as exc:  # SettingsError, or a malformed fleet key: names the flag
        p.error(str(exc))
    return config, elected


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


def keep_kubernetes_out() -> None:
    """Keep the `kubernetes` package out of the operator's process. It is installed beside
    the operator (the kubectl plugin, bootstrap and reports use it), and kopf imports its client
    whenever it can, only to recognise its model objects, which the operator never passes:
    268 modules and 10 MB of resident memory for nothing (docs/operator.md, "Kubernetes
    clients"). A None entry in `sys.modules` makes that import fail as if the package were
    missing, which kopf expects. Nothing of the operator's own imports it (`adapters.kubeapi`
    reads credentials with `mlxfleet_common.kubeconfig`). A process that imported it already
    keeps it."""
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    config, elected = parse_all(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(
        level=getattr(logging, config.log_level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    keep_kubernetes_out()  # before kopf is imported
    from mlxfleet_operator.adapters import heap, runtime

    heap.limit_arenas()  # before any thread starts

    try:
        asyncio.run(_main(config, elected))
    except runtime.StartError as exc:  # exit 2 naming the flag, as for a bad flag value
        print(f"mlxfleet-operator: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


async def _main(config: opsettings.OperatorSettings, elected: leader.ElectionSettings) -> None:
    """Build the runtime on the loop kopf runs on (its Kubernetes client belongs to that loop),
    then run kopf alone or as an elected leader; the client is closed when kopf stops."""
    import kopf

    from mlxfleet_operator import handlers
    from mlxfleet_operator.adapters import heap, runtime

    trimming = asyncio.create_task(heap.keep_trimmed(), name="heap trim")
    built = await runtime.start(config)  # before the campaign: a standby is ready to lead at once
    memo = kopf.Memo({runtime.KEY: built})
    registry = handlers.registry(config)
    try:
        if config.standalone:
            await election.alone(
                elected,
                kubeconfig=config.kubeconfig,
                operate=lambda: _operate(config, registry, memo),
            )
        else:
            await election.run(
                elected,
                kubeconfig=config.kubeconfig,
                liveness=config.liveness,
                operate=lambda stop: _operate(config, registry, memo, stop),
            )
    finally:
        trimming.cancel()
        await built.kube.aclose()  # kopf's cleanup closed it already, unless kopf never ran


if __name__ == "__main__":
    main()
