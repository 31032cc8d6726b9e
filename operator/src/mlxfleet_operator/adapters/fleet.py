"""The operator's live view of the fleet: one agent client and the last agent answer per node,
and the agent requests the handlers make, with their answers as core's typed facts.

The InferenceNode poller fills it every few seconds; the ModelDeployment and SwapPlan handlers
read it (data-plane port, cached models with their shapes, slots) and ask agents through it:
`poll`, `put_slot`, `delete_slot`, `prefetch` and `observe` never raise on an agent's error, they
return it as a `nodes.Poll`, `facts.Outcome`, `facts.Prefetch` or `swapplan.state.NodeSlot`.
It is memory only: after a restart the handlers wait for the first poll of each node.
May import: the standard library, `agent`, `kube`, `api`, `core` (fact types), the agent
`contract`. Called by: handlers (through `runtime.Runtime.fleet`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import agent, kube
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core import nodes
from mlxfleet_operator.core.deployment import facts, slots
from mlxfleet_operator.core.swapplan import state as plan_state


class CredentialsError(Exception):
    """The token (or CA) Secret of a node cannot be read: a person must fix the reference."""


class CredentialsNotAllowed(CredentialsError):
    """The token (or CA) Secret is not labelled as agent credentials: it is never used."""


@dataclass
class Entry:
    client: agent.AgentClient
    state: contract.AgentState | None = None
    polled_at: datetime | None = None

    @property
    def endpoint(self) -> str | None:
        if self.state is None:
            return None
        return agent.data_endpoint(self.client.credentials.url, self.state.data_port)


class Fleet:
    def __init__(self, kube_: kube.Kube) -> None:
        self.kube = kube_
        self.entries: dict[str, Entry] = {}
        self._lock = asyncio.Lock()

    async def credentials(self, node: inode.InferenceNode) -> agent.Credentials:
        spec = node.spec.agent
        ref = spec.token_secret_ref
        try:
            token = await self.kube.agent_credential(
                namespace=ref.namespace, name=ref.name, key=ref.key
            )
            ca = None
            if spec.ca_secret_ref is not None:
                c = spec.ca_secret_ref
                ca = await self.kube.agent_credential(namespace=c.namespace, name=c.name, key=c.key)
        except kube.SecretNotAllowed as exc:
            raise CredentialsNotAllowed(str(exc)) from exc
        except kube.SecretMissing as exc:
            raise CredentialsError(str(exc)) from exc
        return agent.Credentials(url=spec.url, token=token, ca_pem=ca)

    async def client(self, node: inode.InferenceNode) -> agent.AgentClient:
        """The node's client, rebuilt when its URL, token or CA changed."""
        name = node.metadata.name or ""
        creds = await self.credentials(node)
        async with self._lock:
            entry = self.entries.get(name)
            if entry is not None and entry.client.credentials == creds:
                return entry.client
            old = entry.client if entry is not None else None
            self.entries[name] = Entry(
                client=agent.AgentClient(creds), state=entry.state if entry else None
            )
        if old is not None:
            await old.aclose()
        return self.entries[name].client

    def record(self, name: str, state: contract.AgentState | None, *, now: datetime) -> None:
        entry = self.entries.get(name)
        if entry is not None and state is not None:
            entry.state = state
            entry.polled_at = now

    def slot_removed(self, name: str, slot: str) -> None:
        """Forget a slot we just deleted, so the next reconcile does not trust the old answer."""
        entry = self.entries.get(name)
        if entry is not None and entry.state is not None:
            kept = [s for s in entry.state.slots if s.name != slot]
            entry.state = entry.state.model_copy(update={"slots": kept})

    def get(self, name: str) -> Entry | None:
        return self.entries.get(name)

    def runs(self, name: str, slot: str) -> bool:
        """The node's last answer listed the slot."""
        entry = self.entries.get(name)
        return (
            entry is not None
            and entry.state is not None
            and any(s.name == slot for s in entry.state.slots)
        )

    def node_facts(self, found: Iterable[inode.InferenceNode]) -> list[facts.NodeFacts]:
        """Each InferenceNode with its agent's last answer (None: not polled yet)."""
        out = []
        for node in found:
            entry = self.entries.get(node.metadata.name or "")
            out.append(
                facts.NodeFacts(
                    node=node,
                    state=entry.state if entry else None,
                    endpoint=entry.endpoint if entry else None,
                )
            )
        return out

    # ------------------------------------------------------------------ agent requests

    async def poll(self, node: inode.InferenceNode) -> nodes.Poll:
        """`GET /v1/state` of the node's agent, failures named by what a person must fix."""
        try:
            client = await self.client(node)
            state = await client.state()
        except CredentialsNotAllowed as exc:
            return nodes.Poll(None, nodes.PollError.SECRET_NOT_ALLOWED, str(exc))
        except CredentialsError as exc:
            return nodes.Poll(None, nodes.PollError.SECRET_MISSING, str(exc))
        except agent.AgentRefused as exc:
            denied = exc.status in (401, 403)
            error = nodes.PollError.UNAUTHORIZED if denied else nodes.PollError.UNREACHABLE
            return nodes.Poll(None, error, str(exc))
        except agent.AgentUnreachable as exc:
            return nodes.Poll(None, nodes.PollError.UNREACHABLE, str(exc))
        return nodes.Poll(state)

    async def put_slot(self, slot: str, request: slots.SlotRequest) -> facts.Outcome | None:
        """PUT the slot on the request's node (None: no client for that node yet)."""
        entry = self.entries.get(request.node)
        if entry is None:
            return None
        try:
            await entry.client.put_slot(slot, request.spec)
        except agent.AgentError as exc:
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

    async def prefetch(self, name: str, model: ModelRef) -> facts.Prefetch | None:
        """Ask the node's agent to fetch and size `model` (None: no client for that node yet)."""
        entry = self.entries.get(name)
        if entry is None:
            return None
        try:
            cached = await entry.client.prefetch(model)
        except agent.AgentError as exc:
            return facts.Prefetch(name, error=str(exc), status=exc.status)
        return facts.Prefetch(name, cached=cached)

    async def observe(self, names: Iterable[str], slot: str) -> dict[str, plan_state.NodeSlot]:
        """Fresh slot state and swap records from each node's agent (not the poller's copy)."""
        out: dict[str, plan_state.NodeSlot] = {}
        for name in names:
            entry = self.entries.get(name)
            if entry is None:
                out[name] = plan_state.NodeSlot(reachable=False)
                continue
            try:
                state = await entry.client.state()
                swaps = await entry.client.swaps(slot)
            except agent.AgentError:
                out[name] = plan_state.NodeSlot(reachable=False)
                continue
            found = next((s for s in state.slots if s.name == slot), None)
            out[name] = plan_state.NodeSlot.observed(found, swaps)
        return out

    async def forget(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is not None:
            await entry.client.aclose()

    async def aclose(self) -> None:
        for name in list(self.entries):
            await self.forget(name)


def _outcome(node: str, exc: agent.AgentError) -> facts.Outcome:
    unreachable = isinstance(exc, agent.AgentUnreachable)
    return facts.Outcome(node, str(exc), exc.status, exc.field, unreachable=unreachable)
