"""The operator's live view of the fleet: one agent client and the last agent answer per node.

The InferenceNode poller fills it every few seconds; the ModelDeployment and SwapPlan handlers
read it (data-plane port, cached models with their shapes, slots) and use its clients. It is
memory only: after a restart the handlers wait for the first poll of each node.
May import: the standard library, `agent`, `kube`, `api`, the agent `contract`.
Called by: handlers (through `runtime.Runtime.fleet`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import agent, kube
from mlxfleet_operator.api import inferencenode as inode


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

    async def forget(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is not None:
            await entry.client.aclose()

    async def aclose(self) -> None:
        for name in list(self.entries):
            await self.forget(name)
