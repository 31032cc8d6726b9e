"""The composition root: the one place the agent's parts are built, wired and torn down.

Built in dependency order, each part given only what it needs: the node's credentials (its own
keys from the operator, the admin's key files), telemetry and its shipper, the model
catalog (over the store), the engines this host can run (discovery), the backend launcher, the
slot registry (which owns the slots and is their `Owner`), the data plane (given the registry as
its narrow `slots.lease.Routes`), the control API (wrapped in its guard, behind the peer file
server on `/peer/v1/`). No part is built before what it depends on, so nothing needs a late-bound
callback. On exit: downloads stop, every slot and backend stops, the shipper flushes, the warm-up
client closes.
May import: everything in the agent except cli. Called by: runtime.serve, tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from mlxfleet_agent import contract
from mlxfleet_agent.backends import launcher, logrotate, orphans
from mlxfleet_agent.controlapi import app as control_app
from mlxfleet_agent.controlapi import guard, state
from mlxfleet_agent.dataplane import app as data_app
from mlxfleet_agent.doctor import watch
from mlxfleet_agent.engines import discovery, facts
from mlxfleet_agent.host import certs, credentials, platform
from mlxfleet_agent.models import catalog, store
from mlxfleet_agent.peers import server as peer_server
from mlxfleet_agent.runtime import logs, settings
from mlxfleet_agent.slots import registry
from mlxfleet_agent.telemetry import heat, recorder, shipper

log = logging.getLogger("mlxfleet_agent")
LOG_ROTATE_INTERVAL_S = 5.0  # how often backend logs are looked at (a stat per log)


@dataclass(frozen=True, slots=True)
class Runtime:
    """What `serve` runs and stops; built by `lifespan`."""

    registry: registry.Registry
    control_app: peer_server.PeerServer
    data_app: data_app.DataPlane


def shipper_config(cfg: settings.Settings) -> shipper.ShipperConfig:
    """Where and how the agent ships telemetry (spool: `<state-dir>/telemetry`)."""
    secret = cfg.telemetry_secret_access_key
    return shipper.ShipperConfig(
        spool_dir=cfg.state_dir / "telemetry",
        bucket=cfg.telemetry_bucket or None,
        prefix=cfg.telemetry_prefix or shipper.DEFAULT_PREFIX,
        endpoint_url=cfg.telemetry_endpoint_url or None,
        region=cfg.telemetry_region or None,
        access_key_id=cfg.telemetry_access_key_id,
        secret_access_key=secret.get_secret_value() if secret is not None else None,
        interval_seconds=cfg.telemetry_interval_s,
        max_buffered=cfg.telemetry_max_buffered,
    )


def telemetry(cfg: settings.Settings) -> tuple[recorder.Telemetry, shipper.Shipper]:
    """The agent's telemetry and its (not yet started) shipper, as the settings say; the
    shipper samples the host's heat (`--thermal-file` instead, when given)."""
    return shipper.build(
        shipper_config(cfg),
        node=cfg.node_name,
        idle_watts=cfg.idle_power_watts,
        busy_watts=cfg.busy_power_watts,
        heat_meter=heat.HeatMeter(thermal_files=cfg.thermal_files),
        psi_file=cfg.memory_pressure_file,
    )


def doctor(cfg: settings.Settings) -> watch.Doctor:
    """The macOS doctor (not yet started), as the settings say."""
    return watch.Doctor(
        interval_s=cfg.doctor_interval_s,
        updates_interval_s=cfg.doctor_updates_interval_s,
        outputs_dir=cfg.doctor_outputs_dir,
        disk_min_free_bytes=cfg.doctor_disk_min_free_bytes,
    )


@contextlib.asynccontextmanager
async def lifespan(cfg: settings.Settings, *, data_port: int = 0) -> AsyncIterator[Runtime]:
    """Build the agent runtime, restore persisted slots; on exit stop every backend."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    cfg.models_dir.mkdir(parents=True, exist_ok=True)
    killed = orphans.sweep(cfg.state_dir)
    if killed:
        log.warning("killed backends orphaned by a previous agent", extra={"pids": killed})
    token = cfg.read_token()
    peer_token = cfg.read_peer_token()
    keys = credentials.NodeKeys(
        cfg.credentials_path(),
        file_keys=cfg.read_data_keys(),
        legacy_peer_token=peer_token,
        may_be_open=cfg.may_be_open(),
    )
    if not keys.data_keys and not keys.open:
        log.warning(
            "the data plane has no key yet and refuses every request: the operator sends this "
            "node its own once a person approved it (or give --data-api-keys-file; "
            "--allow-open-data-plane serves without a key)",
            extra={"bind": cfg.bind},
        )
    tel, ship = telemetry(cfg)
    host_doctor = doctor(cfg)
    if cfg.tls_cert is not None and (until := certs.expires_at(cfg.tls_cert)) is not None:
        tel.metrics.tls_expiry.labels(listener="control").set(until)
    scrape_token = cfg.read_metrics_token()
    metrics_tokens = None  # /metrics open: loopback only, no scrape token set
    if scrape_token is not None or not cfg.loopback_only():
        metrics_tokens = (token,) if scrape_token is None else (token, scrape_token)
    model_store = store.Store(
        cfg.models_dir,
        allowed_roots=cfg.roots(),
        max_download_bytes_per_s=cfg.download_max_bytes_per_s,
        peer_token=peer_token,
    )
    models = catalog.Catalog(model_store)
    found = await asyncio.to_thread(facts.gather, command_programs=cfg.command_programs)
    engines = [
        contract.EngineInfo(name=a.engine, available=a.available, reason=a.reason)
        for a in discovery.engines(found)
    ]
    log.info("engines", extra={"runnable": [e.name for e in engines if e.available]})
    backends = launcher.Launcher(
        log_dir=cfg.state_dir / "logs",
        python=cfg.python,
        load_timeout_s=cfg.load_timeout_s,
        stop_grace_s=cfg.stop_grace_s,
        health_interval_s=cfg.health_interval_s,
        engines=engines,
        command_programs=cfg.command_programs,
        command_env=cfg.command_env_names(),
        fabric_address=cfg.fabric(),
        rank_accept_timeout_s=cfg.rank_accept_timeout_s,
    )
    slots = registry.Registry(
        state_dir=cfg.state_dir,
        catalog=models,
        launcher=backends,
        telemetry=tel,
        queue_limit=cfg.queue_limit,
        memory_budget=cfg.memory_budget,
        restart_backoff_max_s=cfg.restart_backoff_max_s,
        busy_after_s=cfg.busy_after_s,
    )
    tel.metrics.add_slot_collector(slots.statuses)
    view = state.StateView(
        slots=slots,
        models=models,
        telemetry=tel,
        models_dir=cfg.models_dir,
        data_port=data_port,
        engines=engines,
        pressure_file=cfg.memory_pressure_file,
        keys=keys,
        fabric_address=cfg.fabric(),
        doctor=host_doctor,
    )
    control = control_app.build(
        slots=slots,
        models=models,
        view=view,
        keys=keys,
        agent_metrics=tel.metrics,
        log_tail=logs.RING.tail,
    )
    runtime = Runtime(
        registry=slots,
        control_app=peer_server.PeerServer(
            guard.Guard(control, token=token, metrics_tokens=metrics_tokens),
            holdings=model_store,
            models_dir=cfg.models_dir,
            tokens=keys,
        ),
        data_app=data_app.DataPlane(
            routes=slots,
            telemetry=tel,
            keys=keys,
            max_body_bytes=cfg.max_body_bytes,
            queue_timeout_s=cfg.queue_timeout_s,
            hold_s=cfg.hung_up_grace_s,
        ),
    )
    if keys.serves_peers:  # a fleet that copies weights: boto3's set-up off the clock
        warm = asyncio.get_running_loop().run_in_executor(None, model_store.s3_client)
        warm.add_done_callback(_warmed)
    restored = slots.restore()
    if restored:
        log.info("restored slots", extra={"slots": restored})
    ship.start()
    host_doctor.start()
    caffeinate = platform.start_caffeinate() if cfg.caffeinate else None
    rotating = asyncio.get_running_loop().create_task(
        logrotate.watch(
            cfg.state_dir / "logs",
            max_bytes=cfg.backend_log_max_bytes,
            keep=cfg.backend_log_keep,
            interval_s=LOG_ROTATE_INTERVAL_S,
        )
    )
    try:
        yield runtime
    finally:
        rotating.cancel()
        host_doctor.stop()
        models.close()
        await slots.close()
        await asyncio.to_thread(ship.stop)
        await backends.aclose()
        if caffeinate is not None:
            caffeinate.terminate()
        log.info("backends stopped")


def _warmed(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("S3 client set-up failed", extra={"error": str(fut.exception())})
