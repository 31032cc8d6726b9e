"""Requests per minute and tokens per minute per API key: exact sliding 60-second windows.

`Limits.admit(key, now=...)` lets a request in or raises 429 with `Retry-After` (whole seconds
until enough of the window has passed). Tokens are known only when an answer ends, so a request
holds a reservation while in flight and `settle` replaces it with what it used: a request is
admitted while the window's tokens plus the reservations are below the limit. The reservation is
the prompt (estimated) plus the most the answer may generate (`plan.Plan.completion_tokens`: the
slot's cap, which the agent enforces, not a guess), so what admitted requests use exceeds the
limit by at most one request's reservation. State is per gateway process; with N
gateway replicas each enforces limit / `share` (the Service spreads clients over replicas).
May import: the standard library, keys, errors. Called by: the proxy.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

from mlxfleet_gateway.core import errors, keys

WINDOW_S = 60.0


@dataclass(slots=True)
class _Window:
    requests: collections.deque[float] = field(default_factory=collections.deque)
    tokens: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)
    token_sum: int = 0
    reserved: int = 0  # the sum of the open tickets' reservations: never below 0

    def expire(self, now: float) -> None:
        edge = now - WINDOW_S
        while self.requests and self.requests[0] <= edge:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= edge:
            self.token_sum -= self.tokens.popleft()[1]


@dataclass(eq=False, slots=True)
class Ticket:
    """An admitted request's reservation, held in `_window` until `settle` gives it back."""

    key: str
    reserved: int  # >= 0
    _window: _Window | None = field(default=None, repr=False)
    settled: bool = False


class Limits:
    def __init__(self, *, share: int = 1) -> None:
        self.share = max(1, share)
        self._windows: dict[str, _Window] = {}

    def _limit(self, value: int | None) -> int | None:
        return None if value is None else max(1, value // self.share)

    def admit(self, key: keys.ApiKey, *, now: float, estimate: int) -> Ticket:
        rpm = self._limit(key.spec.requests_per_minute)
        tpm = self._limit(key.spec.tokens_per_minute)
        if rpm is None and tpm is None:
            return Ticket(key.name, 0)
        w = self._windows.setdefault(key.name, _Window())
        w.expire(now)
        if rpm is not None and len(w.requests) >= rpm:
            wait = w.requests[len(w.requests) - rpm] + WINDOW_S - now
            raise errors.rate_limited(
                f"API key {key.name} is over its limit of {rpm} requests per minute",
                retry_after_s=max(1, math.ceil(wait)),
                code="requests_per_minute",
            )
        if tpm is not None and w.token_sum + w.reserved >= tpm:
            raise errors.rate_limited(
                f"API key {key.name} is over its limit of {tpm} tokens per minute",
                retry_after_s=self._token_wait(w, tpm, now),
                code="tokens_per_minute",
            )
        w.requests.append(now)
        reserve = max(0, estimate) if tpm is not None else 0
        w.reserved += reserve
        return Ticket(key.name, reserve, w)

    def usage(self, key: keys.ApiKey, *, now: float) -> dict[str, float]:
        """How full each of the key's limits is in this gateway now, by limit name
        (`requests_per_minute`, `tokens_per_minute`): the window's use (tokens: with the
        reservations of requests in flight) over the limit this gateway enforces."""
        rpm = self._limit(key.spec.requests_per_minute)
        tpm = self._limit(key.spec.tokens_per_minute)
        w = self._windows.get(key.name)
        if w is not None:
            w.expire(now)
        out: dict[str, float] = {}
        if rpm is not None:
            out["requests_per_minute"] = (len(w.requests) if w else 0) / rpm
        if tpm is not None:
            out["tokens_per_minute"] = ((w.token_sum + w.reserved) if w else 0) / tpm
        return out

    def settle(self, ticket: Ticket, *, now: float, tokens: int) -> None:
        """The request ended having used `tokens` (prompt + completion); once per ticket."""
        if ticket.settled:
            return
        ticket.settled = True
        w = ticket._window
        if w is not None:
            w.reserved -= ticket.reserved  # exactly what this ticket added, where it added it
        else:
            w = self._windows.get(ticket.key)  # limits set since it was admitted: count its use
        if w is not None and tokens > 0:
            w.tokens.append((now, tokens))
            w.token_sum += tokens

    @staticmethod
    def _token_wait(w: _Window, tpm: int, now: float) -> int:
        """Seconds until the window (without reservations) falls below the limit."""
        excess = w.token_sum + w.reserved - tpm
        for t, n in w.tokens:
            excess -= n
            if excess < 0:
                return max(1, math.ceil(t + WINDOW_S - now))
        return 1  # the reservations of requests in flight hold it: they end soon
