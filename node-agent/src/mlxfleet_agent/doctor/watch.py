"""The doctor's thread: examines the host every `interval_s` (softwareupdate every
`updates_interval_s`) and keeps the latest report for GET /v1/state, which never waits on a
command. The first examination runs as soon as the thread starts.

May import: the standard library, contract, doctor.probe. Called by: runtime.compose (start,
stop), controlapi.state (`report`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from mlxfleet_agent import contract
from mlxfleet_agent.doctor import probe

log = logging.getLogger("mlxfleet_agent.doctor")


class Doctor:
    """Examines the host on a thread of its own; `report()` is the latest result (None before
    the first one)."""

    def __init__(
        self,
        *,
        interval_s: float = 300.0,
        updates_interval_s: float = 21_600.0,
        outputs_dir: Path | None = None,
        disk_min_free_bytes: int | None = None,
        runner: probe.Runner | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.updates_interval_s = updates_interval_s
        self.disk_min_free_bytes = disk_min_free_bytes
        self._runner = runner or (probe.recorded(outputs_dir) if outputs_dir else probe.run)
        self._clock = clock
        self._lock = threading.Lock()
        self._report: contract.DoctorReport | None = None
        self._updates_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def report(self) -> contract.DoctorReport | None:
        with self._lock:
            return self._report

    def examine(self) -> contract.DoctorReport:
        """One examination now (softwareupdate too when its interval is over)."""
        now = self._clock()
        updates = self._updates_at is None or now - self._updates_at >= self.updates_interval_s
        found = probe.examine(
            self._runner,
            now=datetime.now(UTC),
            updates=updates,
            previous=self.report(),
            disk_min_free_bytes=self.disk_min_free_bytes,
        )
        if updates:
            self._updates_at = now
        with self._lock:
            self._report = found
        return found

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="doctor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the examination under way (a command finishes within its timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.examine()
            except Exception:
                log.exception("host examination failed")
            if self._stop.wait(self.interval_s):
                return
