"""Agent data plane vs mlx_lm.server directly (same model, same run, interleaved); swap timelines.

    python -m benchmarks.agent_bench [--rounds N] [--out docs/benchmarks.md]

Starts a real `mlxfleet-agent serve` on loopback with one slot (a tiny generated model), then
measures, alternating the order every round, the agent's data port against the very backend the
agent proxies to (so model, process and batch settings are identical):
- time to first token (first `data: {` event of a stream), p50 and p99, one stream at a time;
- streamed tokens/s (SSE data events), aggregate, at 1 and 8 concurrent streams;
- the KV budget's refusal (400 `context_length_exceeded`): its latency at the agent for a
  ~200k-token chat prompt (refused on its size, nothing tokenised) and for one just over the
  slot's contextLength (tokenised with the model's tokenizer and chat template);
- then a surge swap and a hold swap under a light streaming load: each phase's duration from the
  swap record, and the time to first token clients saw during the swap vs before it.
Prints a Markdown table and replaces the "Agent data plane" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from mlxfleet_agent.dev import devmodels

SECTION = "## Agent data plane"
NOTE = (
    "Reading the numbers: this box has 2 cores shared with other work (see the load average), "
    "so single runs move by +-10% either way; the paired medians (agent round vs the direct "
    "round next to it) and the agent's own CPU per event are the steadier figures. With the "
    "backend pinned, the agent and the benchmark client share the one remaining core, so at 8 "
    "streams the consumer side (client + agent on a busy core) is what saturates; on a Mac the "
    "GPU decodes and the CPU cores are free for both. The agent's added work per streamed event "
    "is a socket read, the SSE split for token counting, a `model` rewrite and a socket write."
)

PROMPT = [{"role": "user", "content": "Tell me about a fleet of small computers."}]


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    control: str
    data: str
    token: str

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def start_agent(base: Path, models_root: Path) -> Agent:
    log = (base / "agent.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlxfleet_agent.cli",
            "serve",
            "--state-dir",
            str(base / "state"),
            "--models-dir",
            str(base / "cache"),
            "--allowed-root",
            str(models_root),
            "--control-port",
            "0",
            "--data-port",
            "0",
            "--no-caffeinate",
            "--memory-budget",
            str(10 * 1024**3),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in (base / "agent.log").read_text().splitlines():
            if '"agent ready"' in line:
                ready = json.loads(line)
                token = (base / "state" / "token").read_text().strip()
                return Agent(
                    proc,
                    f"http://127.0.0.1:{ready['control_port']}",
                    f"http://127.0.0.1:{ready['data_port']}",
                    token,
                )
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"agent did not start:\n{(base / 'agent.log').read_text()}")


async def put_and_wait(
    client: httpx.AsyncClient, agent: Agent, spec: dict[str, Any], *, swaps: int
) -> dict[str, Any]:
    resp = await client.put(f"{agent.control}/v1/slots/bench", json=spec, headers=agent.headers())
    resp.raise_for_status()
    while True:
        got = await client.get(f"{agent.control}/v1/slots/bench", headers=agent.headers())
        slot: dict[str, Any] = got.json()
        items = (
            await client.get(f"{agent.control}/v1/slots/bench/swaps", headers=agent.headers())
        ).json()["items"]
        if slot["ready"] and len(items) >= swaps and (not items or items[0]["outcome"]):
            return slot
        await asyncio.sleep(0.05)


@dataclass
class StreamResult:
    ttft: float
    tokens: int
    seconds: float
    start: float = 0.0
    ok: bool = True


async def one_stream(
    client: httpx.AsyncClient, base: str, model: str, *, max_tokens: int
) -> StreamResult:
    body = {"model": model, "messages": PROMPT, "max_tokens": max_tokens, "stream": True}
    t0 = time.perf_counter()
    ttft = 0.0
    tokens = 0
    tail = b""
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as resp:
        async for chunk in resp.aiter_raw():
            n = chunk.count(b"data: {")
            if n and not tokens:
                ttft = time.perf_counter() - t0
            tokens += n
            tail = (tail + chunk)[-32:]
    ok = resp.status_code == 200 and b"[DONE]" in tail
    return StreamResult(ttft, tokens, time.perf_counter() - t0, start=t0, ok=ok)


REFUSED = {
    # ~200k tokens of the dev tokenizer (765 KB): refused on its size before any tokenising
    "200k-token prompt": "The quick brown fox jumps over the lazy dog. " * 17_000,
    # ~8,280 tokens with max_tokens 16 over the slot's 8,192: tokenised, then refused
    "just over contextLength": "The quick brown fox jumps over the lazy dog. " * 690,
}


async def refusal_latency(
    client: httpx.AsyncClient, agent: Agent, *, n: int
) -> dict[str, list[float]]:
    """Seconds from sending a chat completion over the slot's context to its 400, per prompt."""
    out: dict[str, list[float]] = {}
    for name, text in REFUSED.items():
        body = json.dumps(
            {"model": "bench", "messages": [{"role": "user", "content": text}], "max_tokens": 16}
        ).encode()
        took = []
        for _ in range(n):
            t0 = time.perf_counter()
            resp = await client.post(
                f"{agent.data}/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
            )
            took.append(time.perf_counter() - t0)
            if resp.status_code != 400 or "context_length_exceeded" not in resp.text:
                raise SystemExit(f"expected a context_length_exceeded refusal: {resp.text[:300]}")
        out[name] = took
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


@dataclass
class Compare:
    direct: list[float] = field(default_factory=list)
    agent: list[float] = field(default_factory=list)
    agent_cpu_s: float = 0.0  # CPU time of the agent process during its rounds
    agent_events: int = 0


async def ttft_compare(
    client: httpx.AsyncClient, agent: Agent, direct: str, pinned: str, rounds: int
) -> Compare:
    out = Compare()
    for i in range(rounds):
        order = [("direct", direct, pinned), ("agent", agent.data, "bench")]
        for name, base, model in order if i % 2 == 0 else order[::-1]:
            res = await one_stream(client, base, model, max_tokens=4)
            assert res.ok, f"{name} stream failed"
            getattr(out, name).append(res.ttft)
    return out


def _cpu(agent: Agent) -> float:
    import psutil

    times = psutil.Process(agent.proc.pid).cpu_times()
    return float(times.user + times.system)


async def throughput_compare(
    client: httpx.AsyncClient, agent: Agent, direct: str, pinned: str, *, streams: int, rounds: int
) -> Compare:
    out = Compare()
    for i in range(rounds):
        order = [("direct", direct, pinned), ("agent", agent.data, "bench")]
        for name, base, model in order if i % 2 == 0 else order[::-1]:
            cpu0 = _cpu(agent)
            t0 = time.perf_counter()
            results = await asyncio.gather(
                *(one_stream(client, base, model, max_tokens=200) for _ in range(streams))
            )
            wall = time.perf_counter() - t0
            assert all(r.ok for r in results), f"{name} stream failed"
            events = sum(r.tokens for r in results)
            getattr(out, name).append(events / wall)
            if name == "agent":
                out.agent_cpu_s += _cpu(agent) - cpu0
                out.agent_events += events
    return out


async def swap_timeline(
    client: httpx.AsyncClient, agent: Agent, spec: dict[str, Any], *, swaps: int
) -> dict[str, Any]:
    """Run a swap under 4 streaming clients; phase durations + TTFT seen before/during it."""
    stop = asyncio.Event()
    results: list[StreamResult] = []

    async def worker() -> None:
        while not stop.is_set():
            results.append(await one_stream(client, agent.data, "bench", max_tokens=16))

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    await asyncio.sleep(3.0)
    t_put = time.perf_counter()
    await put_and_wait(client, agent, spec, swaps=swaps)
    t_done = time.perf_counter()
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.gather(*workers)
    items = (
        await client.get(f"{agent.control}/v1/slots/bench/swaps", headers=agent.headers())
    ).json()["items"]
    rec = items[0]

    def at(key: str) -> float | None:
        value = rec.get(key)
        return datetime.fromisoformat(value).timestamp() if value else None

    start = at("startedAt") or 0.0
    marks = ["oldDrainedAt", "oldStoppedAt", "newReadyAt", "switchedAt"]
    phases = {key: (None if at(key) is None else (at(key) or 0.0) - start) for key in marks}
    before = [r.ttft for r in results if r.start + r.seconds < t_put]
    during = [r for r in results if r.start < t_done and r.start + r.seconds > t_put]
    return {
        "record": rec,
        "phases": phases,
        "total": (at("finishedAt") or 0) - (start or 0),
        "ttft_before_p50": pct(before, 50),
        "ttft_during_max": max((r.ttft for r in during), default=float("nan")),
        "ttft_during_p50": pct([r.ttft for r in during], 50),
        "requests_during": len(during),
        "failed": sum(not r.ok for r in results),
    }


def pin_cpus(agent: Agent) -> None:
    """Backends on CPU 0, the agent and this client on the others (like a Mac: the GPU decodes)."""
    import psutil

    cpus = sorted(psutil.Process().cpu_affinity() or [])
    if len(cpus) < 2:
        return
    me = psutil.Process()
    for child in psutil.Process(agent.proc.pid).children(recursive=True):
        child.cpu_affinity(cpus[:1])
        for thread in child.threads():
            with contextlib.suppress(psutil.Error, OSError):
                psutil.Process(thread.id).cpu_affinity(cpus[:1])
    psutil.Process(agent.proc.pid).cpu_affinity(cpus[1:])
    me.cpu_affinity(cpus[1:])


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


def sms(x: float) -> str:
    return f"{x * 1000:+.2f} ms"


def render_all(runs: list[dict[str, Any]]) -> str:
    first = runs[0]
    lines = [
        SECTION,
        "",
        f"Measured {first['when']} on {first['host']} by `python -m benchmarks.agent_bench` "
        f"(`make bench`); model: tiny dev llama ({first['model']}); the agent's data plane "
        "against the backend it proxies to (the same mlx_lm.server process), interleaved in the "
        "same run; TTFT = first `data:` event of a stream, tokens/s = SSE data events per second "
        "summed over the concurrent streams.",
        "",
    ]
    for results in runs:
        lines.append(render(results))
    lines += [NOTE, ""]
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    t = results["ttft"]
    title = (
        "Backend pinned to CPU 0, agent and client on the other core (`--pin yes`): the "
        "split a Mac has, where the GPU decodes and the CPU is free for the agent."
        if results["pin"]
        else "Everything sharing all cores (a 2-core Linux box: mlx[cpu] decoding, the agent, "
        "the client and other work compete for CPU, so every microsecond the agent spends "
        "per event is taken from decoding)."
    )
    lines = [
        f"### {'Backend on its own core' if results['pin'] else 'Shared cores'}",
        "",
        title,
        "",
        "| metric | mlx_lm.server direct | via agent | agent - direct / ratio |",
        "| --- | --- | --- | --- |",
        f"| TTFT p50 (1 stream, n={len(t.direct)}) | {ms(pct(t.direct, 50))} | "
        f"{ms(pct(t.agent, 50))} | {sms(pct(t.agent, 50) - pct(t.direct, 50))} "
        f"(paired median {sms(results['paired'])}) |",
        f"| TTFT p99 (1 stream) | {ms(pct(t.direct, 99))} | {ms(pct(t.agent, 99))} | "
        f"{sms(pct(t.agent, 99) - pct(t.direct, 99))} |",
    ]
    for n in (1, 8):
        c = results[f"tps{n}"]
        d, a = statistics.median(c.direct), statistics.median(c.agent)
        paired = statistics.median(y / x for x, y in zip(c.direct, c.agent, strict=True))
        lines.append(
            f"| streamed tokens/s, {n} concurrent (median of {len(c.direct)} rounds) | {d:.0f} | "
            f"{a:.0f} | {a / d * 100:.1f}% (paired median {paired * 100:.1f}%) |"
        )
    for n in (1, 8):
        c = results[f"tps{n}"]
        per_event = c.agent_cpu_s / max(1, c.agent_events) * 1e6
        lines.append(
            f"| agent CPU per streamed event, {n} concurrent | - | {per_event:.0f} us | "
            f"{per_event * 1e-6 * statistics.median(c.agent) * 100:.1f}% of one core |"
        )
    for name, took in results.get("refused", {}).items():
        lines.append(
            f"| 400 `context_length_exceeded`, {name} (n={len(took)}) | - | "
            f"p50 {ms(pct(took, 50))}, p99 {ms(pct(took, 99))} | never reaches the backend |"
        )
    if results["surge"] is None:
        return "\n".join([*lines, ""])
    lines += [
        "",
        "Swap timelines (4 streaming clients during the swap; seconds per phase from the swap "
        "record):",
        "",
        "| swap | A drained | A stopped | B ready | switched | total | TTFT p50 before | "
        "TTFT p50 / max during | requests during | failed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("surge", "hold"):
        s = results[name]
        cells = " | ".join("-" if v is None else f"{v:.2f}s" for v in s["phases"].values())
        lines.append(
            f"| {name} | {cells} | {s['total']:.2f}s | {ms(s['ttft_before_p50'])} | "
            f"{ms(s['ttft_during_p50'])} / {ms(s['ttft_during_max'])} | "
            f"{s['requests_during']} | {s['failed']} (agent: {s['record']['requestsFailed']}) |"
        )
    lines += [
        "",
        "Swap columns are seconds since the swap started (from its SwapRecord). Surge: B loads "
        "beside A, the switch is atomic, A drains and stops. Hold: A drains and stops first, "
        "then B loads; requests that arrive meanwhile wait in the slot's queue, which is the "
        '"max during" TTFT of hold. Failed counts requests the clients saw fail.',
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, text: str, *, section: str = SECTION) -> None:
    """Replace (or append) the `section` heading's part of the benchmarks page with `text`."""
    old = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if section in old:
        head, rest = old.split(section, 1)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1 :] if nxt >= 0 else ""
        new = head + text + ("\n" + tail if tail else "")
    else:
        new = old.rstrip() + "\n\n" + text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


async def run(args: argparse.Namespace, *, pin: bool, swaps: bool) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="agent-bench-"))
    models = base / "models"
    a = devmodels.generate_model(models / "a", seed=1)
    b = devmodels.generate_model(models / "b", seed=2)
    agent = start_agent(base, models)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    try:
        async with httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as client:
            spec = {"source": f"file://{a}", "servedName": "bench", "maxConcurrency": 8}
            slot = await put_and_wait(client, agent, spec, swaps=0)
            direct = f"http://127.0.0.1:{slot['backendPort']}"
            pinned = str(a.resolve())
            if pin:
                pin_cpus(agent)
            for _ in range(3):  # warm both paths
                await one_stream(client, direct, pinned, max_tokens=4)
                await one_stream(client, agent.data, "bench", max_tokens=4)
            ttft = await ttft_compare(client, agent, direct, pinned, args.rounds * 10)
            paired = statistics.median(x - y for x, y in zip(ttft.agent, ttft.direct, strict=True))
            tps1 = await throughput_compare(
                client, agent, direct, pinned, streams=1, rounds=args.rounds
            )
            tps8 = await throughput_compare(
                client, agent, direct, pinned, streams=8, rounds=args.rounds
            )
            refused = await refusal_latency(client, agent, n=args.rounds * 5)
            surge = hold = None
            if swaps:
                surge = await swap_timeline(
                    client,
                    agent,
                    {**spec, "source": f"file://{b}", "swap": {"strategy": "surge"}},
                    swaps=1,
                )
                hold = await swap_timeline(
                    client, agent, {**spec, "swap": {"strategy": "hold"}}, swaps=2
                )
    finally:
        agent.proc.send_signal(signal.SIGTERM)
        try:
            agent.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.proc.kill()
        if pin:
            import psutil

            psutil.Process().cpu_affinity([])  # all CPUs again
    shutil.rmtree(base, ignore_errors=True)  # kept after a failure: its logs explain it
    return {
        "pin": pin,
        "when": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "host": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f} at the end)",
        "model": "hidden 64, 2 layers, mlx[cpu]" if sys.platform != "darwin" else "mlx (Metal)",
        "ttft": ttft,
        "paired": paired,
        "tps1": tps1,
        "tps8": tps8,
        "refused": refused,
        "surge": surge,
        "hold": hold,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_bench")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (x10 for TTFT)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument(
        "--pin",
        choices=("both", "yes", "no"),
        default="both",
        help="yes: backend on CPU 0, agent + client on the others; both (default): no, then yes",
    )
    args = parser.parse_args(argv)
    pins = {"both": [False, True], "yes": [True], "no": [False]}[args.pin]
    runs = [asyncio.run(run(args, pin=pin, swaps=i == 0)) for i, pin in enumerate(pins)]
    text = render_all(runs)
    print(text)
    with contextlib.suppress(OSError):
        write_section(args.out, text)
        print(f"(written to {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
