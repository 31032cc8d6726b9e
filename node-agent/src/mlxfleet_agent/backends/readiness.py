"""When is a backend ready? When a real request of its engine succeeds (mlx_lm's /health lies
early): a one-token completion for mlx-lm, one embedding or rerank for those engines.

`warm_up` polls each of the engine's probes (`engines.registry.probes`) in turn until it answers
200 with the shape `plugin.accepts` expects, the process dies, the server keeps answering with
an error (a model that fails to load leaves mlx_lm up, answering 404), or the deadline passes.
`next_backoff` is the pure restart schedule of a crashed backend. `watch_health` is the other
half of readiness: once serving, a backend whose health endpoint stops answering 200 is out of
service (mlx_lm whose generation thread died; rank 0 of a group that lost a peer).
May import: httpx, mlxfleet_common.wire (httpclient's `Origin`, healthcheck), engines.plugin and
the standard library. Called by: backends.launcher, slots (backoff).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from mlxfleet_agent.engines import plugin
from mlxfleet_common.wire import healthcheck, httpclient


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
    base_url: str,
    *,
    probes: Sequence[plugin.Probe],
    alive: Callable[[], bool],
    timeout_s: float,
    poll_s: float = 0.15,
    max_refusals: int = 3,
) -> Warm:
    """Poll each probe in turn until it is accepted. Raise NotReady otherwise."""
    start = time.monotonic()
    deadline = start + timeout_s
    fingerprint: str | None = None
    for probe in probes:
        answer = await _until_accepted(
            client,
            base_url,
            probe,
            alive=alive,
            deadline=deadline,
            timeout_s=timeout_s,
            poll_s=poll_s,
            max_refusals=max_refusals,
        )
        value = answer.get("system_fingerprint")
        fingerprint = value if isinstance(value, str) else fingerprint
    return Warm(time.monotonic() - start, fingerprint)


async def _until_accepted(
    client: httpx.AsyncClient,
    base_url: str,
    probe: plugin.Probe,
    *,
    alive: Callable[[], bool],
    deadline: float,
    timeout_s: float,
    poll_s: float,
    max_refusals: int,
) -> dict[str, Any]:
    last = "no answer yet"
    refusals = 0
    while time.monotonic() < deadline:
        if not alive():
            raise NotReady(f"backend exited before it was ready ({last})")
        try:
            remaining = max(0.5, deadline - time.monotonic())
            resp = await client.request(
                probe.method,
                base_url + probe.path,
                json=dict(probe.body) if probe.body is not None else None,
                timeout=remaining,
            )
            answer = resp.json() if resp.status_code == 200 else {}
            if plugin.accepts(probe, resp.status_code, answer):
                assert isinstance(answer, dict)
                return answer
            last = f"warm-up {probe.path} answered {resp.status_code}: {resp.text[:300]}"
            refusals += 1
            if refusals >= max_refusals:
                # the server is up and says no (mlx_lm answers 404 once its model failed to load)
                raise NotReady(last)
        except (httpx.TransportError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        await asyncio.sleep(poll_s)
    raise NotReady(f"backend not ready after {timeout_s:.0f}s ({last})")


async def watch_health(
    url: str,
    *,
    alive: Callable[[], bool],
    interval_s: float,
    silent_limit: int | None = None,
    timeout_s: float = 2.0,
) -> str | None:
    """Poll GET `url` while the process is `alive`; return why once it is not healthy (an answer
    other than 200; or, with `silent_limit`, that many failed polls in a row), None once the
    process is gone. Without `silent_limit`, a backend too busy to answer is not unhealthy.
    Each poll is one `healthcheck.HealthCheck` (a write, a read and a few parser callbacks; a
    kept-alive connection where the server keeps it), not a general HTTP client's request: a
    node polls every backend for as long as it serves."""
    origin, path = httpclient.Origin.from_url(url)
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[str] | None = None  # the poll in flight's answer

    def on_result(ok: bool, why: str) -> None:
        if answered is not None and not answered.done():
            answered.set_result("" if ok else why)

    check = healthcheck.HealthCheck(origin, path or "/", timeout_s=timeout_s, on_result=on_result)
    silent = 0
    try:
        while alive():
            answered = loop.create_future()
            check.fire()
            why = await answered
            if why and check.status not in (0, 200):  # it answered, and not 200
                return f"unhealthy (GET {path} answered {check.status})"
            if why:  # no whole answer: one slow answer under load is not a failure
                silent += 1
                if silent_limit is not None and silent >= silent_limit and alive():
                    return f"does not answer GET {path}: {why}"
            else:
                silent = 0
            await asyncio.sleep(interval_s)
    finally:
        check.close()
    return None


def next_backoff(restarts: int, *, base_s: float = 1.0, max_s: float = 30.0) -> float:
    """Delay before restart number `restarts + 1` of a crashed backend: 1, 2, 4, ... max_s."""
    return float(min(max_s, base_s * (2 ** max(0, restarts))))
