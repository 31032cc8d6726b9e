"""Settings of a hollow fleet: its nodes (memory, token), timings, models, faults at start.

`FleetConfig.generate(count, seed=...)` makes a mixed fleet (16 to 192 GiB Macs); a YAML/JSON
file with the same fields describes a fleet by hand (`python -m tests.support.hollow --config`).
May import: pydantic, the standard library, `mlxfleet_agent.contract`.
"""

from __future__ import annotations

import random
import secrets
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mlxfleet_agent import contract

GIB = 1024**3
MAC_MEMORY_GIB = (16, 24, 32, 36, 48, 64, 96, 128, 192)  # Mac mini .. Mac Studio


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Timing(Strict):
    """Simulated seconds of each step of a slot (the real agent: fetch, start, warm up)."""

    download_s: float = Field(default=2.0, ge=0, description="a model not in the cache")
    load_s: float = Field(default=2.0, ge=0, description="backend start to loaded")
    warm_s: float = Field(default=0.5, ge=0, description="warm-up request")
    stop_s: float = Field(default=0.2, ge=0, description="backend stop")
    jitter: float = Field(default=0.2, ge=0, le=1, description="+- share, per step, seeded")

    @property
    def longest_load_s(self) -> float:
        """The most a cold start takes (download, load, warm up), for 'beyond load time'."""
        return (self.download_s + self.load_s + self.warm_s) * (1 + self.jitter)


class ModelInfo(Strict):
    """What a hollow node reports for a non-file source once it 'downloaded' it."""

    size_bytes: int = Field(ge=1)
    shape: contract.ModelShape = Field(
        default_factory=lambda: contract.ModelShape(num_layers=32, num_kv_heads=8, head_dim=128)
    )


class Faults(Strict):
    """Faults of one node; the admin API changes them while the fleet runs."""

    down: Literal["no", "refuse", "hang"] = "no"  # refuse: connection refused; hang: no answer
    slow_s: float = Field(default=0.0, ge=0, description="every answer waits this long")
    fail_loads: bool = Field(default=False, description="every slot load fails")
    fail_sources: list[str] = Field(
        default_factory=list, description="loads of sources containing one of these fail"
    )


class NodeConfig(Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    memory_bytes: int = Field(ge=GIB, description="the Mac's memory")
    memory_budget_bytes: int | None = Field(
        default=None, ge=0, description="default: the agent's own budget of memory_bytes"
    )
    disk_bytes: int = Field(default=1024 * GIB, ge=GIB)
    token: str = Field(default_factory=lambda: secrets.token_urlsafe(24), min_length=16)
    port: int = Field(default=0, ge=0, le=65535, description="0: any free loopback port")
    faults: Faults = Field(default_factory=Faults)


class FleetConfig(Strict):
    nodes: list[NodeConfig]
    timing: Timing = Field(default_factory=Timing)
    models: dict[str, ModelInfo] = Field(
        default_factory=dict, description="source -> size and shape (default: default_model)"
    )
    default_model: ModelInfo = Field(default_factory=lambda: ModelInfo(size_bytes=4 * GIB))
    allowed_roots: list[str] = Field(default_factory=list, description="for file:// sources")
    seed: int = 0
    host: str = "127.0.0.1"

    @classmethod
    def generate(
        cls, count: int, *, seed: int = 0, prefix: str = "mac", timing: Timing | None = None
    ) -> FleetConfig:
        """`count` nodes named `<prefix>-0001`.., memory drawn from the Mac line-up."""
        r = random.Random(seed)
        nodes = [
            NodeConfig(
                name=f"{prefix}-{i:04d}",
                memory_bytes=r.choice(MAC_MEMORY_GIB) * GIB,
                token=f"hollow-{seed}-{i:04d}-{r.getrandbits(64):016x}",
            )
            for i in range(1, count + 1)
        ]
        return cls(nodes=nodes, timing=timing or Timing(), seed=seed)

    def model(self, source: str) -> ModelInfo:
        return self.models.get(source, self.default_model)
