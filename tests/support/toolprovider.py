"""An OpenAI-compatible provider on loopback that answers with a tool call, as a real model would
(the tiny test models never call a tool): the external backend of a ModelRoute in gateway tests.

`ToolProvider()` serves `POST .../chat/completions` over HTTP/1.1 (keep-alive; streams chunked):
given `tools`, it answers "Let me check." and a call of the first tool with `ARGUMENTS`
(streamed as OpenAI streams it: the call's id and name first, the arguments in two pieces,
`finish_reason: tool_calls`); without tools, "ok". Usage is `PROMPT_TOKENS` / `COMPLETION_TOKENS`
(a usage event when `stream_options.include_usage`). Every request body is kept in `bodies`, so a
test can read what the gateway sent. `server.done_hold_s` holds a stream's end that long after
its `data: [DONE]`. Stop it with `close()`.
May import: the standard library. Called by: tests/e2e/test_gateway_dialects.py.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

ARGUMENTS = '{"city": "Paris", "days": 3}'
TEXT = "Let me check."
PROMPT_TOKENS = 11
COMPLETION_TOKENS = 7


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length))
        self.server.bodies.append(body)
        tools = body.get("tools") or []
        name = tools[0]["function"]["name"] if tools else None
        if body.get("stream"):
            self._stream(body, name)
        else:
            self._whole(name)

    def _whole(self, name: str | None) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": TEXT if name else "ok"}
        if name:
            fn = {"name": name, "arguments": ARGUMENTS}
            message["tool_calls"] = [{"id": "call_scripted1", "type": "function", "function": fn}]
        answer = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if name else "stop",
                }
            ],
            "usage": _usage(),
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, body: dict[str, Any], name: str | None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        deltas: list[tuple[dict[str, Any], str | None]] = [
            ({"role": "assistant", "content": ""}, None),
            ({"content": TEXT if name else "ok"}, None),
        ]
        if name:
            half = len(ARGUMENTS) // 2
            first = {"index": 0, "id": "call_scripted1", "type": "function"}
            deltas += [
                ({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]}, None),
                ({"tool_calls": [{"index": 0, "function": {"arguments": ARGUMENTS[:half]}}]}, None),
                ({"tool_calls": [{"index": 0, "function": {"arguments": ARGUMENTS[half:]}}]}, None),
                ({}, "tool_calls"),
            ]
        else:
            deltas.append(({}, "stop"))
        head = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted"}
        for delta, finish in deltas:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            self._event({**head, "choices": [choice]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({**head, "choices": [], "usage": _usage()})
        self._chunk(b"data: [DONE]\n\n")
        time.sleep(self.server.done_hold_s)  # a backend that ends its body a moment after [DONE]
        self._chunk(b"")

    def _event(self, payload: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def _usage() -> dict[str, int]:
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
    }


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    bodies: list[dict[str, Any]]
    done_hold_s = 0.0


class ToolProvider:
    def __init__(self) -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.bodies = []
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return self.server.bodies

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
