"""Gateway benchmark: gateway -> agent against the agent directly, in the same run; prefix
affinity; failover.

    python -m benchmarks.gateway_bench [--rounds N] [--out docs/benchmarks.md] [--cpu-only]

Starts the loopback control plane, two agents (their data planes accept only the fleet
credential), the operator and `mlxfleet-gateway` as their own ServiceAccounts, with a 1-replica
ModelDeployment `bench` (on n1), the paced source `paced` (on n1) and a 2-replica `pair`, then
measures, alternating the order every round:
- time to first token (first `data: {` event), p50/p99, one stream at a time: the gateway against
  the agent's data plane it forwards to (same agent, same backend), and the floor proxy;
- the KV budget's refusal (400 `context_length_exceeded` of a ~200k-token prompt): at the agent
  and through the gateway;
- streamed tokens/s (token events per second, summed) at 1 and 8 concurrent streams: direct,
  through the gateway, through the floor proxy and direct again, in rotated back-to-back rounds;
  the goal's figure is the median of the paired ratios gateway / direct (the model's speed on
  this shared box drifts between rounds, neighbouring rounds less), with quartiles, beside the
  floor proxy's and the A/A control's (direct again / direct: the measurement's own spread);
- CPU per streamed event of the gateway process and of the agent process, from each process's
  own CPU clock (nanoseconds; all its threads, background work included) over long streams, one
  event per read, and of the floor proxy in the same rounds; idle CPU of both processes is
  measured and reported beside it (not subtracted). Twice: over a paced source
  (`benchmarks/paced_server.py` as a `command` engine slot `paced` on n1: one token event every
  1 ms, no decoding, so the figure is the proxies' own cost: the goal's measurement), and over
  the tiny model (tokens paced by decoding on the same 2 cores);
- CPU per request on both hops (`benchmarks/request_cpu.py`): one-token whole answers through
  the gateway against the floor proxy over the same agent, and through the agent against a floor
  proxy over a paced source of its own, with the time to the whole answer of each path;
- prefix affinity: 12 conversations with long system prompts over 2 replicas, with affinity and
  without (a second gateway with `--no-affinity`), each with its own prompts: TTFT and the share
  of prompt tokens mlx-lm served from its prompt cache (`usage.prompt_tokens_details`);
- failover under 14 openai clients on `pair`: SIGKILL, then SIGSTOP, of one agent: time until no
  new request goes to it, failed requests (whole answers, streams before their first byte) and
  streams cut mid-flight.
Prints a Markdown section and replaces the "Gateway" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
from tests.e2e import gwfleet
from tests.support import gateway as gws

from benchmarks import request_cpu
from benchmarks.agent_bench import PROMPT, pct
from mlxfleet_agent.dev import devmodels
from mlxfleet_operator.dev import controlplane, processes

SECTION = "## Gateway"
PACED = "paced"  # the deployment served by benchmarks/paced_server.py
CONVERSATIONS = 12
WORDS = ("fleet", "mac", "swap", "token", "cache", "model", "route", "agent", "queue", "node")


@dataclass
class Side:
    name: str
    base: str
    model: str
    client: httpx.AsyncClient
    pid: int


@dataclass
class Stream:
    ttft: float
    events: int
    seconds: float
    cached: int = 0
    prompt: int = 0
    ok: bool = True


def _events(buffer: bytes, out: Stream) -> bytes:
    """Count the whole SSE events in `buffer` (token events; the usage event is read, not
    counted); return the unfinished rest."""
    *whole, rest = buffer.split(b"\n\n")
    for raw in whole:
        # the floor proxy passes the agent's chunked framing through as body bytes: an event
        # may then start with `\r\n<size>\r\n`
        at = raw.find(b"data: {")
        if at < 0 or (at and raw[:at].strip(b"\r\n0123456789abcdefABCDEF")):
            continue  # [DONE], keep-alive comments
        event = raw[at:]
        if b'"choices": []' in event or b'"choices":[]' in event:
            found = json.loads(event[6:]).get("usage") or {}
            out.prompt = int(found.get("prompt_tokens") or 0)
            out.cached = int((found.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            continue
        out.events += 1
    return rest


async def stream(side: Side, *, max_tokens: int, messages: Any = PROMPT) -> Stream:
    body = {
        "model": side.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    out = Stream(0.0, 0, 0.0)
    pending, tail = b"", b""
    async with side.client.stream("POST", f"{side.base}/v1/chat/completions", json=body) as r:
        async for chunk in r.aiter_raw():
            if not out.ttft and b"data: {" in chunk:
                out.ttft = time.perf_counter() - t0
            pending = _events(pending + chunk, out)
            tail = (tail + chunk)[-64:]
    out.seconds = time.perf_counter() - t0
    out.ok = r.status_code == 200 and b"[DONE]" in tail
    if not out.ok:
        print(f"{side.name} {side.model}: {r.status_code} after {out.events} events: {tail!r}")
    return out


def cpu(pid: int) -> float:
    """CPU seconds the process `pid` has used, all its threads (exited ones too): its POSIX CPU
    clock on Linux (nanoseconds; /proc's user+system times tick in 10 ms), psutil elsewhere."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            return time.clock_gettime(((~pid) << 3) | 2)  # glibc's clock_getcpuclockid(pid)
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


@dataclass
class Compare:
    direct: list[float] = field(default_factory=list)
    gateway: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    again: list[float] = field(default_factory=list)  # direct a second time: the A/A control
    cpu: dict[str, float] = field(default_factory=lambda: {"gateway": 0.0, "agent": 0.0})
    events: dict[str, int] = field(default_factory=lambda: {"gateway": 0, "direct": 0})


async def ttft_rounds(direct: Side, gateway: Side, floor: Side, n: int) -> Compare:
    out = Compare()
    sides = [direct, gateway, floor]
    for i in range(n):
        for side in sides[i % 3 :] + sides[: i % 3]:
            res = await stream(side, max_tokens=4)
            assert res.ok, f"{side.name} stream failed"
            getattr(out, side.name).append(res.ttft)
    return out


REFUSED = "The quick brown fox jumps over the lazy dog. " * 17_000  # ~200k tokens, 765 KB


async def refusal_rounds(direct: Side, gateway: Side, n: int) -> Compare:
    """Seconds to the 400 `context_length_exceeded` of a ~200k-token chat prompt to `bench`
    (contextLength 4096): at the agent, and through the gateway (which passes it through)."""
    out = Compare()
    for i in range(n):
        for side in (direct, gateway) if i % 2 == 0 else (gateway, direct):
            body = json.dumps(
                {
                    "model": side.model,
                    "messages": [{"role": "user", "content": REFUSED}],
                    "max_tokens": 16,
                    "stream": True,
                }
            ).encode()
            t0 = time.perf_counter()
            resp = await side.client.post(
                side.base + "/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
            )
            took = time.perf_counter() - t0
            if resp.status_code != 400 or "context_length_exceeded" not in resp.text:
                raise SystemExit(f"{side.name}: expected context_length_exceeded: {resp.text}")
            getattr(out, side.name).append(took)
    return out


async def throughput(
    direct: Side, gateway: Side, floor: Side, *, streams: int, rounds: int
) -> Compare:
    """Tokens/s direct, through the gateway, through the floor proxy and direct again (the A/A
    control: how far two direct rounds in a row differ) in `rounds` back-to-back quadruples
    (which goes first rotates), so each quadruple sees about the same model speed."""
    out = Compare()
    sides = [direct, gateway, floor, replace(direct, name="again")]
    for i in range(rounds):
        for side in sides[i % 4 :] + sides[: i % 4]:
            t0 = time.perf_counter()
            results = await asyncio.gather(*(stream(side, max_tokens=200) for _ in range(streams)))
            wall = time.perf_counter() - t0
            assert all(r.ok for r in results), f"{side.name} stream failed"
            events = sum(r.events for r in results)
            getattr(out, side.name).append(events / wall)
            out.events[side.name] = out.events.get(side.name, 0) + events
    return out


async def cpu_rounds(
    gateway: Side, floor: Side, agent_pid: int, *, streams: int, tokens: int, rounds: int
) -> dict[str, float]:
    """CPU seconds of the gateway, the floor proxy and the agent process over long paced streams
    (start-up excluded: the processes are warm; each request's own fixed costs included), and
    the token events the clients received (the usage event and [DONE] are not counted)."""
    out = dict.fromkeys(("gateway", "agent", "events", "seconds", "floor", "floor_events"), 0.0)
    for i in range(rounds):
        for side in (gateway, floor) if i % 2 == 0 else (floor, gateway):
            p0, a0, t0 = cpu(side.pid), cpu(agent_pid), time.perf_counter()
            results = await asyncio.gather(
                *(stream(side, max_tokens=tokens) for _ in range(streams))
            )
            assert all(r.ok for r in results)
            events = sum(r.events for r in results)
            if side is floor:
                out["floor"] += cpu(side.pid) - p0
                out["floor_events"] += events
                continue
            out["seconds"] += time.perf_counter() - t0
            out["gateway"] += cpu(side.pid) - p0
            out["agent"] += cpu(agent_pid) - a0
            out["events"] += events
    return out


def system_prompt(seed: int) -> str:
    words = [WORDS[(seed * 7 + i * (seed + 3)) % len(WORDS)] for i in range(420)]
    return f"Conversation {seed}. " + " ".join(words)


async def affinity(side: Side, *, seeds: range, rounds: int) -> list[Stream]:
    out = []
    for r in range(rounds):
        for seed in seeds:
            messages = [
                {"role": "system", "content": system_prompt(seed)},
                {"role": "user", "content": f"question {r}"},
            ]
            res = await stream(side, max_tokens=1, messages=messages)
            assert res.ok
            if r:  # the first round fills the caches
                out.append(res)
    return out


def failover(fl: gwfleet.Fleet, gw: gws.Gateway, victim: str, *, freeze: bool) -> dict[str, Any]:
    load = gwfleet.GatewayLoad(gw.base_url, "anonymous", "pair")
    with load:
        load.wait_count(40, after=0.0)
        at = time.monotonic()
        if freeze:
            fl.nodes[victim].freeze()
        else:
            fl.nodes[victim].kill()
        time.sleep(8)
    recs = load.snapshot()
    after = [r for r in recs if r.start >= at]
    figures = {
        "requests": len(recs),
        "after": len(after),
        "route_around_s": load.last_touch(f"@{victim}", after=at),
        "moved": sum(
            r.start < at < r.end and r.ok and f"@{victim}" in "".join(r.tried) for r in recs
        ),
        "failed_whole": len(load.failed_whole()),
        "failed_before_start": len(load.failed_before_start()),
        "cut": len(load.cut()),
        # what failed, so a failure the goals forbid can be explained from the run's output
        "errors": sorted(
            {r.error or "no error text" for r in load.failed_whole() + load.failed_before_start()}
        ),
    }
    if freeze:
        fl.nodes[victim].thaw()
    return figures


async def measure(
    args: argparse.Namespace,
    fl: gwfleet.Fleet,
    gw: gws.Gateway,
    plain: gws.Gateway,
    floor_pid: int,
    floor_url: str,
    source: tuple[str, str, int],
) -> dict[str, Any]:
    """`source`: the standalone paced source's URL, and its floor proxy's URL and process id."""
    n1 = fl.nodes[fl.node("n1")]
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    auth = {"Authorization": f"Bearer {gws.node_key(fl.node('n1'))}"}  # n1's own data-plane key
    async with (
        httpx.AsyncClient(timeout=120, limits=limits, trust_env=False, headers=auth) as dc,
        httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as gc,
    ):
        direct = Side("direct", n1.data_url, "bench", dc, n1.proc.pid)  # type: ignore[union-attr]
        gateway = Side("gateway", gw.url, "bench", gc, gw.proc.pid)
        floor = Side("floor", floor_url, "bench", gc, floor_pid)
        for _ in range(3):
            for side in (direct, gateway, floor):
                await stream(side, max_tokens=4)
        agent_pid = n1.proc.pid  # type: ignore[union-attr]
        out: dict[str, Any] = {}
        # the proxies' own cost: a source that decodes nothing, one event every 1 ms
        paced_gw, paced_floor = replace(gateway, model=PACED), replace(floor, model=PACED)
        for side in (paced_gw, paced_floor):
            await stream(side, max_tokens=4)
        out["paced1"] = await cpu_rounds(
            paced_gw, paced_floor, agent_pid, streams=1, tokens=2000, rounds=args.rounds
        )
        out["paced8"] = await cpu_rounds(
            paced_gw, paced_floor, agent_pid, streams=8, tokens=500, rounds=args.rounds
        )
        source_url, source_floor_url, source_floor_pid = source
        quiet = (gw.proc.pid, agent_pid, floor_pid, source_floor_pid)
        idle0 = [cpu(pid) for pid in quiet]
        await asyncio.sleep(10.0)
        out["idle"], out["agent_idle"], out["floor_idle"], out["source_floor_idle"] = (
            (cpu(pid) - before) / 10.0 for pid, before in zip(quiet, idle0, strict=True)
        )
        hops = [
            request_cpu.Hop("gateway", gw.url, PACED, gc, gw.proc.pid),
            request_cpu.Hop("gateway_floor", floor_url, PACED, gc, floor_pid),
            request_cpu.Hop("agent", n1.data_url, PACED, dc, agent_pid),
            request_cpu.Hop("agent_floor", source_floor_url, PACED, gc, source_floor_pid),
            request_cpu.Hop("source", source_url, PACED, gc, None),
        ]
        out["whole"] = await request_cpu.rounds(hops, cpu, requests=200, rounds=args.rounds)
        if args.cpu_only:
            return out
        out["ttft"] = await ttft_rounds(direct, gateway, floor, args.rounds * 25)
        out["refused"] = await refusal_rounds(direct, gateway, args.rounds * 5)
        out["tps1"] = await throughput(direct, gateway, floor, streams=1, rounds=args.rounds * 5)
        # 8 streams on 2 cores swing more from round to round: more rounds for the median
        out["tps8"] = await throughput(direct, gateway, floor, streams=8, rounds=args.rounds * 6)
        out["cpu1"] = await cpu_rounds(
            gateway, floor, agent_pid, streams=1, tokens=1000, rounds=args.rounds
        )
        out["cpu8"] = await cpu_rounds(
            gateway, floor, agent_pid, streams=8, tokens=250, rounds=args.rounds
        )
        aff = await affinity(
            Side("gateway", gw.url, "pair", gc, gw.proc.pid), seeds=range(CONVERSATIONS), rounds=4
        )
        no_aff = await affinity(
            Side("gateway", plain.url, "pair", gc, plain.proc.pid),
            seeds=range(100, 100 + CONVERSATIONS),
            rounds=4,
        )
        out["affinity"], out["no_affinity"] = aff, no_aff
    return out


def cpu_rows(results: dict[str, Any]) -> list[str]:
    """The CPU-per-event rows: over the paced source (the goal's figure: the proxies' own cost)
    and over the model (what they cost while decoding shares the cores)."""
    rows = []
    phases = [(f"paced{n}", f"paced source (1 event/ms), {n} concurrent") for n in (1, 8)]
    phases += [(f"cpu{n}", f"tiny model, {n} concurrent") for n in (1, 8)]
    for key, label in phases:
        if key not in results:
            continue
        c = results[key]
        per = c["gateway"] / max(1.0, c["events"]) * 1e6
        agent = c["agent"] / max(1.0, c["events"]) * 1e6
        busy = c["gateway"] / max(1e-9, c["seconds"]) * 100
        floor = c["floor"] / max(1.0, c["floor_events"]) * 1e6
        # what the processes' idle work (probes, polls, watches, timers) adds per event here
        span = c["seconds"] / max(1.0, c["events"]) * 1e6
        g_idle, a_idle = results["idle"] * span, results["agent_idle"] * span
        rows.append(
            f"| CPU per streamed event, {label} ({c['events']:.0f} events) | agent "
            f"process: {agent:.1f} us (idle work {a_idle:.1f} us of it) | gateway process: "
            f"{per:.1f} us (idle work {g_idle:.1f} us of it) | floor proxy {floor:.1f} us "
            f"(gateway / floor {per / max(1e-9, floor):.2f}x); gateway busy {busy:.1f}% of one "
            "core |"
        )
    if "whole" in results:
        idle = {  # CPU seconds per second of each process with no request (the quiet window)
            "gateway": results["idle"],
            "agent": results["agent_idle"],
            "gateway_floor": results["floor_idle"],
            "agent_floor": results["source_floor_idle"],
        }
        rows += request_cpu.rows(results["whole"], idle)
    return rows


def paced_engine() -> dict[str, Any]:
    """`spec.engine` of the paced source: the generic command engine running
    `benchmarks/paced_server.py` (the agent allow-lists this interpreter)."""
    script = str(Path(__file__).with_name("paced_server.py"))
    return {
        "name": "command",
        "command": {
            "argv": [sys.executable, script, "--host", "{host}", "--port", "{port}"],
            "capabilities": ["chat", "completions"],
            "memoryBytes": 64 << 20,
        },
    }


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


def quartiles(base: list[float], other: list[float]) -> list[float]:
    """Quartiles of the paired ratios other / base (the middle one is their median)."""
    return statistics.quantiles([y / x for x, y in zip(base, other, strict=True)], n=4)


def render(results: dict[str, Any]) -> str:
    t = results["ttft"]
    paired = statistics.median(g - d for d, g in zip(t.direct, t.gateway, strict=True))
    floor_paired = statistics.median(f - d for d, f in zip(t.direct, t.floor, strict=True))
    lines = [
        SECTION,
        "",
        f"Measured {results['when']} on {results['host']} by `python -m benchmarks.gateway_bench` "
        "(`make bench`); tiny dev llama (hidden 64, 2 layers, mlx[cpu]); real control plane, "
        "operator, agents and `mlxfleet-gateway` (uvicorn + httptools + uvloop, pooled "
        "keep-alive HTTP/1.1 to the agents); the gateway against the agent data plane it forwards "
        "to (same agent, same backend), interleaved in the same run. Everything shares the 2 "
        "cores: every microsecond the gateway spends per event is taken from decoding. The floor "
        "proxy (`benchmarks/floor_proxy.py`: the same uvicorn + httptools + uvloop stack, a raw "
        "asyncio stream per request, bytes forwarded unparsed) runs in the same rounds: it is "
        "what this box charges any Python hop. The paced source (`benchmarks/paced_server.py`, "
        "run by the agent as a `command` engine slot: one token event every 1 ms, nothing "
        "decoded) gives the proxies' own CPU per event, the goal's figure; the tiny-model rows "
        "show the same while decoding shares the cores.",
        "",
        "| metric | agent direct | via gateway | gateway - direct / ratio |",
        "| --- | --- | --- | --- |",
        f"| TTFT p50 (1 stream, n={len(t.direct)}) | {ms(pct(t.direct, 50))} | "
        f"{ms(pct(t.gateway, 50))} | {(pct(t.gateway, 50) - pct(t.direct, 50)) * 1000:+.2f} ms "
        f"(paired median {paired * 1000:+.2f} ms) |",
        f"| TTFT p99 (1 stream) | {ms(pct(t.direct, 99))} | {ms(pct(t.gateway, 99))} | "
        f"{(pct(t.gateway, 99) - pct(t.direct, 99)) * 1000:+.2f} ms |",
        f"| TTFT p50 through the floor proxy (same rounds) | {ms(pct(t.direct, 50))} | "
        f"{ms(pct(t.floor, 50))} | {(pct(t.floor, 50) - pct(t.direct, 50)) * 1000:+.2f} ms "
        f"(paired median {floor_paired * 1000:+.2f} ms) |",
    ]
    r = results.get("refused")
    if r is not None:
        lines.append(
            f"| 400 `context_length_exceeded`, ~200k-token prompt (n={len(r.direct)}; the agent "
            f"refuses it, the gateway passes it through) | p50 {ms(pct(r.direct, 50))}, p99 "
            f"{ms(pct(r.direct, 99))} | p50 {ms(pct(r.gateway, 50))}, p99 "
            f"{ms(pct(r.gateway, 99))} | "
            f"{(pct(r.gateway, 50) - pct(r.direct, 50)) * 1000:+.2f} ms (p50) |"
        )
    for n in (1, 8):
        c = results[f"tps{n}"]
        d, g = statistics.median(c.direct), statistics.median(c.gateway)
        q1, pr, q3 = quartiles(c.direct, c.gateway)
        fr, aa = quartiles(c.direct, c.floor)[1], quartiles(c.direct, c.again)
        lines.append(
            f"| streamed tokens/s, {n} concurrent ({len(c.direct)} rotated rounds of each) | "
            f"{d:.0f} | {g:.0f} | paired median {pr * 100:.1f}% (quartiles {q1 * 100:.1f}-"
            f"{q3 * 100:.1f}%; ratio of medians {g / d * 100:.1f}%); same rounds: floor proxy "
            f"{fr * 100:.1f}%, direct again (A/A) {aa[1] * 100:.1f}% (quartiles "
            f"{aa[0] * 100:.1f}-{aa[2] * 100:.1f}%) |"
        )
    lines += cpu_rows(results)
    lines.append(
        f"| CPU while idle (agent: control API polls, 2 gateways' probes; gateway: probes of 2 "
        f"agents every 0.2 s, watches) | agent {results['agent_idle'] * 100:.2f}% of one core | "
        f"gateway {results['idle'] * 100:.2f}% of one core | included in the figures above |"
    )
    a, b = results["affinity"], results["no_affinity"]

    def cached(xs: list[Stream]) -> float:
        return sum(x.cached for x in xs) / max(1, sum(x.prompt for x in xs))

    lines += [
        "",
        f"Prefix affinity: {CONVERSATIONS} conversations (a ~3,000-character system prompt each, a "
        "new question every round) sent one at a time to the 2-replica `pair` through a gateway "
        "with affinity and one with `--no-affinity` (each with its own conversations, rounds 2-4 "
        "counted; mlx-lm keeps 10 prompt caches per replica):",
        "",
        "| | TTFT p50 | TTFT mean | prompt tokens served from mlx-lm's prompt cache |",
        "| --- | --- | --- | --- |",
        f"| affinity (default) | {ms(pct([x.ttft for x in a], 50))} | "
        f"{ms(statistics.mean(x.ttft for x in a))} | {cached(a):.0%} |",
        f"| `--no-affinity` (least outstanding only) | {ms(pct([x.ttft for x in b], 50))} | "
        f"{ms(statistics.mean(x.ttft for x in b))} | {cached(b):.0%} |",
        "",
        "Failover under load (14 openai clients: 8 streaming, 6 not, `max_tokens` 24, on the "
        "2-replica `pair`); route-around = the last request *started* after the event that was "
        "sent to (or tried on) the victim; moved = requests in flight on the victim that were "
        "answered by the other replica:",
        "",
        "| event | route-around | requests after (8 s) | moved | failed whole answers | "
        "failed streams before first byte | streams cut mid-flight |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, f in (("SIGKILL", results["kill"]), ("SIGSTOP", results["stop"])):
        lines.append(
            f"| {name} of an agent | {f['route_around_s'] * 1000:.0f} ms | {f['after']} | "
            f"{f['moved']} | {f['failed_whole']} | {f['failed_before_start']} | {f['cut']} |"
        )
    for name, f in (("SIGKILL", results["kill"]), ("SIGSTOP", results["stop"])):
        lines += [f"- {name}: a request failed with `{e}`" for e in f["errors"]]
    lines += [
        "",
        "A killed agent refuses connections: the first attempt that meets it ejects it and is "
        "retried on the other replica. A frozen agent's kernel still accepts connections, so the "
        "gateway probes every agent's `/healthz` every 0.2 s with a 0.5 s deadline; a missed "
        "probe ejects it, the requests still waiting for their first byte there move after "
        "`--move-after-s` (1 s) of silence, and streams already flowing from it are cut after "
        "`--stream-cut-after-s` (10 s by default, 3 s here). Least outstanding requests also "
        "steers new requests away from an agent whose "
        "requests stop finishing, which is why few new requests reach it even before the probe.",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    """Replace the "## Gateway" section of `path` (up to the next "## "), or append it."""
    old = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if SECTION in old:
        head, rest = old.split(SECTION, 1)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1 :] if nxt >= 0 else ""
        new = head + text + ("\n" + tail if tail else "")
    else:
        new = old.rstrip() + "\n\n" + text
    path.write_text(new)


def _module(name: str, *args: str) -> subprocess.Popen[bytes]:
    """`python -m name args...` with this interpreter."""
    return subprocess.Popen([sys.executable, "-m", name, *args])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway_bench")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (x10 for TTFT)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="only the CPU-per-event phases (printed, not written): for work on the hot path",
    )
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    models = root / "models"
    model = devmodels.generate_model(models / "a", seed=1)
    allow = ("--allow-command", sys.executable)
    with (
        controlplane.running(root / "cp") as cluster,
        gwfleet.fleet(cluster, root, models, agent_flags=allow) as fl,
    ):
        n1 = fl.node("n1")
        fl.deploy(
            PACED,
            model,
            replicas=1,
            maxConcurrency=8,
            contextLength=4096,
            placement={"nodes": [n1]},
            engine=paced_engine(),
        )
        fl.deploy(
            "bench",
            model,
            replicas=1,
            maxConcurrency=8,
            contextLength=4096,
            placement={"nodes": [n1]},
        )
        fl.deploy("pair", model, replicas=2, maxConcurrency=8, contextLength=4096)
        fl.wait_ready("bench")
        fl.wait_ready(PACED)
        fl.wait_ready("pair", replicas=2)
        kubeconfig = cluster.gateway_kubeconfig
        assert kubeconfig is not None
        fl.gateway = gws.start_gateway(
            kubeconfig, root / "gw", anonymous=True, extra=["--stream-cut-after-s", "3"]
        )
        plain = gws.start_gateway(
            kubeconfig, root / "gw-plain", anonymous=True, extra=["--no-affinity"]
        )
        port, source_port, source_floor_port = processes.free_ports(3)
        n1_data = fl.nodes[n1].data_url
        source_url = f"http://127.0.0.1:{source_port}"
        node_key = gws.node_key(n1)
        helpers = [
            _module("benchmarks.floor_proxy", str(port), n1_data, node_key),
            # the agent hop's baseline: the paced source on its own, and a floor proxy over it
            _module("benchmarks.paced_server", "--port", str(source_port), "--model", PACED),
            _module("benchmarks.floor_proxy", str(source_floor_port), source_url, "none"),
        ]
        floor, _, source_floor = helpers
        for each in (port, source_port, source_floor_port):
            gwfleet.wait_for("the helpers listen", functools.partial(_listening, each), timeout=60)
        try:
            results = asyncio.run(
                measure(
                    args,
                    fl,
                    fl.gateway,
                    plain,
                    floor.pid,
                    f"http://127.0.0.1:{port}",
                    (source_url, f"http://127.0.0.1:{source_floor_port}", source_floor.pid),
                )
            )
        finally:
            plain.stop()
            for proc in helpers:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
        if not args.cpu_only:
            victim = fl.node("n2")
            results["kill"] = failover(fl, fl.gateway, victim, freeze=False)
            fl.nodes[victim].start()
            fl.wait_ready("pair", replicas=2)
            time.sleep(3)
            results["stop"] = failover(fl, fl.gateway, victim, freeze=True)
    shutil.rmtree(root, ignore_errors=True)  # kept after a failure: its logs explain it
    if args.cpu_only:
        print("\n".join(cpu_rows(results)))
        return 0
    results["when"] = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    results["host"] = (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f} at the end)"
    )
    text = render(results)
    print(text)
    with contextlib.suppress(OSError):
        write_section(args.out, text)
        print(f"(written to {args.out})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
