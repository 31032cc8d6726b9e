"""What one request counts: its metrics, and its line in the per-key usage book.

`finish` runs once per call, when it has been answered (or not): requests by key, model, backend
and outcome (`ok`, `cut`, `error`), prompt and completion tokens by key and team, errors by kind,
time to first byte and duration by model, and the call's `usage.Use` for the shipper. `record`
books one use on its own (a request refused by its rate limit never becomes a call). Without a
shipper nothing is booked; the metrics are counted all the same. The access log (`ACCESS`, one
JSON line per request at INFO, `--no-access-log` turns it off) says who asked for which model,
where it went, what came of it, how long it took and how many tokens: never the prompt or the
answer, which the gateway neither logs nor ships. `refused` is the line of a request refused
before it became a call. The line is written by the log's `logline.JsonHandler` directly when it
alone would write it (no `LogRecord` per request), else through `logging` as any other line.
May import: the standard library, core (keys, usage), calls, metrics, shipper, logline. Called by:
proxy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mlxfleet_gateway import calls, logline, metrics, shipper
from mlxfleet_gateway.core import keys
from mlxfleet_gateway.core import usage as usage_mod

ACCESS = "mlxfleet_gateway.access"
access = logging.getLogger(ACCESS)


def write_access(fields: dict[str, Any]) -> None:
    """One access line (message `request`) with `fields`, when the access log is on."""
    if not access.isEnabledFor(logging.INFO):
        return
    handler = logline.sole_handler(access, logging.INFO)
    if handler is not None:
        handler.write_line(ACCESS, logging.INFO, "request", fields)
    else:
        access.info("request", extra=fields)


class Meter:
    def __init__(
        self,
        *,
        gauges: metrics.GatewayMetrics,
        usage: shipper.Shipper | None,
        clock: Callable[[], float],
    ) -> None:
        self.metrics = gauges
        self.usage = usage
        self.clock = clock

    def finish(self, call: calls.Call) -> None:
        key, req, m = call.key, call.req, self.metrics
        took = self.clock() - call.t0
        outcome = "ok" if call.error is None else ("cut" if call.error == "cut" else "error")
        backend = call.backend or "none"
        m.child(m.requests, key.name, req.model, backend, outcome).inc()
        team = key.spec.team or ""
        if call.prompt_tokens:
            m.child(m.prompt_tokens, key.name, team, req.model).inc(call.prompt_tokens)
        if call.completion_tokens:
            m.child(m.completion_tokens, key.name, team, req.model).inc(call.completion_tokens)
        if call.error is not None:
            m.child(m.errors, key.name, call.error).inc()
        if call.ttfb is not None:
            m.child(m.ttft, req.model).observe(call.ttfb)
        m.child(m.duration, req.model).observe(took)
        if access.isEnabledFor(logging.INFO):
            if call.started:
                status = call.status
            else:
                status = call.last_error.status if call.last_error is not None else 200
            write_access(
                {
                    "key": key.name,
                    "team": key.spec.team,
                    "endpoint": call.api or call.endpoint,
                    "model": req.model,
                    "stream": req.stream,
                    "status": status,
                    "outcome": outcome,
                    "error": call.error,
                    "backend": backend,
                    "served_by": call.served_by,
                    "attempts": len(call.tried),
                    "ttfb_ms": None if call.ttfb is None else round(call.ttfb * 1000, 1),
                    "duration_ms": round(took * 1000, 1),
                    "prompt_tokens": call.prompt_tokens,
                    "completion_tokens": call.completion_tokens,
                }
            )
        self.record(
            key,
            call.plan.namespace,
            req.model,
            backend,
            call.external,
            prompt=call.prompt_tokens,
            completion=call.completion_tokens,
            error=call.error,
            served=call.served,
        )

    def refused(self, path: str, status: int, code: str | None, key: str | None = None) -> None:
        """The access line of a request refused before it became a call (401, 404, 413, 429)."""
        write_access({"key": key, "path": path, "status": status, "error": code})

    def record(
        self,
        key: keys.ApiKey,
        namespace: str | None,
        model: str,
        backend: str,
        external: bool,
        *,
        prompt: int = 0,
        completion: int = 0,
        error: str | None = None,
        rate_limited: bool = False,
        served: str | None = None,
    ) -> None:
        if self.usage is None:
            return
        self.usage.record(
            usage_mod.Use(
                key=key.name,
                owner=key.spec.owner,
                team=key.spec.team,
                namespace=namespace,
                model=model,
                backend=backend or "none",
                external=external,
                prompt_tokens=prompt,
                completion_tokens=completion,
                error=error,
                rate_limited=rate_limited,
                served=served,
            )
        )
