"""Replica choice and passive health: least outstanding requests with power-of-two choices,
prefix affinity with bounded load, and ejection of replicas (or whole agents) that fail.

Pure bookkeeping with an explicit `now` (monotonic seconds) and an injected random source:
- `pick` draws two healthy candidates and takes the one with fewer requests in flight from this
  gateway; with an affinity key it first tries the candidate that rendezvous hashing ranks highest
  for the key, as long as that replica has fewer than its capacity in flight ("while it has
  room"); rendezvous (highest random weight) hashing keeps a key on the same replica when others
  come and go, and every gateway replica computes the same ranking (stable hashes, no state);
- `failed` ejects: at once for a connect error or a dead agent (the whole origin), after
  `failures_to_eject` consecutive failures otherwise; an ejected replica stays out for at least
  `eject_min_s` (doubling with repeated ejections up to `eject_max_s`) and comes back only after
  an active probe succeeds (`probe_ok`); `sync` forgets replicas that no longer exist.
May import: the standard library. Called by: the proxy (pick/started/finished), its relay
(succeeded/failed) and the health prober (probe_ok/probe_failed/due_probes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64 finaliser: a cheap, well-spread 64-bit hash of an integer."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def seed(replica_id: str) -> int:
    """A stable 64-bit seed per replica (the same in every gateway process)."""
    return int.from_bytes(hashlib.blake2b(replica_id.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class Candidate:
    id: str
    origin: str  # the agent (data-plane URL) the replica lives on
    capacity: int  # requests it serves at once
    auth: bytes = b""  # the Authorization value its agent accepts (the proxy sends it)


@dataclass(slots=True)
class State:
    origin: str
    seed: int
    outstanding: int = 0
    failures: int = 0  # consecutive
    ejected: bool = False
    ejected_at: float = 0.0
    eject_until: float = 0.0  # no probe brings it back before this
    ejections: int = 0  # recent ejections (backoff); reset after a quiet spell
    last_ok: float = 0.0
    reason: str = ""


class Balancer:
    def __init__(
        self,
        *,
        failures_to_eject: int = 3,
        eject_min_s: float = 1.0,
        eject_max_s: float = 30.0,
    ) -> None:
        self.failures_to_eject = failures_to_eject
        self.eject_min_s = eject_min_s
        self.eject_max_s = eject_max_s
        self.states: dict[str, State] = {}

    # ---- membership --------------------------------------------------------------------------

    def sync(self, candidates: Iterable[Candidate]) -> None:
        """Know exactly these replicas (new ones start healthy; state of known ones is kept)."""
        wanted = {c.id: c for c in candidates}
        for gone in set(self.states) - set(wanted):
            if self.states[gone].outstanding == 0:
                del self.states[gone]
        for cid, c in wanted.items():
            state = self.states.get(cid)
            if state is None:
                self.states[cid] = State(origin=c.origin, seed=seed(cid))
            else:
                state.origin = c.origin

    def _state(self, c: Candidate) -> State:
        state = self.states.get(c.id)
        if state is None:
            state = self.states[c.id] = State(origin=c.origin, seed=seed(c.id))
        return state

    # ---- choosing ------------------------------------------------------------------------------

    def healthy(self, cid: str) -> bool:
        state = self.states.get(cid)
        return state is None or not state.ejected

    def outstanding(self, cid: str) -> int:
        state = self.states.get(cid)
        return 0 if state is None else state.outstanding

    def pick(
        self,
        candidates: Sequence[Candidate],
        *,
        rng: Callable[[], float],
        affinity: int | None = None,
        exclude: frozenset[str] | set[str] = frozenset(),
        allow_ejected: bool = False,
    ) -> Candidate | None:
        """A replica for the next request, or None when every candidate is excluded/ejected."""
        live = [
            c
            for c in candidates
            if c.id not in exclude and (allow_ejected or not self._state(c).ejected)
        ]
        if not live:
            return None
        if affinity is not None:
            ranked = max(live, key=lambda c: _mix(self._state(c).seed ^ affinity))
            if self._state(ranked).outstanding < max(1, ranked.capacity):
                return ranked
        if len(live) == 1:
            return live[0]
        i = int(rng() * len(live)) % len(live)
        j = int(rng() * (len(live) - 1)) % (len(live) - 1)
        if j >= i:
            j += 1
        a, b = live[i], live[j]
        return a if self._state(a).outstanding <= self._state(b).outstanding else b

    def saturated(self, candidates: Sequence[Candidate], *, limit: int | None) -> bool:
        """Every healthy candidate has at least `limit` (default 2 x capacity) in flight."""
        live = [c for c in candidates if not self._state(c).ejected]
        return bool(live) and all(
            self._state(c).outstanding >= (limit if limit is not None else 2 * c.capacity)
            for c in live
        )

    # ---- outcomes ------------------------------------------------------------------------------

    def started(self, c: Candidate) -> None:
        self._state(c).outstanding += 1

    def finished(self, c: Candidate) -> None:
        state = self.states.get(c.id)
        if state is not None and state.outstanding > 0:
            state.outstanding -= 1

    def succeeded(self, c: Candidate, *, now: float) -> None:
        state = self._state(c)
        state.failures = 0
        state.last_ok = now

    def failed(self, c: Candidate, *, now: float, fatal: bool, reason: str) -> list[str]:
        """Count a failure; return the replicas ejected by it. `fatal` (connect refused,
        timed out, agent unresponsive) ejects every replica on the same origin at once."""
        state = self._state(c)
        state.failures += 1
        if fatal:
            return self.eject_origin(state.origin, now=now, reason=reason)
        if state.failures >= self.failures_to_eject and not state.ejected:
            self._eject(c.id, state, now=now, reason=reason)
            return [c.id]
        return []

    def eject_origin(self, origin: str, *, now: float, reason: str) -> list[str]:
        out = []
        for cid, state in self.states.items():
            if state.origin == origin and not state.ejected:
                self._eject(cid, state, now=now, reason=reason)
                out.append(cid)
        return out

    def _eject(self, cid: str, state: State, *, now: float, reason: str) -> None:
        if now - state.ejected_at > 4 * self.eject_max_s:
            state.ejections = 0  # a quiet spell: start the backoff again
        hold = min(self.eject_max_s, self.eject_min_s * (2**state.ejections))
        state.ejected, state.ejected_at, state.eject_until = True, now, now + hold
        state.ejections += 1
        state.reason = reason

    # ---- active probes ---------------------------------------------------------------------

    def ejected_origins(self, *, now: float) -> set[str]:
        """Origins with an ejected replica whose minimum ejection is over (probe them)."""
        return {s.origin for s in self.states.values() if s.ejected and now >= s.eject_until}

    def probe_ok(self, origin: str, *, now: float) -> list[str]:
        """The agent answers again: its replicas whose minimum ejection is over come back."""
        back = []
        for cid, state in self.states.items():
            if state.origin == origin and state.ejected and now >= state.eject_until:
                state.ejected, state.failures, state.last_ok = False, 0, now
                back.append(cid)
        return back

    def probe_failed(self, origin: str, *, now: float, reason: str) -> list[str]:
        """The agent did not answer a liveness probe in time: eject everything on it."""
        return self.eject_origin(origin, now=now, reason=reason)
