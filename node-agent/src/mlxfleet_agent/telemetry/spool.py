"""The shipper's disk: the queue of closed intervals waiting for the object store (one file each,
named by interval start and node) and the checkpoint of the open interval.

The shared shipper's `DiskQueue` (mlxfleet_common.telemetry.shipper) over `TelemetryInterval`
(`contract.IntervalCodec`), every file written atomically by `host.files`. Folders are created on
the first write, never just by looking.
May import: the standard library, contract, host.files, mlxfleet_common.telemetry.
Called by: telemetry.shipper.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mlxfleet_agent import contract
from mlxfleet_agent.host import files
from mlxfleet_common.telemetry import shipper as common

log = logging.getLogger("mlxfleet_agent.shipper")


class Spool(common.DiskQueue[contract.TelemetryInterval]):
    """The on-disk queue of closed intervals (one file each, named by start and node) and the
    checkpoint. Folders are created on the first write, never just by looking."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, contract.IntervalCodec(), files.write_atomic, log=log)
