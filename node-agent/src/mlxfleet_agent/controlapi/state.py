"""GET /v1/state: what this agent reports about itself, gathered at each request.

Versions, OS and chip (read once, at start-up), memory (total, available, the slots' budget
and estimate, pressure), disk of the models dir, the data port, every slot's status, the cached
models, the downloads in progress (`transfers`), the telemetry and peer counters, the engines
found at start, the fingerprint of the node's own credentials, the host's heat (the
telemetry's last sample) and the doctor's last report: both read by threads of their own, so
answering never waits on a command.
May import: the standard library, contract, host (platform, credentials), models.catalog,
slots.registry, telemetry (recorder, hoststats), doctor.watch. Called by: controlapi.app,
runtime (builds it).
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from pathlib import Path

from mlxfleet_agent import __version__, contract
from mlxfleet_agent.doctor import watch
from mlxfleet_agent.host import credentials, platform
from mlxfleet_agent.models import catalog
from mlxfleet_agent.slots import registry
from mlxfleet_agent.telemetry import hoststats, recorder


class StateView:
    """The agent's `contract.AgentState`, from the registry, the catalog and the host."""

    def __init__(
        self,
        *,
        slots: registry.Registry,
        models: catalog.Catalog,
        telemetry: recorder.Telemetry,
        models_dir: Path,
        data_port: int,
        engines: list[contract.EngineInfo] | None = None,
        pressure_file: Path | None = hoststats.PSI_FILE,
        keys: credentials.NodeKeys | None = None,
        fabric_address: str | None = None,
        doctor: watch.Doctor | None = None,
    ) -> None:
        self.doctor = doctor
        self.engines = engines or []
        self.pressure_file = pressure_file
        self.keys = keys
        self.fabric_address = fabric_address
        self.slots = slots
        self.models = models
        self.telemetry = telemetry
        self.models_dir = models_dir
        self.data_port = data_port
        self.started_at = datetime.now(UTC)
        self.chip = platform.chip()
        self.os = platform.os_name()
        self.mlx_version = platform.version_of("mlx")
        self.mlx_lm_version = platform.version_of("mlx-lm")

    def agent_state(self) -> contract.AgentState:
        mem = platform.memory()
        pressure = hoststats.read_pressure(self.pressure_file)
        free, total = platform.disk(self.models_dir)
        return contract.AgentState(
            agent_version=__version__,
            os=self.os,
            mlx_version=self.mlx_version,
            mlx_lm_version=self.mlx_lm_version,
            chip=self.chip,
            memory=contract.MemoryInfo(
                total_bytes=mem.total_bytes,
                available_bytes=mem.available_bytes,
                budget_bytes=self.slots.budget(),
                slots_estimated_bytes=self.slots.estimate(),
                pressure=pressure.level,
                pressure_reason=pressure.why,
            ),
            disk=contract.DiskInfo(free_bytes=free, total_bytes=total),
            data_port=self.data_port,
            started_at=self.started_at,
            now=datetime.now(UTC),
            slots=self.slots.statuses(),
            cached_models=self.models.cached(),
            transfers=[
                contract.Transfer.model_validate(dataclasses.asdict(t), by_name=True)
                for t in self.models.store.transfers.snapshot(time.monotonic())
            ],
            counters={**self.telemetry.counters(), **self.models.store.counters},
            thermal=self.telemetry.thermal(),
            doctor=self.doctor.report() if self.doctor is not None else None,
            engines=self.engines,
            credentials=self.keys.fingerprint if self.keys is not None else None,
            fabric_address=self.fabric_address,
        )
