"""When is a backend ready? When a warm-up completion succeeds (mlx_lm's /health lies early).

`warm_up` polls the engine's warm-up request (`mlxlm.WARMUP_BODY`) until it answers 200 with a
choice, the process dies, the server keeps answering with an error (a model that fails to load
leaves mlx_lm up, answering 404), or the deadline passes. `next_backoff` is the pure restart
schedule of a crashed backend.
May import: httpx and the standard library. Called by: backends.launcher, slots (backoff).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx


class NotReady(RuntimeError):
    """The backend did not answer a warm-up completion (message says why)."""


@dataclass(frozen=True, slots=True)
class Warm:
    """A backend that answered its warm-up: how long it took, and the answer's
    system_fingerprint (the data plane replaces that value in every answer)."""

    seconds: float
    fingerprint: str | None


async def warm_up(
    client: httpx.AsyncClient,
    url: str,
    *,
    body: dict[str, Any],
    alive: Callable[[], bool],
    timeout_s: float,
    poll_s: float = 0.15,
    max_refusals: int = 3,
) -> Warm:
    """Poll `url` with `body` until a warm-up completion succeeds. Raise NotReady otherwise."""
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no answer yet"
    refusals = 0
    while time.monotonic() < deadline:
        if not alive():
            raise NotReady(f"backend exited before it was ready ({last})")
        try:
            remaining = max(0.5, deadline - time.monotonic())
            resp = await client.post(url, json=body, timeout=remaining)
            answer = resp.json() if resp.status_code == 200 else {}
            if isinstance(answer, dict) and answer.get("choices"):
                fingerprint = answer.get("system_fingerprint")
                return Warm(
                    time.monotonic() - start, fingerprint if isinstance(fingerprint, str) else None
                )
            last = f"warm-up answered {resp.status_code}: {resp.text[:300]}"
            refusals += 1
            if refusals >= max_refusals:
                # the server is up and says no (mlx_lm answers 404 once its model failed to load)
                raise NotReady(last)
        except (httpx.TransportError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        await asyncio.sleep(poll_s)
    raise NotReady(f"backend not ready after {timeout_s:.0f}s ({last})")


def next_backoff(restarts: int, *, base_s: float = 1.0, max_s: float = 30.0) -> float:
    """Delay before restart number `restarts + 1` of a crashed backend: 1, 2, 4, ... max_s."""
    return float(min(max_s, base_s * (2 ** max(0, restarts))))
