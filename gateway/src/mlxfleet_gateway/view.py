"""The gateway's current view: the watched objects, parsed, and what is derived from them.

The watches hand over whole snapshots (name -> raw object) per kind; `View` parses them with the
operator's pydantic models (an object that does not parse is skipped and reported by name, never
a crash), rebuilds the catalog and the key ring, and tells the balancer which replicas exist.
InferenceNodes count only by which are approved (`core.trust`): their status changes on every
heartbeat write, so a snapshot that leaves that set as it was rebuilds nothing;
replicas the operator reports not ready (busy, loading...) are logged, with why, as they leave
and rejoin routing.
Runs on the event loop only (the watch threads post snapshots with call_soon_threadsafe);
`changed` lets a held request (the activator) wait for the next snapshot.
May import: the standard library, core, mlxfleet_operator.api. Called by: watch, proxy, server.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Mapping
from typing import Any

import pydantic

from mlxfleet_gateway.core import balancer, budgets, catalog, keys, trust
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import providerkeys as providers

log = logging.getLogger("mlxfleet_gateway.view")
JsonDict = dict[str, Any]
KINDS = ("deployments", "routes", "api-keys", "provider-keys", "budgets", "nodes")


def secret_data(raw: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's data, base64-decoded (undecodable values are left out)."""
    out: dict[str, str] = {}
    for name, value in (raw.get("data") or {}).items():
        try:
            out[name] = base64.b64decode(value).decode().strip()
        except (ValueError, UnicodeDecodeError):
            log.warning("Secret %s: key %s is not base64 UTF-8", _name(raw), name)
    return out


def _name(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def unrouted(deployments: list[mdep.ModelDeployment]) -> dict[str, str]:
    """Replicas with an endpoint that are not ready (so not routed to), and why: the
    placement's message (`busy, out of routing: ...`, a load in progress), else its phase."""
    out: dict[str, str] = {}
    for md in deployments:
        for p in md.status.placements:
            if p.endpoint and not p.ready:
                rid = f"{md.metadata.namespace or ''}/{md.metadata.name or ''}@{p.node}"
                out[rid] = p.message or str(p.phase)
    return out


class View:
    def __init__(self, balance: balancer.Balancer, *, fleet_key: str | None = None) -> None:
        self.balancer = balance
        self.nodes = trust.Credentials(fleet_key)
        self.raw: dict[str, dict[str, JsonDict]] = {kind: {} for kind in KINDS}
        self.synced: set[str] = set()
        self.catalog = catalog.Catalog()
        self.keys = keys.KeyRing()
        self.budgets = budgets.NONE  # prices and team budgets (the mlxfleet-budgets Secret)
        self.problems: dict[str, str] = {}  # object -> why it is ignored
        self.unrouted: dict[str, str] = {}  # replica id -> why it gets no requests (not ready)
        self.version = 0
        self._waiters: list[asyncio.Future[None]] = []  # `changed` callers

    @property
    def ready(self) -> bool:
        """Every watch has listed once."""
        return self.synced >= set(KINDS)

    def replace(self, kind: str, objects: Mapping[str, JsonDict]) -> None:
        """A watch's whole current set of one kind."""
        if kind == "nodes":
            changed = self.nodes.update(trust.approved(objects.values()))
            if not changed and kind in self.synced:
                return
        else:
            self.raw[kind] = dict(objects)
        self.synced.add(kind)
        self.rebuild()

    def _parse(
        self, kind: str, model: type[pydantic.BaseModel], found: dict[str, str]
    ) -> list[Any]:
        out = []
        for name, raw in sorted(self.raw[kind].items()):
            try:
                out.append(model.model_validate(raw))
            except pydantic.ValidationError as exc:
                found[f"{kind}/{name}"] = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
                )
        return out

    def rebuild(self) -> None:
        found: dict[str, str] = {}
        self._rebuild(found)
        for what, why in found.items():
            if self.problems.get(what) != why:
                log.warning("ignoring %s: %s", what, why)
        self.problems = found

    def _rebuild(self, found: dict[str, str]) -> None:
        deployments = self._parse("deployments", mdep.ModelDeployment, found)
        routes = self._parse("routes", mroute.ModelRoute, found)
        provider_keys = []
        for name, raw in sorted(self.raw["provider-keys"].items()):
            meta = raw.get("metadata") or {}
            key, wrong = providers.from_secret(
                meta.get("name", name), meta.get("annotations") or {}, secret_data(raw)
            )
            provider_keys.append(key)
            if wrong:
                found[f"provider-keys/{name}"] = "; ".join(wrong)
        ring = []
        for name, raw in sorted(self.raw["api-keys"].items()):
            secret = (raw.get("metadata") or {}).get("name", name)
            try:
                ring.append(keys.from_secret(secret, secret_data(raw)))
            except keys.InvalidKey as exc:
                found[f"api-keys/{name}"] = str(exc)
        self.budgets = self._budgets(found)
        self._note_unrouted(unrouted(deployments))
        self.catalog = catalog.build(deployments, routes, provider_keys, nodes=self.nodes.headers)
        for ext in self.catalog.externals():
            if ext.problem is not None:
                found[ext.id] = ext.problem  # logged: the route's backend is not used
        self.keys = keys.KeyRing(ring)
        self.balancer.sync(self.candidates())
        self.version += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def changed(self, since: int, *, timeout_s: float) -> None:
        """Return once the view is newer than version `since`, or after `timeout_s`."""
        if self.version > since or timeout_s <= 0:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            pass
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _budgets(self, found: dict[str, str]) -> budgets.Budgets:
        out = budgets.NONE
        for name, raw in sorted(self.raw["budgets"].items()):
            secret = (raw.get("metadata") or {}).get("name", name)
            if secret != budgets.SECRET_NAME:
                found[f"budgets/{name}"] = (
                    f"only the Secret named {budgets.SECRET_NAME} holds the budgets"
                )
                continue
            try:
                out = budgets.from_secret(secret, secret_data(raw))
            except budgets.InvalidBudgets as exc:
                found[f"budgets/{name}"] = str(exc)  # logged; no prices, no team budgets
        return out

    def _note_unrouted(self, now: dict[str, str]) -> None:
        """Log each replica leaving routing (with the operator's reason: busy, loading, ...)
        and coming back, once per change, not per status update."""
        for rid in sorted(now.keys() - self.unrouted.keys()):
            log.info("replica out of routing", extra={"replica": rid, "why": now[rid]})
        for rid in sorted(self.unrouted.keys() - now.keys()):
            log.info("replica back in routing", extra={"replica": rid})
        self.unrouted = now

    def candidates(self) -> list[balancer.Candidate]:
        """Every replica and external backend the balancer should know."""
        out: dict[str, balancer.Candidate] = {}
        for dep in self.catalog.deployments.values():
            for r in dep.replicas:
                out[r.id] = balancer.Candidate(r.id, r.url, dep.capacity, r.auth)
        for t in self.catalog.externals():
            out[t.id] = balancer.Candidate(t.id, t.url, 1_000_000)
        return list(out.values())
