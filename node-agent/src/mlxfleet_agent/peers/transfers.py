"""Model downloads in progress: bytes done/total, rate, and where the bytes come from.

One `Transfers` per agent; the store reports into it from worker threads (a lock guards it),
the state view reads `snapshot(now)`. The rate is measured over the last `WINDOW_S` seconds of
samples (bytes per second), so a stall shows as a falling rate rather than a lifetime average.
Explicit `now` (monotonic seconds) everywhere: no clock is read here.
May import: the standard library. Called by: the model store, the control API's state view.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

WINDOW_S = 5.0


@dataclass(frozen=True, slots=True)
class Progress:
    """One download as the agent reports it."""

    model_id: str
    source: str
    done_bytes: int
    total_bytes: int
    bytes_per_second: float
    peer_bytes: int
    phase: str  # "peers" or "origin"


@dataclass
class _Transfer:
    source: str
    total: int = 0
    done: int = 0
    peer_bytes: int = 0
    phase: str = "origin"
    samples: deque[tuple[float, int]] = field(default_factory=deque)


class Transfers:
    """Downloads in progress (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, _Transfer] = {}

    def start(self, model_id: str, *, source: str, total: int, phase: str, now: float) -> None:
        with self._lock:
            t = self._items.setdefault(model_id, _Transfer(source=source))
            t.total, t.phase = total, phase
            t.samples.append((now, t.done))

    def update(
        self, model_id: str, done: int | None, *, now: float, peer_bytes: int | None = None
    ) -> None:
        """Bytes done so far (None: unchanged) and, when given, how many came from peers."""
        with self._lock:
            t = self._items.get(model_id)
            if t is None:
                return
            if done is not None:
                t.done = max(0, min(done, t.total) if t.total else done)
            if peer_bytes is not None:
                t.peer_bytes = peer_bytes
            t.samples.append((now, t.done))
            while len(t.samples) > 2 and t.samples[1][0] <= now - WINDOW_S:
                t.samples.popleft()

    def finish(self, model_id: str) -> None:
        with self._lock:
            self._items.pop(model_id, None)

    def snapshot(self, now: float) -> list[Progress]:
        with self._lock:
            out = []
            for mid, t in sorted(self._items.items()):
                rate = 0.0
                if t.samples:
                    t0, d0 = t.samples[0]
                    if now - t0 > 0:
                        rate = max(0.0, (t.done - d0) / (now - t0))
                out.append(
                    Progress(
                        model_id=mid,
                        source=t.source,
                        done_bytes=t.done,
                        total_bytes=t.total,
                        bytes_per_second=round(rate, 1),
                        peer_bytes=t.peer_bytes,
                        phase=t.phase,
                    )
                )
            return out
