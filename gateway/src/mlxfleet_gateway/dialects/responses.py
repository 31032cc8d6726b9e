"""The OpenAI Responses API (`POST /v1/responses`) served over chat-completion backends:
`Responses`, one Responses API request over the chat path, its answer in the Responses shape.

The request is translated by `responses_request.translate` (the Responses body read, checked
and turned into a chat-completion body, with what its answer repeats of it); what it needs of
the request (the fields to echo, `store`, `previous_response_id`, this turn's messages) is kept
on the translation.

Out: a `response` object (message and `function_call` output items, usage as
input/output/total tokens, `incomplete` with `max_output_tokens` when the length cap ended it), or
its stream: `response.created`, `response.in_progress`, then per output item
`response.output_item.added`, `response.content_part.added`, `response.output_text.delta`...
`response.output_text.done`, `response.content_part.done`, `response.output_item.done` (function
calls: `response.function_call_arguments.delta` / `.done`), then `response.completed` (or
`response.incomplete`, or `response.failed` when the stream was cut), each with its
`sequence_number`. Errors keep the OpenAI shape; `param` names the Responses field.

When a response completes, what it added (its input items and its answer) is stored in the
conversations (core.conversations, through the context) for `previous_response_id`, unless
`store: false`.
May import: the standard library, dialects.base, dialects.responses_request,
mlxfleet_common.wire.openai_proxy. Called by: the proxy (through `dialects.PATHS`).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway.dialects import base
from mlxfleet_gateway.dialects import responses_request as request

# chat fields named in an error (the agent's, an engine's) -> the Responses field the client sent
CHAT_PARAMS = {
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "messages": "input",
}


def _token() -> str:
    return secrets.token_hex(12)


class Responses(base.Translation):
    api = "responses"

    def __init__(self, send: asgi.Send, context: base.Context) -> None:
        super().__init__(send, context)
        self.id = context.conversations.new_id()
        self.created_at = int(context.wall())
        self.echo: dict[str, Any] = {}
        self.store = True
        self.previous: str | None = None
        self.turn: list[dict[str, Any]] = []  # this turn's chat messages, kept when it completes
        self.seq = 0
        self.items: list[dict[str, Any]] = []
        self._open: int | None = None  # the output item being streamed
        self._text: list[str] = []  # of the open message
        self._delta_head = b""
        self._args: dict[int, list[str]] = {}

    # ---- the request -------------------------------------------------------------------------

    def translate(self, body: dict[str, Any]) -> dict[str, Any]:
        asked = request.translate(body, key=self.key, context=self.context)
        self.echo, self.store, self.previous = asked.echo, asked.store, asked.previous
        self.turn = asked.turn
        return asked.chat

    # ---- whole answers -----------------------------------------------------------------------

    def answer(self, chat: dict[str, Any]) -> dict[str, Any]:
        text, calls = self.whole_message(chat)
        if text or not calls:
            self.items.append(_message_item(_output_id("msg"), text))
        for call in calls:
            item = _call_item(call.get("id") or "call_" + _token(), call["name"])
            item["arguments"], item["status"] = call["arguments"], "completed"
            self.items.append(item)
        status, incomplete = self._status()
        self._keep()
        return self._response(status, incomplete=incomplete)

    def error(self, status: int, err: dict[str, Any]) -> bytes:
        param = err.get("param")
        if isinstance(param, str):
            head = param.split(".", 1)[0].split("[", 1)[0]
            if head in CHAT_PARAMS:
                err = {**err, "param": CHAT_PARAMS[head]}
        return json.dumps({"error": err}).encode()

    # ---- streams -----------------------------------------------------------------------------

    def _event(self, name: str, payload: dict[str, Any]) -> bytes:
        payload = {"type": name, "sequence_number": self.seq, **payload}
        self.seq += 1
        return base.sse(name, payload)

    def opening(self) -> bytes:
        response = self._response("in_progress")
        return self._event("response.created", {"response": response}) + self._event(
            "response.in_progress", {"response": response}
        )

    def text(self, text: str) -> bytes:
        out = b""
        if self._open is None or self.items[self._open]["type"] != "message":
            out = self._close_item() + self._open_message()
        self._text.append(text)
        seq = self.seq
        self.seq += 1
        return b'%s%s,"logprobs":[],"sequence_number":%d}\n\n' % (
            out + self._delta_head,
            base.quoted(text).encode(),
            seq,
        )

    def call_started(self, call_id: str | None, name: str) -> tuple[int, bytes]:
        out = self._close_item()
        self.items.append(_call_item(call_id or "call_" + _token(), name))
        at = self._open = len(self.items) - 1
        self._args[at] = []
        added = {"output_index": at, "item": self.items[at]}
        return at, out + self._event("response.output_item.added", added)

    def call_arguments(self, at: int, arguments: str) -> bytes:
        self._args[at].append(arguments)
        delta = {"item_id": self.items[at]["id"], "output_index": at, "delta": arguments}
        return self._event("response.function_call_arguments.delta", delta)

    def failed(self, err: dict[str, Any]) -> bytes:
        out = self._close_item()
        error = {"code": "server_error", "message": str(err.get("message") or "stream failed")}
        response = self._response("failed", error=error)
        return out + self._event("response.failed", {"response": response})

    def closing(self) -> bytes:
        if self.failure is not None:
            return b""
        out = self._close_item()
        if not self.items:
            out += self._open_message() + self._close_item()
        status, incomplete = self._status()
        self._keep()
        response = self._response(status, incomplete=incomplete)
        name = "response.completed" if status == "completed" else "response.incomplete"
        return out + self._event(name, {"response": response})

    def _open_message(self) -> bytes:
        item = {
            "type": "message",
            "id": _output_id("msg"),
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        self.items.append(item)
        at = self._open = len(self.items) - 1
        self._text = []
        head = {
            "type": "response.output_text.delta",
            "item_id": item["id"],
            "output_index": at,
            "content_index": 0,
        }
        self._delta_head = (
            b"event: response.output_text.delta\ndata: "
            + json.dumps(head)[:-1].encode()
            + b',"delta":'
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": at, "content_index": 0}
        return self._event(
            "response.output_item.added", {"output_index": at, "item": dict(item)}
        ) + self._event("response.content_part.added", {**where, "part": part})

    def _close_item(self) -> bytes:
        at, self._open = self._open, None
        if at is None:
            return b""
        item = self.items[at]
        if item["type"] == "message":
            text = "".join(self._text)
            done = _message_item(item["id"], text)
            self.items[at] = done
            where = {"item_id": item["id"], "output_index": at, "content_index": 0}
            return (
                self._event("response.output_text.done", {**where, "text": text, "logprobs": []})
                + self._event("response.content_part.done", {**where, "part": done["content"][0]})
                + self._event("response.output_item.done", {"output_index": at, "item": done})
            )
        item["arguments"] = "".join(self._args[at])
        item["status"] = "completed"
        args = {
            "item_id": item["id"],
            "output_index": at,
            "name": item["name"],
            "arguments": item["arguments"],
        }
        return self._event("response.function_call_arguments.done", args) + self._event(
            "response.output_item.done", {"output_index": at, "item": item}
        )

    # ---- the response object -----------------------------------------------------------------

    def _status(self) -> tuple[str, dict[str, Any] | None]:
        if self.finish_reason == "length":
            return "incomplete", {"reason": "max_output_tokens"}
        if self.finish_reason == "content_filter":
            return "incomplete", {"reason": "content_filter"}
        return "completed", None

    def _response(
        self,
        status: str,
        *,
        incomplete: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        usage = None
        if status != "in_progress" and self.usage is not None:
            prompt, completion, cached = base.usage_numbers(self.usage)
            usage = {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion,
            }
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": list(self.items) if status != "in_progress" else [],
            "reasoning": {"effort": None, "summary": None},
            "truncation": "disabled",
            "usage": usage,
            **self.echo,
        }

    def _keep(self) -> None:
        """Store this turn (its input items and its answer) for `previous_response_id`."""
        if not self.store:
            return
        answer: dict[str, Any] = {"role": "assistant", "content": ""}
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for item in self.items:
            if item["type"] == "message":
                texts.extend(p["text"] for p in item["content"])
            else:
                fn = {"name": item["name"], "arguments": item["arguments"]}
                calls.append({"id": item["call_id"], "type": "function", "function": fn})
        answer["content"] = "".join(texts)
        if calls:
            answer["tool_calls"] = calls
        self.context.conversations.put(
            key=self.key,
            id=self.id,
            parent=self.previous,
            messages=[*self.turn, answer],
            now=self.context.clock(),
        )


# ---- output items ---------------------------------------------------------------------------


def _output_id(prefix: str) -> str:
    return f"{prefix}_{_token()}"


def _message_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def _call_item(call_id: str, name: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": _output_id("fc"),
        "call_id": call_id,
        "name": name,
        "arguments": "",
        "status": "in_progress",
    }
