"""Per-slot request and swap counters of the agent (seam between the data plane and telemetry).

The data plane calls `Telemetry.request_finished(...)` once per request and `swap_finished(...)`
once per swap; everything else (histograms, Prometheus exposition, shipping intervals to S3) is
built behind these calls. Never receives prompt or completion text: only counts and timings.
May import: the standard library and contract. Called by: proxy/router, swap, app.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one finished data-plane request contributes. No request text, ever."""

    slot: str
    served_name: str
    source: str
    endpoint: str  # "chat.completions" | "completions"
    stream: bool
    prompt_tokens: int
    completion_tokens: int
    queue_wait_s: float
    ttft_s: float | None  # time to first token (streams) or to the full answer
    e2e_s: float
    error_kind: str | None = None  # None on success; e.g. "backend_5xx", "backend_died", "timeout"


class Telemetry:
    """Thread-safe in-memory aggregates; extended with histograms and shipping (issue 5)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, float] = defaultdict(float)

    def request_started(self, slot: str) -> None:
        with self._lock:
            self._counters[f"in_flight/{slot}"] += 1

    def request_finished(self, record: RequestRecord) -> None:
        with self._lock:
            self._counters[f"in_flight/{record.slot}"] -= 1
            self._counters["requests_total"] += 1
            if record.error_kind is not None:
                self._counters["requests_failed_total"] += 1
            self._counters["prompt_tokens_total"] += record.prompt_tokens
            self._counters["completion_tokens_total"] += record.completion_tokens

    def swap_finished(self, *, slot: str, outcome: str) -> None:
        with self._lock:
            self._counters[f"swaps_total/{outcome}"] += 1

    def counters(self) -> dict[str, float]:
        """Flat totals for GET /v1/state `counters`."""
        with self._lock:
            return {k: v for k, v in self._counters.items() if not k.startswith("in_flight/")}
