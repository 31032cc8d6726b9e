"""Requests held for sleeping deployments (pure): the bounded queue per deployment, the refusals
past it or past the deadline, and the ModelDemand this gateway replica writes about them.

A deployment that may sleep (spec.minReplicas 0) has no replica while it sleeps; a request for it
waits at the gateway (`activator`) while the operator loads one. `Held` counts the waiting
requests per deployment with the arrival time of each (the oldest is the demand's `since`); one
more than `limit` is refused at once with 503 + Retry-After, as is one still waiting at its
deadline. `demand` is the whole ModelDemand object for a server-side apply (`None`: nothing held,
the object goes).
May import: the standard library, core.errors, mlxfleet_operator.api (modeldemand, resources),
mlxfleet_common.wire.headers.
Called by: the activator, the demand writer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from mlxfleet_common.wire import headers as header
from mlxfleet_gateway.core import errors
from mlxfleet_operator.api import modeldemand, resources

Key = tuple[str, str]  # (namespace, deployment)
RETRY_AFTER_S = 5
_NOT_DNS = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True, slots=True)
class Entry:
    namespace: str
    name: str
    waiting: int
    since: datetime


@dataclass(slots=True)
class Held:
    """The requests waiting now, per deployment, with their arrival times (wall clock)."""

    limit: int
    waiting: dict[Key, list[datetime]] = field(default_factory=dict)

    def admit(self, key: Key, *, at: datetime) -> bool:
        """One more request waits for `key` (False: its queue is full, refuse it)."""
        found = self.waiting.setdefault(key, [])
        if len(found) >= self.limit:
            if not found:
                del self.waiting[key]
            return False
        found.append(at)
        return True

    def leave(self, key: Key, *, at: datetime) -> None:
        """A request admitted at `at` stops waiting (served, refused, or its client left)."""
        found = self.waiting.get(key)
        if found is None:
            return
        try:
            found.remove(at)
        except ValueError:
            return
        if not found:
            del self.waiting[key]

    def count(self, key: Key) -> int:
        return len(self.waiting.get(key, ()))

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.waiting.values())

    def entries(self) -> list[Entry]:
        """What the ModelDemand says: each deployment with requests held, oldest first time."""
        return [
            Entry(namespace=ns, name=name, waiting=len(times), since=min(times))
            for (ns, name), times in sorted(self.waiting.items())
            if times
        ]


def queue_full(deployment: str, limit: int) -> errors.GatewayError:
    text = f"`{deployment}` is starting (a cold start) and {limit} requests already wait for it"
    return _refused(text, "cold_start_queue_full")


def timed_out(deployment: str, waited_s: float) -> errors.GatewayError:
    text = f"`{deployment}` did not become ready within {waited_s:.0f}s of a cold start"
    return _refused(text, "cold_start_timeout")


def _refused(text: str, code: str) -> errors.GatewayError:
    """503 with Retry-After: a cold start this gateway will not wait for (longer)."""
    return errors.GatewayError(
        503,
        f"{text}; retry in {RETRY_AFTER_S}s",
        type_="server_error",
        code=code,
        headers=((header.RETRY_AFTER, str(RETRY_AFTER_S).encode()),),
    )


def object_name(gateway: str) -> str:
    """The ModelDemand's name for a gateway replica: its name as a DNS subdomain."""
    name = _NOT_DNS.sub("-", gateway.lower()).strip("-.")[:253].strip("-.")
    return name or "gateway"


def _stamp(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def demand(
    entries: list[Entry], *, gateway: str, namespace: str, now: datetime
) -> dict[str, object] | None:
    """The ModelDemand this gateway replica holds (None: nothing is held: delete it)."""
    if not entries:
        return None
    held = entries[: modeldemand.MAX_DEPLOYMENTS]
    return {
        "apiVersion": resources.API_VERSION,
        "kind": resources.MODEL_DEMAND.kind,
        "metadata": {"name": object_name(gateway), "namespace": namespace},
        "spec": {
            "gateway": gateway,
            "renewTime": _stamp(now),
            "deployments": [
                {
                    "namespace": e.namespace,
                    "name": e.name,
                    "waiting": e.waiting,
                    "since": _stamp(e.since),
                }
                for e in held
            ],
        },
    }
