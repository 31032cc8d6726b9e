"""The KV budget of one request: its prompt tokens plus its `max_tokens` within `contextLength`.

A slot's memory is planned from `contextLength x maxConcurrency` (the KV cache); a request whose
prompt (counted with the model's own tokenizer: `slots.lease.PromptCounter`) plus the tokens it
may generate exceed the slot's `contextLength` is refused here, before it queues or reaches a
backend: 400 `context_length_exceeded`, OpenAI's code and wording, naming both numbers.

What it may generate: an explicit `max_tokens` (or `max_completion_tokens`) clamped to the slot's
cap (`server.maxTokens`, else `contextLength`: `routing.limit_tokens`); when the request names
none, it needs room for one token, and its `max_tokens` becomes the slot's default cut to the
room the prompt leaves (`limit_tokens` with `prompt_tokens`), as OpenAI and vLLM do.
Counting is bounded (a prompt whose characters alone cannot fit is refused on the event loop
without rendering or tokenising anything; the counter stops once past the limit) and runs on the
event loop only for small bodies (`INLINE_BYTES`); bigger ones are counted in a thread.
May import: the standard library, contract, slots.lease, dataplane (errors, routing).
Called by: dataplane.app.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane import routing
from mlxfleet_agent.dataplane.errors import RouteError
from mlxfleet_agent.slots import lease

CODE = "context_length_exceeded"
INLINE_BYTES = 16 * 1024  # bodies up to this size are counted on the event loop
GENERATING = frozenset({"chat.completions", "completions"})


def completion_tokens(body: dict[str, Any], spec: contract.SlotSpec) -> int | None:
    """The tokens the request asks to generate, after the slot's cap; None when it names none
    (or names something the backend will refuse on its own)."""
    asked = body.get("max_completion_tokens")
    if asked is None:
        asked = body.get("max_tokens")
    if asked is None or isinstance(asked, bool) or not isinstance(asked, int):
        return None
    return routing.token_cap(spec, asked)


async def check(
    body: dict[str, Any],
    backend: lease.Upstream,
    *,
    endpoint: str,
    size: int,
) -> int | None:
    """Count the prompt with `backend`'s model and refuse a request over the slot's context
    length (RouteError 400 `context_length_exceeded`); return the prompt's tokens, or None when
    it is short enough to fit with room to spare (not tokenised: its size bounds it)."""
    spec = backend.spec
    context = spec.context_length
    completion = completion_tokens(body, spec)
    needed = completion if completion is not None else 1
    chat = endpoint == "chat.completions"
    args = spec.server.chat_template_args
    counter = backend.counter
    room = context - needed
    # below this, no count is needed: it fits, and without max_tokens the default fits too
    enough = context - (completion if completion is not None else routing.token_cap(spec))
    floor = counter.at_least(body, chat=chat)
    if floor > room and size > INLINE_BYTES:  # far too long: refused here, nothing counted
        raise exceeded(
            context=context,
            prompt=floor,
            completion=needed,
            exact=False,
            named=completion is not None,
            chat=chat,
        )
    if size <= INLINE_BYTES:
        count = counter.count(body, chat=chat, template_args=args, limit=room, enough=enough)
    else:
        count = await asyncio.to_thread(
            counter.count, body, chat=chat, template_args=args, limit=room, enough=enough
        )
    if not count.exact and count.tokens <= enough:
        return None
    if count.tokens > room:
        raise exceeded(
            context=context,
            prompt=count.tokens,
            completion=needed,
            exact=count.exact,
            named=completion is not None,
            chat=chat,
        )
    return count.tokens


def exceeded(
    *, context: int, prompt: int, completion: int, exact: bool, named: bool, chat: bool
) -> RouteError:
    """OpenAI's refusal, with both numbers (`at least` when the count stopped early)."""
    where = "messages" if chat else "prompt"
    least = "" if exact else "at least "
    if named:
        asked = (
            f"you requested {least}{prompt + completion} tokens ({least}{prompt} in the {where}, "
            f"{completion} in the completion). Please reduce the length of the {where} or "
            "completion."
        )
    else:  # no max_tokens: the prompt alone leaves no room
        asked = (
            f"your {where} resulted in {least}{prompt} tokens. Please reduce the length of the "
            f"{where}."
        )
    message = f"This model's maximum context length is {context} tokens. However, {asked}"
    return RouteError(400, message, param=where, code=CODE)
