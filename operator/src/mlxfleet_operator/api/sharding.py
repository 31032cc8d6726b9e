"""ModelDeployment `spec.sharding`: one replica split over several nodes (mlx.distributed).

A replica is then a group of `size` ranks on distinct nodes, tensor- or pipeline-parallel, over a
ring (TCP) or JACCL (RDMA over Thunderbolt 5); the agent contract's ShardMode and ShardBackend
are what the operator sends to each rank.
May import: pydantic, the standard library, `base` and `mlxfleet_agent.contract`.
Called by: api.deploymentspec; core (sharded placement) through `spec.sharding`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from mlxfleet_agent import contract
from mlxfleet_operator.api import base


class ShardingMode(StrEnum):
    TENSOR = "Tensor"
    PIPELINE = "Pipeline"


class ShardingBackend(StrEnum):
    RING = "ring"
    JACCL = "jaccl"


class Sharding(base.ApiModel):
    """Split each replica over several nodes (mlx.distributed): a replica is then a group of
    `size` ranks on distinct nodes, Ready only when every rank is; rank 0 serves requests."""

    size: int = Field(
        ge=contract.SHARD_SIZE_MIN,
        le=contract.SHARD_SIZE_MAX,
        description=f"Ranks (nodes) per replica ({contract.SHARD_SIZE_MIN}-"
        f"{contract.SHARD_SIZE_MAX}).",
    )
    mode: ShardingMode = Field(
        default=ShardingMode.TENSOR,
        description="Tensor splits every layer by KV heads (the model's KV heads must divide "
        "by size); Pipeline splits the layers, in proportion to each node's free memory "
        "(only for architectures whose mlx-lm model supports it, e.g. DeepSeek V3; not llama).",
    )
    backend: ShardingBackend = Field(
        default=ShardingBackend.RING,
        description="ring: TCP between the nodes (Ethernet or Thunderbolt IP); jaccl: RDMA over "
        "Thunderbolt 5 (macOS 26.2+, see docs/sharding.md).",
    )

    def to_agent_mode(self) -> contract.ShardMode:
        return contract.ShardMode(self.mode.value.lower())

    def to_agent_backend(self) -> contract.ShardBackend:
        return contract.ShardBackend(self.backend.value)
