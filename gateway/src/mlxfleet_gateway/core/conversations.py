"""Conversations kept for the Responses API's `previous_response_id`, in this replica's memory.

Each stored response is a `Turn`: the chat messages it added to its conversation (its input
items, then its answer), as JSON bytes (what they cost is what is counted), the id of the
response it continued (`parent`) and when it was stored. `history(key, id)` rebuilds the
conversation a new request continues by walking the parents back to the first turn; a link that
is missing (evicted, expired, stored by another replica, `store: false`) is an error naming it,
never a shorter conversation.

Bounded three ways, with an explicit `now` (monotonic seconds): at most `max_turns` turns and
`max_bytes` bytes (when full, the key holding the most bytes loses its oldest turn first, so one
busy tenant cannot push out everyone else's), none older than `ttl_s`. A turn larger than
`max_bytes` is not kept. Turns belong to the API key (its Secret's name) that created them: another
key asking for the id gets the same answer as for an id that never existed.

Ids are `resp_` + this replica's tag (random per process) + 24 random hex digits, so an id issued
by another replica (or before a restart) is recognised and the error says so.
May import: the standard library. Called by: the gateway's Responses dialect
(dialects: responses_request reads a conversation, responses stores a turn).
"""

from __future__ import annotations

import collections
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PREFIX = "resp_"
TAG_HEX = 8
DEFAULT_MAX_TURNS = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_TTL_S = 3600.0


@dataclass(frozen=True, slots=True)
class Turn:
    key: str  # the API key's name: only it may continue from this turn
    id: str
    parent: str | None
    messages: bytes  # JSON list of this turn's chat messages (input items, then the answer)
    at: float  # monotonic seconds when stored


class NotKept(LookupError):
    """A response id the conversation cannot be rebuilt from; the message says why."""

    def __init__(self, asked: str, missing: str, why: str) -> None:
        self.asked = asked
        self.missing = missing
        super().__init__(why)


class Conversations:
    """The turns of this replica, by (key name, response id)."""

    def __init__(
        self,
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ttl_s: float = DEFAULT_TTL_S,
        tag: str | None = None,
    ) -> None:
        self.max_turns = max_turns
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.tag = tag if tag is not None else secrets.token_hex(TAG_HEX // 2)
        self.bytes = 0
        self._turns: collections.OrderedDict[tuple[str, str], Turn] = collections.OrderedDict()
        self._by_key: dict[str, collections.OrderedDict[str, Turn]] = {}
        self._key_bytes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._turns)

    def new_id(self) -> str:
        return PREFIX + self.tag + secrets.token_hex(12)

    def put(
        self,
        *,
        key: str,
        id: str,
        parent: str | None,
        messages: Sequence[dict[str, Any]],
        now: float,
    ) -> bool:
        """Keep one turn; False when it alone is larger than the whole store may hold."""
        data = json.dumps(list(messages), separators=(",", ":"), ensure_ascii=False).encode()
        if len(data) > self.max_bytes:
            return False
        self.expire(now)
        turn = Turn(key=key, id=id, parent=parent, messages=data, at=now)
        self._turns[(key, id)] = turn
        self._by_key.setdefault(key, collections.OrderedDict())[id] = turn
        self._key_bytes[key] = self._key_bytes.get(key, 0) + len(data)
        self.bytes += len(data)
        while len(self._turns) > self.max_turns or self.bytes > self.max_bytes:
            heaviest = max(self._key_bytes, key=self._key_bytes.__getitem__)
            oldest = next(iter(self._by_key[heaviest].values()))
            self._drop(oldest)
        return True

    def expire(self, now: float) -> None:
        """Drop every turn older than `ttl_s` (turns are kept in the order they were stored)."""
        while self._turns:
            first = next(iter(self._turns.values()))
            if now - first.at < self.ttl_s:
                return
            self._drop(first)

    def history(self, *, key: str, id: str, now: float) -> list[dict[str, Any]]:
        """The chat messages of the conversation up to and including response `id`, oldest
        first; NotKept when `id` or any response before it is not kept for `key`."""
        self.expire(now)
        chain: list[Turn] = []
        at: str | None = id
        while at is not None:
            turn = self._turns.get((key, at))
            if turn is None:
                raise NotKept(id, at, self._why(asked=id, missing=at))
            chain.append(turn)
            at = turn.parent
            if len(chain) > len(self._turns):  # a cycle cannot be built; never loop anyway
                break
        out: list[dict[str, Any]] = []
        for turn in reversed(chain):
            out.extend(json.loads(turn.messages))
        return out

    def _why(self, *, asked: str, missing: str) -> str:
        mine = missing.startswith(PREFIX + self.tag)
        where = (
            "it was not answered by this gateway replica (responses are kept in the memory of "
            "the replica that answered them, and a restart forgets them)"
            if not mine
            else f"it is no longer kept (expired after {self.ttl_s:g} s, evicted to stay within "
            "the store's bounds, or answered with store: false)"
        )
        if missing == asked:
            return f"Previous response with id '{asked}' not found: {where}."
        return (
            f"Previous response with id '{asked}' cannot be continued: an earlier response of "
            f"its conversation, '{missing}', is not found: {where}."
        )

    def _drop(self, turn: Turn) -> None:
        del self._turns[(turn.key, turn.id)]
        mine = self._by_key[turn.key]
        del mine[turn.id]
        size = len(turn.messages)
        self.bytes -= size
        left = self._key_bytes[turn.key] - size
        if mine:
            self._key_bytes[turn.key] = left
        else:
            del self._by_key[turn.key]
            del self._key_bytes[turn.key]
