"""How far a model download is: bytes done and total, and the recent rate, for a slot's status.

`Meter.update(done, total)` is the store's progress callback (called from the download's worker
thread); `Meter.snapshot()` is read by the slot's status on the event loop. The rate is measured
over the last `WINDOW_S` seconds (from the newest report at or before the window's start), so it
falls to 0 when the transfer stalls or ends; a span under `MIN_SPAN_S` counts as that long, so
the first chunk is not reported as a burst rate.
May import: the standard library, contract. Called by: slots.slot (one meter per prepare).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from mlxfleet_agent import contract

WINDOW_S = 5.0
MIN_SPAN_S = 1.0  # a rate over less than this is a burst, not a rate


class Meter:
    """Progress of one download (see the module docstring); thread-safe."""

    def __init__(
        self, *, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window_s = window_s
        self._clock = clock
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._total = 0
        self._guard = threading.Lock()

    def update(self, done: int, total: int) -> None:
        now = self._clock()
        with self._guard:
            self._total = max(0, total)
            self._samples.append((now, max(0, done)))
            self._trim(now)

    def _trim(self, now: float) -> None:
        """Drop samples older than the window, keeping the newest of them as the baseline."""
        start = now - self._window_s
        while len(self._samples) > 1 and self._samples[1][0] <= start:
            self._samples.popleft()

    def snapshot(self) -> contract.DownloadProgress | None:
        """Where the download is now; None before its first report."""
        now = self._clock()
        with self._guard:
            if not self._samples:
                return None
            self._trim(now)
            base_t, base_done = self._samples[0]
            _, done = self._samples[-1]
            total = self._total
        rate = (done - base_done) / max(now - base_t, MIN_SPAN_S)
        return contract.DownloadProgress(
            bytes_done=done, bytes_total=total, bytes_per_second=max(0.0, round(rate, 1))
        )
