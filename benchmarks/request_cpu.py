"""CPU per request on both hops, against the floor proxy over the same backend (issue 27).

Whole answers of one token (`max_tokens: 1`, not streamed): the shape of embedding, rerank and
classification traffic, where a proxy's fixed cost per request is all its cost. Each hop is set
beside a floor proxy (`benchmarks/floor_proxy.py`: the same uvicorn + httptools + uvloop stack,
bytes forwarded unparsed) over the same kind of backend, in the same interleaved rounds:
- the gateway hop: client -> gateway -> agent against client -> floor proxy -> agent (the same
  agent and paced slot);
- the agent hop: client -> agent -> paced slot against client -> floor proxy -> a paced source of
  its own (`benchmarks/paced_server.py` started here, the same program the slot runs), and that
  source answered directly: the latency baseline of the agent's added time to the answer.

CPU is each process's own CPU clock over the requests sent to it (all threads, its idle work
included); each row also gives the ratio of every round (lowest, highest, median: the spread of
one run) and both sides net of each process's idle work (its CPU per second in the bench's quiet
window times the time its rounds took). Latency is the client's, one request at a time. Run by
`benchmarks.gateway_bench` (also in `--cpu-only`).

May import: the standard library, httpx, benchmarks.gateway_bench's helpers (passed in).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

BODY_TEXT = "Classify this sentence as positive or negative: the swap was seamless."


@dataclass
class Hop:
    """One way to a backend: a name, its URL, the `model` to ask for and the process to clock."""

    name: str
    base: str
    model: str
    client: httpx.AsyncClient
    pid: int | None  # the proxy whose CPU is measured (None: the backend itself, not clocked)


@dataclass
class Tally:
    cpu_s: float = 0.0
    requests: int = 0
    latency: list[float] = field(default_factory=list)
    per_round: list[float] = field(default_factory=list)  # CPU per request of each round, s
    wall_s: float = 0.0  # time its rounds took

    def net_ms(self, idle_rate: float) -> float:
        """CPU per request less the process's idle work over the same time (`idle_rate`: CPU
        seconds per second with no request: probes, polls, watches, timers)."""
        return max(0.0, self.cpu_s - idle_rate * self.wall_s) / max(1, self.requests) * 1000

    def per_request_ms(self) -> float:
        return self.cpu_s / max(1, self.requests) * 1000

    def p50_ms(self) -> float:
        return statistics.median(self.latency) * 1000 if self.latency else float("nan")


async def one(hop: Hop) -> float:
    body: dict[str, Any] = {"model": hop.model, "max_tokens": 1}
    body["messages"] = [{"role": "user", "content": BODY_TEXT}]
    t0 = time.perf_counter()
    r = await hop.client.post(hop.base + "/v1/chat/completions", json=body)
    await r.aread()
    took = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"{hop.name}: {r.status_code} {r.text[:200]}")
    return took


async def rounds(
    hops: list[Hop], cpu: Callable[[int], float], *, requests: int, rounds: int
) -> dict[str, Tally]:
    """`requests` one-token whole answers per hop per round, one at a time, the order rotated
    every round; each proxy's CPU over its own requests."""
    out = {hop.name: Tally() for hop in hops}
    for hop in hops:  # warm: connections, caches, the first request's imports
        for _ in range(20):
            await one(hop)
    for i in range(rounds):
        for hop in hops[i % len(hops) :] + hops[: i % len(hops)]:
            tally = out[hop.name]
            c0 = cpu(hop.pid) if hop.pid is not None else 0.0
            w0 = time.perf_counter()
            for _ in range(requests):
                tally.latency.append(await one(hop))
            tally.wall_s += time.perf_counter() - w0
            if hop.pid is not None:
                used = cpu(hop.pid) - c0
                tally.cpu_s += used
                tally.per_round.append(used / requests)
            tally.requests += requests
    return out


def spread(hop: Tally, floor: Tally) -> str:
    """The ratio of each round (both measured in it), lowest to highest: how far one run of
    this bench may land from the pooled ratio on a busy 2-core box."""
    ratios = [a / f for a, f in zip(hop.per_round, floor.per_round, strict=True) if f > 0]
    if not ratios:
        return "no rounds"
    return f"rounds {min(ratios):.2f}-{max(ratios):.2f}x, median {statistics.median(ratios):.2f}x"


def net(hop: Tally, floor: Tally, hop_idle: float, floor_idle: float) -> str:
    """Both sides' CPU per request less each process's idle work over its rounds (`*_idle`: CPU
    seconds per second with no request): the cost a request adds (the agent and the gateway have
    fixed work per second that a floor proxy has not: probes answered, the operator's polls,
    backend health watches)."""
    a, f = hop.net_ms(hop_idle), floor.net_ms(floor_idle)
    return f"net of idle work {a:.3f} / {f:.3f} ms = {a / max(1e-9, f):.2f}x"


def rows(t: dict[str, Tally], idle: dict[str, float]) -> list[str]:
    """The table rows: CPU per request of each hop beside its floor (with the per-round spread,
    and net of each process's idle work: `idle`, CPU seconds per second by hop name), and the
    added latency."""
    gw, gw_floor = t["gateway"], t["gateway_floor"]
    agent, agent_floor, source = t["agent"], t["agent_floor"], t["source"]
    n = gw.requests
    return [
        f"| CPU per request, one-token whole answers ({n} per path, 1 at a time): the gateway "
        f"hop | gateway process: {gw.per_request_ms():.3f} ms | floor proxy over the same "
        f"agent: {gw_floor.per_request_ms():.3f} ms | gateway / floor "
        f"{gw.per_request_ms() / max(1e-9, gw_floor.per_request_ms()):.2f}x (goal <= 1.3x; "
        f"{spread(gw, gw_floor)}; {net(gw, gw_floor, idle['gateway'], idle['gateway_floor'])}) |",
        f"| CPU per request, one-token whole answers ({n} per path): the agent hop | agent "
        f"process: {agent.per_request_ms():.3f} ms | floor proxy over the same paced source: "
        f"{agent_floor.per_request_ms():.3f} ms | agent / floor "
        f"{agent.per_request_ms() / max(1e-9, agent_floor.per_request_ms()):.2f}x "
        f"(goal <= 1.3x; {spread(agent, agent_floor)}; "
        f"{net(agent, agent_floor, idle['agent'], idle['agent_floor'])}) |",
        f"| time to the whole answer p50 (one token) | source directly {source.p50_ms():.2f} ms; "
        f"via the agent {agent.p50_ms():.2f} ms (+{agent.p50_ms() - source.p50_ms():.2f} ms); "
        f"via the floor proxy {agent_floor.p50_ms():.2f} ms "
        f"(+{agent_floor.p50_ms() - source.p50_ms():.2f} ms) | via the gateway "
        f"{gw.p50_ms():.2f} ms (+{gw.p50_ms() - agent.p50_ms():.2f} ms over the agent) | via "
        f"the floor proxy over the agent {gw_floor.p50_ms():.2f} ms "
        f"(+{gw_floor.p50_ms() - agent.p50_ms():.2f} ms) |",
    ]
