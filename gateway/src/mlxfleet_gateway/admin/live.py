"""Live figures per model name for the console: completion tokens per second, requests per
second and mean time to first token, over the last few seconds of this gateway's traffic.

Read from the gateway's own metrics (`completion_tokens_total`, `time_to_first_byte_seconds`,
`requests_total`) every `every_s` by a task of its own, the differences between the oldest and
newest of the samples kept: nothing is added to a request. A name is the one clients ask for (a
deployment's served name or a route's).
May import: the standard library, metrics, admin.deploymentview (`Live`).
Called by: console (server starts it), admin.api.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from mlxfleet_gateway import metrics
from mlxfleet_gateway.admin import deploymentview

KEEP = 4  # samples: the window is (KEEP - 1) x every_s


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    tokens: dict[str, float]
    requests: dict[str, float]
    ttft_sum: dict[str, float]
    ttft_count: dict[str, float]


def sample(gauges: metrics.GatewayMetrics, at: float) -> Sample:
    tokens: dict[str, float] = {}
    requests: dict[str, float] = {}
    ttft_sum: dict[str, float] = {}
    ttft_count: dict[str, float] = {}
    for fam in gauges.completion_tokens.collect():
        for s in fam.samples:
            if s.name.endswith("_total"):
                m = s.labels["model"]
                tokens[m] = tokens.get(m, 0.0) + s.value
    for fam in gauges.requests.collect():
        for s in fam.samples:
            if s.name.endswith("_total"):
                m = s.labels["model"]
                requests[m] = requests.get(m, 0.0) + s.value
    for fam in gauges.ttft.collect():
        for s in fam.samples:
            if s.name.endswith("_sum"):
                ttft_sum[s.labels["model"]] = s.value
            elif s.name.endswith("_count"):
                ttft_count[s.labels["model"]] = s.value
    return Sample(at, tokens, requests, ttft_sum, ttft_count)


def rates(first: Sample, last: Sample) -> dict[str, deploymentview.Live]:
    span = last.at - first.at
    if span <= 0:
        return {}
    out = {}
    for m in set(last.tokens) | set(last.requests) | set(last.ttft_count):
        n = last.ttft_count.get(m, 0.0) - first.ttft_count.get(m, 0.0)
        ttft = (last.ttft_sum.get(m, 0.0) - first.ttft_sum.get(m, 0.0)) / n if n > 0 else None
        out[m] = deploymentview.Live(
            tokens_per_s=(last.tokens.get(m, 0.0) - first.tokens.get(m, 0.0)) / span,
            ttft_ms=None if ttft is None else ttft * 1000,
            requests_per_s=(last.requests.get(m, 0.0) - first.requests.get(m, 0.0)) / span,
        )
    return out


class LiveRates:
    def __init__(
        self,
        gauges: metrics.GatewayMetrics,
        *,
        every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gauges = gauges
        self.every_s = every_s
        self.clock = clock
        self._samples: collections.deque[Sample] = collections.deque(maxlen=KEEP)
        self.now: dict[str, deploymentview.Live] = {}
        self._task: asyncio.Task[None] | None = None

    def tick(self) -> None:
        self._samples.append(sample(self.gauges, self.clock()))
        if len(self._samples) >= 2:
            self.now = rates(self._samples[0], self._samples[-1])

    async def _run(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(self.every_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
