"""Sharded groups on the wire: `RankSpec`, one rank's place in a group (SlotSpec.shard), with the
mlx.distributed backend and split mode.

May import: pydantic and the standard library only (pure).
Called by: `contract.slots` (SlotSpec.shard), the agent's backends and slots, the operator's
sharded deployment core and API models.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, model_validator

from mlxfleet_agent.contract.base import StrictWire


class ShardBackend(StrEnum):
    """mlx.distributed backend of a sharded group: ring (TCP, any network, Thunderbolt IP
    included) or jaccl (RDMA over Thunderbolt 5, macOS 26.2+)."""

    RING = "ring"
    JACCL = "jaccl"


class ShardMode(StrEnum):
    TENSOR = "tensor"
    PIPELINE = "pipeline"


SHARD_SIZE_MIN = 2
SHARD_SIZE_MAX = 16
RankAddress = Annotated[
    str, Field(min_length=3, max_length=261, pattern=r"^[A-Za-z0-9.:\[\]-]+:[0-9]{1,5}$")
]


class RankSpec(StrictWire):
    """This slot's rank in a sharded group (mlx.distributed launch contract: MLX_RANK and a
    hostfile listing each rank's host:port). Rank 0 serves requests; the others follow."""

    group: str = Field(
        min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$",
        description="Id of the group formation (a new id re-forms the group).",
    )  # fmt: skip
    rank: int = Field(ge=0, lt=SHARD_SIZE_MAX)
    world_size: int = Field(ge=SHARD_SIZE_MIN, le=SHARD_SIZE_MAX)
    hosts: list[RankAddress] = Field(
        min_length=SHARD_SIZE_MIN,
        max_length=SHARD_SIZE_MAX,
        description="host:port each rank listens on, by rank (the ring hostfile; for jaccl, "
        "hosts[0] is the coordinator).",
    )
    backend: ShardBackend = ShardBackend.RING
    mode: ShardMode = ShardMode.TENSOR

    @model_validator(mode="after")
    def _consistent(self) -> RankSpec:
        if len(self.hosts) != self.world_size:
            raise ValueError(
                f"hosts lists {len(self.hosts)} addresses, worldSize is {self.world_size}"
            )
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below worldSize {self.world_size}")
        return self

    @property
    def leader(self) -> bool:
        return self.rank == 0
