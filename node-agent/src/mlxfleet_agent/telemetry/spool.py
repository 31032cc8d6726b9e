"""The shipper's disk: the queue of closed intervals waiting for the object store (one file each,
named by interval start and node) and the checkpoint of the open interval.

Every file is written atomically (`host.files`). Folders are created on the first write, never
just by looking.
May import: the standard library, contract, host.files. Called by: telemetry.shipper.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mlxfleet_agent import contract
from mlxfleet_agent.host import files

log = logging.getLogger("mlxfleet_agent.shipper")


class Spool:
    """The on-disk queue of closed intervals (one file each, named by start and node) and the
    checkpoint. Folders are created on the first write, never just by looking."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.queue_dir = root / "queue"
        self.checkpoint_path = root / "open-interval.json"

    @staticmethod
    def _name(interval: contract.TelemetryInterval) -> str:
        start = round(interval.interval_start.timestamp() * 1000)
        return f"{start:016d}-{interval.node}.json"  # two names in one window: two files

    def push(self, interval: contract.TelemetryInterval) -> None:
        files.write_atomic(
            self.queue_dir / self._name(interval), interval.model_dump_json().encode()
        )

    def contains(self, interval: contract.TelemetryInterval) -> bool:
        return (self.queue_dir / self._name(interval)).exists()

    def pending(self) -> list[Path]:
        return sorted(self.queue_dir.glob("*.json"))

    def trim(self, limit: int) -> int:
        """Drop the oldest files beyond `limit`; return how many were dropped."""
        queued = self.pending()
        excess = queued[: max(0, len(queued) - limit)]
        for path in excess:
            path.unlink(missing_ok=True)
        return len(excess)

    def save_checkpoint(self, interval: contract.TelemetryInterval) -> None:
        files.write_atomic(self.checkpoint_path, interval.model_dump_json().encode())

    def load_checkpoint(self) -> contract.TelemetryInterval | None:
        try:
            return contract.TelemetryInterval.model_validate_json(self.checkpoint_path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("discarding unreadable telemetry checkpoint %s", self.checkpoint_path)
            return None

    def clear_checkpoint(self) -> None:
        self.checkpoint_path.unlink(missing_ok=True)
