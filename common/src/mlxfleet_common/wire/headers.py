"""The HTTP header names the agent's data plane and the gateway read or write (pure): one home
for each, as ASGI header names (lowercase bytes).

May import: nothing. Called by: the agent's dataplane (app, relay, errors) and controlapi.guard,
peers.server, the gateway's proxy, relay, core (errors, coldstart), wire.connlimits.
"""

from __future__ import annotations

from typing import Final

AUTHORIZATION: Final = b"authorization"
RETRY_AFTER: Final = b"retry-after"
# names the agent slot a request is for; the agent honours it only from a caller holding a
# data-plane key (the gateway, with the node's own key)
SLOT: Final = b"x-mlxfleet-slot"
# answers: which backend served (the agent: its port; the gateway: the agent or provider)
BACKEND: Final = b"x-mlxfleet-backend"
# the agent's: how long the request waited in the slot's queue
QUEUE_MS: Final = b"x-mlxfleet-queue-ms"
# the gateway's: a fallback served, the replicas tried first, the cold start the request waited for
FALLBACK: Final = b"x-mlxfleet-fallback"
TRIED: Final = b"x-mlxfleet-tried"
COLD_START_MS: Final = b"x-mlxfleet-cold-start-ms"
