"""InferenceNode heartbeat: poll the agent's /v1/state every --poll-seconds, debounce misses, write
status (memory, disk, slots, cached models, conditions) when it changed (lastHeartbeatTime alone
only every --heartbeat-write-seconds, longer in a fleet so large that heartbeats alone would write
more than once in 2 s, stretched per node by up to 50 % so nodes do not write together), post an
Event on Ready flips. A node no person approved (it joined itself) is not polled: its status says
AwaitingApproval and the fleet forgets it (no client, no placement, no peer). An approved node
whose agent lacks its own keys is sent them (`fleet.keep_credentials`).
With --agent-metrics-namespace, publish the agent's /metrics as a scrape target (written only
when its URL changed; a failure never holds up the heartbeat).

May import: kopf, adapters, core, api, settings, `guard`. Called by: kopf.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import (
    events,
    kube,
    metrics,
    objects,
    publishing,
    runtime,
    statuspatch,
)
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import resources
from mlxfleet_operator.core.kit import events as core_events
from mlxfleet_operator.core.kit import heartbeat
from mlxfleet_operator.core.node import status as nodestatus
from mlxfleet_operator.handlers import guard

log = logging.getLogger("mlxfleet.nodes")
KIND = resources.INFERENCE_NODE
NODES = (resources.GROUP, resources.VERSION, KIND.plural)
IGNORED = "reservedMemory ignored"  # announced once per node and operator process
NO_CREDENTIALS = "credentials refused"  # announced once per node and operator process


async def heartbeat_poll(
    body: kopf.Body, name: str, memo: kopf.Memo, patch: kopf.Patch, **kwargs: Any
) -> None:
    node = _parsed(body, name, kwargs.get("inference_nodes"))
    async with guard.guarded(KIND, body, memo) as run:
        rt, misses = run.rt, run.rt.config.misses
        if not node.approved():
            await _unapproved(node, body, patch, rt)
            return
        poll = await rt.fleet.poll(node)
        if poll.state is not None:
            failed = await rt.fleet.keep_credentials(node, poll.state)
            if failed is not None and rt.first_time(str(body.metadata.uid), NO_CREDENTIALS):
                events.post(body, nodestatus.credentials_refused(failed))
        now, kept = runtime.now(), rt.objects.of(str(body.metadata.uid))
        health = kept.health or nodestatus.health_from_status(node.status)
        seen = heartbeat.observe(
            health, ok=poll.state is not None, now=now, threshold=misses, error=poll.message
        )
        kept.health = seen.health
        rt.fleet.record(name, poll.state, now=now)
        every = nodestatus.heartbeat_every(
            name,
            timedelta(seconds=rt.config.heartbeat_write_seconds),
            fleet=len(rt.fleet.entries),
        )
        status = nodestatus.status(
            _as_written(node, kept),
            poll,
            seen.health,
            threshold=misses,
            now=now,
            heartbeat_every=every,
        )
        statuspatch.write_status(patch, status, body, rt.objects)
        kept.heartbeat_written = status.last_heartbeat_time
        metrics.NODE_READY.labels(name).set(1 if seen.health.ready else 0)
        metrics.NODE_MISSES.labels(name).set(seen.health.misses)
        metrics.observe_token_expiry(name, rt.fleet.token_expiry(name))
        ignored = nodestatus.ignored_fields(node)
        if ignored is not None and rt.first_time(str(body.metadata.uid), IGNORED):
            events.post(body, ignored)
        events.post(body, nodestatus.flip_event(seen, poll))
        await _publish_metrics(rt, body, node)


def _parsed(
    body: kopf.Body, name: str, index: Mapping[str, Iterable[inode.InferenceNode]] | None
) -> inode.InferenceNode:
    """The node as the index parsed it from this very version of its body (read only: shared
    with every reconcile), else parsed here. A poll parsed every node's body again, 100 times a
    second at 500 nodes (5 % of the operator's CPU)."""
    version = body.metadata.get("resourceVersion")
    for node in index.get(name, ()) if index is not None else ():
        if version is not None and node.metadata.resource_version == version:
            return node
    return inode.InferenceNode.model_validate(dict(body))


def _scrape_target(
    rt: runtime.Runtime, body: kopf.Body, node: inode.InferenceNode
) -> tuple[publishing.Publication, publishing.Endpoint] | None:
    """The node's agent /metrics as a publication and its one endpoint (None: not published)."""
    namespace = rt.config.agent_metrics_namespace
    if namespace is None:
        return None
    url = urlsplit(node.spec.agent.url)
    scheme = url.scheme if url.scheme in publishing.AGENT_METRICS_PORT_NAMES else "http"
    port = url.port or (443 if scheme == "https" else 80)
    pub = publishing.of_agent(dict(body), namespace=namespace, scheme=scheme, port=port)
    return pub, publishing.Endpoint(node.metadata.name or "", url.hostname or "", port, ready=True)


async def _publish_metrics(rt: runtime.Runtime, body: kopf.Body, node: inode.InferenceNode) -> None:
    """Publish (unchanged: nothing is sent) the scrape target; a conflict is told once as an
    Event, an API error is logged and tried again at the next poll."""
    target = _scrape_target(rt, body, node)
    if target is None:
        return
    try:
        await rt.publisher.publish(target[0], [target[1]])
    except publishing.ServiceConflict as exc:
        if rt.first_time(str(body.metadata.uid), str(exc), about="metrics"):
            conflict = core_events.Event(cond.Reason.SERVICE_CONFLICT, str(exc), warning=True)
            events.post(body, conflict)
    except kube.KubeError as exc:
        log.warning("scrape target of %s not published: %s", node.metadata.name, exc)


async def _unapproved(
    node: inode.InferenceNode,
    body: kopf.Body,
    patch: kopf.Patch,
    rt: runtime.Runtime,
) -> None:
    """A node that joined itself and waits for a person: never polled, forgotten by the fleet."""
    name = node.metadata.name or ""
    if rt.fleet.get(name) is not None:
        await rt.fleet.forget(name)
    rt.objects.of(str(body.metadata.uid)).health = None
    awaiting = nodestatus.awaiting_approval(node, now=runtime.now())
    statuspatch.write_status(patch, awaiting, body, rt.objects)
    metrics.NODE_READY.labels(name).set(0)


def _as_written(node: inode.InferenceNode, kept: objects.ObjectState) -> inode.InferenceNode:
    """The node with the heartbeat time this process last wrote, when kopf's body does not show
    it yet (it lags our writes under load): the heartbeat is written again only when that one
    is `heartbeat_every` old, not on every poll until the body catches up."""
    written, shown = kept.heartbeat_written, node.status.last_heartbeat_time
    if written is None or (shown is not None and shown >= written):
        return node
    return node.model_copy(
        update={"status": node.status.model_copy(update={"last_heartbeat_time": written})}
    )


async def forget(body: kopf.Body, name: str, memo: kopf.Memo, **_: Any) -> None:
    async with guard.guarded(KIND, body, memo, last=True) as run:
        await run.rt.fleet.forget(name)
        run.rt.nodes.forget(name)
        metrics.forget_node(name)
        target = _scrape_target(run.rt, body, inode.InferenceNode.model_validate(dict(body)))
        if target is not None:
            await run.rt.publisher.unpublish(target[0])


def register(registry: kopf.OperatorRegistry, config: opsettings.OperatorSettings) -> None:
    kopf.timer(*NODES, interval=config.poll_seconds, sharp=True, registry=registry)(heartbeat_poll)
    kopf.on.delete(*NODES, optional=True, registry=registry)(forget)
