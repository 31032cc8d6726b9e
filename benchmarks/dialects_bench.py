"""What /v1/responses and /v1/messages cost per streamed event, against /v1/chat/completions.

    python -m benchmarks.dialects_bench [--rounds N] [--tokens T] [--out docs/benchmarks.md]

Two measurements, each against chat completions in the same run:

- **in process** (no sockets): the gateway's per-event work on a stream, fed mlx-lm-shaped chat
  events one by one: the chat path (the `StreamScanner` and the ASGI send) against the chat path
  plus a translation (`dialects`: the event parsed, the other API's event written). CPU time per
  event, best of `--rounds`.
- **through the real gateway** (a control plane on loopback, `mlxfleet-gateway` as its own
  ServiceAccount, the paced source `benchmarks/paced_server.py` as the external backend of a
  ModelRoute: one token event per ms, nothing decoded): the gateway process's CPU per streamed
  token event, for 1 and 8 concurrent streams of `--tokens` events, the three APIs in rotated
  back-to-back rounds.

Prints a Markdown section and replaces the "Translated APIs" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from tests.e2e import gwfleet
from tests.support import gateway as gws

from benchmarks import gateway_bench
from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway.core import keys
from mlxfleet_gateway.dialects import base, messages, responses
from mlxfleet_operator.dev import controlplane, processes

SECTION = "## Translated APIs (/v1/responses, /v1/messages)"
EVENT = (
    b'data: {"id": "chatcmpl-9f1c", "system_fingerprint": "0.32.2-0.32.4-Linux", "object": '
    b'"chat.completion.chunk", "model": "chat", "created": 1764280000, "choices": [{"index": 0, '
    b'"finish_reason": null, "delta": {"role": "assistant", "content": " fleet"}}]}\n\n'
)
APIS = ("chat", "responses", "messages")
NAMESPACE = "bench-dialects"


# ---- in process -----------------------------------------------------------------------------


def _drive(coro: Awaitable[None]) -> None:
    """Run a send that never waits (what the pipe does when the client's socket has room)."""
    step = coro.__await__()
    with contextlib.suppress(StopIteration):
        step.send(None)


def per_event_in_process(api: str, events: int) -> float:
    """Seconds of CPU per event for the gateway's per-event work on one stream of `api`."""

    async def sink(message: asgi.Message) -> None:
        return None

    send: Callable[[asgi.Message], Awaitable[None]] = sink
    if api != "chat":
        cls = responses.Responses if api == "responses" else messages.Messages
        t = cls(sink, base.Context())
        body: dict[str, Any] = {"model": "chat", "stream": True, "max_tokens": events}
        if api == "responses":
            body = {"model": "chat", "stream": True, "input": "hi"}
        else:
            body["messages"] = [{"role": "user", "content": "hi"}]
        t.request(body, key=keys.ANONYMOUS_KEY)
        _drive(t.send({"type": "http.response.start", "status": 200, "headers": []}))
        send = t.send
    scanner = asgi.StreamScanner(forward_usage=api != "chat")
    t0 = time.process_time()
    for _ in range(events):
        out = scanner.feed(EVENT)
        _drive(send({"type": "http.response.body", "body": out, "more_body": True}))
    return (time.process_time() - t0) / events


def in_process(rounds: int) -> dict[str, float]:
    return {api: min(per_event_in_process(api, 20_000) for _ in range(rounds)) for api in APIS}


# ---- through the gateway ---------------------------------------------------------------------


def _request(api: str, tokens: int) -> tuple[str, dict[str, Any], bytes]:
    """(path, body, the bytes that mark one token event) of a streamed request."""
    if api == "chat":
        body = {
            "model": "paced",
            "stream": True,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": "hi"}],
        }
        return "/v1/chat/completions", body, b'"content":" tok"'
    if api == "responses":
        body = {"model": "paced", "stream": True, "max_output_tokens": tokens, "input": "hi"}
        return "/v1/responses", body, b"event: response.output_text.delta"
    body = {
        "model": "paced",
        "stream": True,
        "max_tokens": tokens,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return "/v1/messages", body, b"event: content_block_delta"


async def _stream(client: httpx.AsyncClient, url: str, api: str, tokens: int) -> int:
    path, body, marker = _request(api, tokens)
    seen, tail = 0, b""
    async with client.stream("POST", url + path, json=body) as r:
        assert r.status_code == 200, r.status_code
        async for chunk in r.aiter_raw():
            buf = tail + chunk
            seen += buf.count(marker)
            tail = buf[-(len(marker) - 1) :]
    return seen


async def through_gateway(
    gw: gws.Gateway, *, streams: int, tokens: int, rounds: int
) -> dict[str, list[float]]:
    """us of the gateway's CPU per token event, per API and round."""
    out: dict[str, list[float]] = {api: [] for api in APIS}
    limits = httpx.Limits(max_connections=streams * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await _stream(client, gw.url, "chat", 50)  # warm the pool and the route
        for r in range(rounds):
            order = APIS[r % 3 :] + APIS[: r % 3]
            for api in order:
                c0 = gateway_bench.cpu(gw.proc.pid)
                seen = await asyncio.gather(
                    *(_stream(client, gw.url, api, tokens) for _ in range(streams))
                )
                used = gateway_bench.cpu(gw.proc.pid) - c0
                assert sum(seen) == streams * tokens, (api, seen)
                out[api].append(used / sum(seen) * 1e6)
    return out


def measure_gateway(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="dialects-bench-"))
    (port,) = processes.free_ports(1)
    paced = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.paced_server", "--port", str(port), "--interval-ms", "1"]
    )
    results: dict[str, Any] = {}
    try:
        gwfleet.wait_for("the paced source", lambda: gateway_bench._listening(port), timeout=60)
        with controlplane.running(root / "cp") as cluster:
            cluster.kubectl("create", "namespace", NAMESPACE)
            route = {
                "apiVersion": "mlxfleet.io/v1alpha1",
                "kind": "ModelRoute",
                "metadata": {"name": "paced", "namespace": NAMESPACE},
                "spec": {
                    "rules": [
                        {
                            "name": "all",
                            "backends": [
                                {
                                    "name": "paced",
                                    "external": {
                                        "url": f"http://127.0.0.1:{port}/v1",
                                        "model": "paced",
                                    },
                                }
                            ],
                        }
                    ]
                },
            }
            cluster.kubectl("apply", "-f", "-", input=json.dumps(route))
            kubeconfig = cluster.gateway_kubeconfig
            assert kubeconfig is not None
            gw = gws.start_gateway(kubeconfig, root / "gw", anonymous=True, fleet_key=None)
            try:
                gw.wait_for("the route", lambda: "paced" in httpx.get(gw.base_url + "/models").text)
                for streams in (1, 8):
                    results[f"s{streams}"] = asyncio.run(
                        through_gateway(gw, streams=streams, tokens=args.tokens, rounds=args.rounds)
                    )
            finally:
                gw.stop()
    finally:
        paced.terminate()
        paced.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    return results


# ---- report ----------------------------------------------------------------------------------


def render(micro: dict[str, float], e2e: dict[str, Any], args: argparse.Namespace) -> str:
    when = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    host = f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
    lines = [
        SECTION,
        "",
        f"`python -m benchmarks.dialects_bench` ({when}; {host}, load average "
        f"{os.getloadavg()[0]:.1f} at the end). The translation sits around the chat path "
        "(`mlxfleet_gateway.dialects`): a /v1/chat/completions stream runs none of it. Each "
        "figure against chat completions, in the same run.",
        "",
        "In process, no sockets: the gateway's per-event work on one stream (the scanner and "
        "the ASGI send; for the translated APIs the chat event parsed and the API's event "
        f"written), CPU per event, best of {args.rounds} x 20,000 mlx-lm-shaped events:",
        "",
        "| API | us per event | added to chat completions |",
        "| --- | --- | --- |",
    ]
    for api in APIS:
        added = "" if api == "chat" else f"+{(micro[api] - micro['chat']) * 1e6:.1f} us"
        lines.append(f"| {api} | {micro[api] * 1e6:.1f} | {added} |")
    lines += [
        "",
        "Through the real gateway process (its CPU over the run / token events forwarded), the "
        "paced source as a ModelRoute's external backend (one event per ms), "
        f"{args.tokens} events per stream, {args.rounds} rotated rounds, median (min-max):",
        "",
        "| API | 1 stream: us per event | 8 streams: us per event |",
        "| --- | --- | --- |",
    ]
    for api in APIS:
        cells = []
        for key in ("s1", "s8"):
            values = e2e[key][api]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
        lines.append(f"| {api} | {cells[0]} | {cells[1]} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dialects_bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--in-process-only", action="store_true", help="no control plane")
    args = parser.parse_args(argv)
    micro = in_process(args.rounds)
    if args.in_process_only:
        for api in APIS:
            print(f"{api}: {micro[api] * 1e6:.2f} us per event")
        return 0
    e2e = measure_gateway(args)
    text = render(micro, e2e, args)
    print(text)
    old = args.out.read_text() if args.out.exists() else "# Benchmarks\n"
    if SECTION in old:
        head, rest = old.split(SECTION, 1)
        nxt = rest.find("\n## ")
        old = head.rstrip() + "\n\n" + (rest[nxt + 1 :] if nxt >= 0 else "")
    args.out.write_text(old.rstrip() + "\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
