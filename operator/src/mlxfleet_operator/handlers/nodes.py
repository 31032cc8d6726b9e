"""InferenceNode heartbeat: poll the agent's /v1/state every few seconds, debounce misses,
write status (memory, disk, slots, cached models, conditions), post an Event on Ready flips.

May import: kopf, adapters, core, api, settings. Called by: kopf.
"""

from __future__ import annotations

import time
from typing import Any

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import agent, fleet, kube, metrics, runtime
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import resources
from mlxfleet_operator.core import heartbeat
from mlxfleet_operator.core import nodes as core

CONFIG = opsettings.current()
NODES = (resources.GROUP, resources.VERSION, resources.INFERENCE_NODE.plural)
IGNORED = "reservedMemory ignored"  # announced once per node and operator process


async def _poll(rt: runtime.Runtime, node: inode.InferenceNode) -> core.Poll:
    try:
        client = await rt.fleet.client(node)
        state = await client.state()
    except fleet.CredentialsNotAllowed as exc:
        return core.Poll(None, core.PollError.SECRET_NOT_ALLOWED, str(exc))
    except fleet.CredentialsError as exc:
        return core.Poll(None, core.PollError.SECRET_MISSING, str(exc))
    except agent.AgentRefused as exc:
        error = (
            core.PollError.UNAUTHORIZED if exc.status in (401, 403) else core.PollError.UNREACHABLE
        )
        metrics.AGENT_CALLS.labels("state", "refused").inc()
        return core.Poll(None, error, str(exc))
    except agent.AgentUnreachable as exc:
        metrics.AGENT_CALLS.labels("state", "unreachable").inc()
        return core.Poll(None, core.PollError.UNREACHABLE, str(exc))
    metrics.AGENT_CALLS.labels("state", "ok").inc()
    return core.Poll(state)


@kopf.timer(*NODES, interval=CONFIG.poll_seconds, sharp=True)
async def heartbeat_poll(
    body: kopf.Body, name: str, memo: kopf.Memo, patch: kopf.Patch, **_: Any
) -> None:
    started = time.monotonic()
    rt = runtime.of(memo)
    node = inode.InferenceNode.model_validate(dict(body))
    poll = await _poll(rt, node)
    now = runtime.now()
    health = memo.get("health") or core.health_from_status(node.status)
    seen = heartbeat.observe(
        health, ok=poll.state is not None, now=now, threshold=CONFIG.misses, error=poll.message
    )
    memo["health"] = seen.health
    rt.fleet.record(name, poll.state, now=now)
    status = core.status(node, poll, seen.health, threshold=CONFIG.misses, now=now)
    kube.write_status(patch, status, body)
    metrics.NODE_READY.labels(name).set(1 if seen.health.ready else 0)
    if node.spec.reserved_memory is not None and rt.first_time(str(body.metadata.uid), IGNORED):
        kopf.warn(
            body,
            reason="ReservedMemoryIgnored",
            message="spec.reservedMemory is not used: placement uses the agent's own memory "
            "budget (status.memory.allocatableBytes); set memory_budget in the agent config",
        )
    if seen.flipped:
        ready = bool(seen.health.ready)
        kopf.event(
            body,
            type="Normal" if ready else "Warning",
            reason="NodeReady" if ready else "NodeNotReady",
            message="agent answers" if ready else f"heartbeat missed: {poll.message}",
        )
    metrics.RECONCILE_SECONDS.labels("InferenceNode").observe(time.monotonic() - started)
    metrics.RECONCILES.labels("InferenceNode", "ok").inc()


@kopf.on.delete(*NODES, optional=True)
async def forget(name: str, memo: kopf.Memo, **_: Any) -> None:
    await runtime.of(memo).fleet.forget(name)
    metrics.NODE_READY.labels(name).set(0)
