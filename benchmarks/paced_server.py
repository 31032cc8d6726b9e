"""A paced OpenAI-compatible token source: the upstream the proxies' CPU per event is measured on.

    python -m benchmarks.paced_server --host 127.0.0.1 --port PORT [--interval-ms 1.0] [--model M]

Answers `POST /v1/chat/completions` and `/v1/completions` (streamed or whole) with `max_tokens`
tokens, one SSE event per write, one every `--interval-ms` (tokens arriving ~1 ms apart, as a
small model decodes them), then a usage event and `data: [DONE]`; `GET /v1/models` and
`/health`. HTTP/1.1 with keep-alive (chunked streams). It decodes nothing, so the box's cores are
free for the processes measured: their CPU per event is their own cost, not the model's cache
pressure on a shared 2-core box. Written on asyncio's Protocol with httptools (what the agent
already depends on) and uvloop, so the source itself costs little. The agent runs it as a
`command` engine slot (`benchmarks.gateway_bench`'s paced phase).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from typing import Any, cast

import httptools
import uvloop

CHUNK_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    """`data` as one chunk of a chunked HTTP/1.1 body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _whole(status: int, body: Any) -> bytes:
    data = json.dumps(body).encode()
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
    return b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        reason,
        len(data),
        data,
    )


class Paced(asyncio.Protocol):
    def __init__(self, model: str, interval_s: float) -> None:
        self.model = model
        self.interval_s = interval_s
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body = bytearray()
        self.busy: asyncio.Task[None] | None = None

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.write(_whole(400, {"error": {"message": "bad request"}}))
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy is not None:
            self.busy.cancel()

    # --- httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.body = bytearray()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        path = self.url.split(b"?", 1)[0]
        self.busy = asyncio.get_running_loop().create_task(self._answer(method, path))
        if not self.parser.should_keep_alive():
            self.busy.add_done_callback(lambda _: self.transport and self.transport.close())

    # --- answers
    async def _answer(self, method: bytes, path: bytes) -> None:
        t = self.transport
        assert t is not None
        if method == b"GET" and path in (b"/health", b"/healthz"):
            t.write(_whole(200, {"status": "ok"}))
            return
        if method == b"GET" and path == b"/v1/models":
            listed = [{"id": self.model, "object": "model"}]
            t.write(_whole(200, {"object": "list", "data": listed}))
            return
        if method != b"POST" or path not in (b"/v1/chat/completions", b"/v1/completions"):
            t.write(_whole(404, {"error": {"message": "not found"}}))
            return
        try:
            req = json.loads(self.body)
            n = int(req.get("max_tokens") or 16)
        except (ValueError, TypeError, AttributeError):
            t.write(_whole(400, {"error": {"message": "body is not a JSON object"}}))
            return
        chat = path == b"/v1/chat/completions"
        model = str(req.get("model") or self.model)
        usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
        if not req.get("stream"):
            message = {"role": "assistant", "content": " tok" * n}
            choice = {"index": 0, "finish_reason": "length"}
            choice.update({"message": message} if chat else {"text": " tok" * n})
            t.write(_whole(200, {"id": "paced", "object": "x", "model": model,
                                 "choices": [choice], "usage": usage}))  # fmt: skip
            return
        obj = b"chat.completion.chunk" if chat else b"text_completion"
        delta = b'"delta":{"content":" tok"}' if chat else b'"text":" tok"'
        event = (
            b'data: {"id":"paced","object":"%s","created":%d,"model":"%s",'
            b'"choices":[{"index":0,%s,"finish_reason":null}]}\n\n'
            % (obj, int(time.time()), model.encode(), delta)
        )
        t.write(CHUNK_HEAD)
        loop = asyncio.get_running_loop()
        due = loop.time()
        for _ in range(n):
            due += self.interval_s
            await asyncio.sleep(max(0.0, due - loop.time()))
            if t.is_closing():
                return
            t.write(chunk(event))
        tail = b'data: {"id":"paced","object":"%s","model":"%s","choices":[],"usage":%s}\n\n' % (
            obj,
            model.encode(),
            json.dumps(usage).encode(),
        )
        t.write(chunk(tail) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


async def serve(host: str, port: int, model: str, interval_s: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Paced(model, interval_s), host, port)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paced_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval-ms", type=float, default=1.0)
    parser.add_argument("--model", default="paced")
    args = parser.parse_args(argv)
    uvloop.run(serve(args.host, args.port, args.model, args.interval_ms / 1000.0))


if __name__ == "__main__":
    main()
