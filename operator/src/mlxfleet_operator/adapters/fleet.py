"""The operator's agents, asked: one client per node (its URL, token and CA), the polls that fill
the fleet's view (`fleetview.FleetView`, which `Fleet` is) and the agent requests the handlers
make, with their answers as core's typed facts.

The InferenceNode poller fills the view every few seconds (`poll`, then `record`); the
ModelDeployment and SwapPlan handlers ask agents through it: `poll`, `put_slot`, `delete_slot`,
`prefetch` and `observe` never raise on an agent's error, they return it as a `nodestatus.Poll`,
`facts.Outcome`, `facts.Prefetch` or `swapplan.state.NodeSlot`; a refused PUT releases its
reservation and a DELETE forgets the slot in the view.
Each node's URL, token and CA come from `credentials.Cache` (read from their Secrets at most
every `credentials_ttl` seconds per node); a poll the agent answers 401/403 drops them and asks
once more with the Secrets read again (a rotated token).
Every agent request is sent and timed on the fleet's own `agent.IoLoop` thread, so a busy
operator loop never makes a healthy agent look unreachable (heartbeats measure the agent).
With the fleet key (`fleet_keys`), each polled node is sent its own keys when its answer shows
it lacks them (`keep_credentials`), and a prefetch names each peer with the fetch token that
peer accepts from the asking node for that model (`contract.credentials`); without it, peers
are bare URLs (the agents' legacy shared peer token). Only approved nodes are polled, so only
they get keys, are peers or are asked to fetch.
May import: the standard library, `agent`, `credentials`, `fleetview`, `kube`, `api`, `core`
(fact types), the agent `contract`. Called by: handlers (through `runtime.Runtime.fleet`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import agent, credentials, fleetview, kube
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import facts
from mlxfleet_operator.core.node import status as nodestatus
from mlxfleet_operator.core.swapplan import state as plan_state


class Fleet(fleetview.FleetView):
    """The fleet's view (`fleetview.FleetView`) and the agents it is the view of, asked."""

    def __init__(
        self,
        kube_: kube.Kube,
        *,
        fleet_keys: Sequence[str] = (),
        credentials_ttl: float = credentials.TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(clock=clock)
        self.fleet_keys = tuple(fleet_keys)
        self.io = agent.IoLoop()  # started on the first request, stopped by `aclose`
        self._lock = asyncio.Lock()
        self.credentials = credentials.Cache(kube_, ttl=credentials_ttl, clock=clock)

    async def client(self, node: inode.InferenceNode) -> agent.AgentClient:
        """The node's client, rebuilt when its URL, token or CA changed."""
        name = node.metadata.name or ""
        creds = await self.credentials.get(node)
        async with self._lock:
            entry = self.entries.get(name)
            if entry is not None and entry.client.credentials == creds:
                return entry.client
            old = entry.client if entry is not None else None
            self.entries[name] = fleetview.Entry(
                client=agent.AgentClient(creds, io=self.io),
                state=entry.state if entry else None,
            )
            self._bump(name, node=True)  # its endpoint may have moved
        if old is not None:
            await old.aclose()
        return self.entries[name].client

    def token_expiry(self, name: str) -> datetime | None:
        """When the node's agent token expires, as its Secret says (None: unknown, never)."""
        entry = self.entries.get(name)
        return entry.client.credentials.token_expires_at if entry is not None else None

    async def poll(self, node: inode.InferenceNode) -> nodestatus.Poll:
        """`GET /v1/state` of the node's agent, failures named by what a person must fix. A
        401/403 with cached credentials asks once more with the Secret read again (rotated)."""
        answer = await self._poll(node)
        if answer.error is nodestatus.PollError.UNAUTHORIZED and self.credentials.forget(
            node.metadata.name or ""
        ):
            answer = await self._poll(node)
        return answer

    async def _poll(self, node: inode.InferenceNode) -> nodestatus.Poll:
        try:
            client = await self.client(node)
            state = await client.state()
        except credentials.CredentialsNotAllowed as exc:
            return nodestatus.Poll(None, nodestatus.PollError.SECRET_NOT_ALLOWED, str(exc))
        except credentials.CredentialsInvalid as exc:
            return nodestatus.Poll(None, nodestatus.PollError.SECRET_INVALID, str(exc))
        except credentials.CredentialsError as exc:
            return nodestatus.Poll(None, nodestatus.PollError.SECRET_MISSING, str(exc))
        except agent.AgentRefused as exc:
            denied = exc.status in (401, 403)
            error = (
                nodestatus.PollError.UNAUTHORIZED if denied else nodestatus.PollError.UNREACHABLE
            )
            return nodestatus.Poll(None, error, str(exc))
        except agent.AgentUnreachable as exc:
            return nodestatus.Poll(None, nodestatus.PollError.UNREACHABLE, str(exc))
        return nodestatus.Poll(state)

    async def put_slot(self, slot: str, request: facts.SlotRequest) -> facts.Outcome | None:
        """PUT the slot on the request's node (None: no client for that node yet)."""
        entry = self.entries.get(request.node)
        if entry is None:
            return None
        try:
            await entry.client.put_slot(slot, request.spec, request_id=request.request_id)
        except agent.AgentError as exc:
            self.release(request.node, slot)
            return _outcome(request.node, exc)
        return facts.Outcome(request.node)

    async def delete_slot(self, name: str, slot: str) -> facts.Outcome | None:
        """DELETE the slot on the node (None: no client for that node yet); once gone, the
        cached answer forgets it, so the next reconcile does not trust the old answer."""
        entry = self.entries.get(name)
        if entry is None:
            return None
        try:
            await entry.client.delete_slot(slot)
        except agent.AgentError as exc:
            return _outcome(name, exc)
        self.slot_removed(name, slot)
        return facts.Outcome(name)

    async def keep_credentials(
        self, node: inode.InferenceNode, state: contract.AgentState
    ) -> str | None:
        """Send the node its own keys when its agent's answer shows it lacks them (nothing
        without a fleet key); why that failed, else None."""
        entry = self.entries.get(node.metadata.name or "")
        if not self.fleet_keys or entry is None:
            return None
        wanted = nodestatus.credentials(self.fleet_keys, node)
        if not nodestatus.needs_credentials(state, wanted):
            return None
        try:
            await entry.client.put_credentials(wanted)
        except agent.AgentError as exc:
            return str(exc)
        return None

    def _with_tokens(
        self, fetcher: str, model: ModelRef, peers: Sequence[str]
    ) -> list[contract.Peer | str]:
        """Each peer URL with the fetch token that peer accepts from `fetcher` for `model` (by
        the node whose client has that URL); bare URLs without a fleet key."""
        if not self.fleet_keys:
            return list(peers)
        named = {e.client.credentials.url: n for n, e in self.entries.items() if n != fetcher}
        mid = contract.credentials.model_id(model.source, model.revision)
        out: list[contract.Peer | str] = []
        for url in peers:
            if (peer := named.get(url)) is not None:
                key = contract.credentials.peer_key(self.fleet_keys[0], peer)
                token = contract.credentials.fetch_token(key, fetcher=fetcher, model_id=mid)
                out.append(contract.Peer(url=url, token=token))
        return out

    async def prefetch(
        self, name: str, model: ModelRef, peers: Sequence[str] = ()
    ) -> facts.Prefetch | None:
        """Ask the node's agent to fetch and size `model`, from `peers` (control URLs) before the
        origin (None: no client for that node yet)."""
        entry = self.entries.get(name)
        if entry is None:
            return None
        try:
            cached = await entry.client.prefetch(model, self._with_tokens(name, model, peers))
        except agent.AgentError as exc:
            return facts.Prefetch(name, error=str(exc), status=exc.status)
        return facts.Prefetch(name, cached=cached)

    async def observe(self, names: Iterable[str], slot: str) -> dict[str, plan_state.NodeSlot]:
        """Fresh slot state and swap records from each node's agent (not the poller's copy), with
        the agent's clock offset measured on this very answer."""
        out: dict[str, plan_state.NodeSlot] = {}
        for name in names:
            entry = self.entries.get(name)
            if entry is None:
                out[name] = plan_state.NodeSlot(reachable=False)
                continue
            try:
                state, offset = await entry.client.clocked_state()
                swaps = await entry.client.swaps(slot)
            except agent.AgentError:
                out[name] = plan_state.NodeSlot(reachable=False)
                continue
            found = next((s for s in state.slots if s.name == slot), None)
            out[name] = plan_state.NodeSlot.observed(found, swaps, offset)
        return out

    async def forget(self, name: str) -> None:
        """Forget the node (its credentials and everything the view keeps of it), closing its
        client."""
        self.credentials.forget(name)
        entry = self.drop(name)
        if entry is not None:
            await entry.client.aclose()

    async def aclose(self) -> None:
        for name in list(self.entries):
            await self.forget(name)
        await asyncio.to_thread(self.io.close)


def _outcome(node: str, exc: agent.AgentError) -> facts.Outcome:
    unreachable = isinstance(exc, agent.AgentUnreachable)
    return facts.Outcome(node, str(exc), exc.status, exc.field, unreachable=unreachable)
