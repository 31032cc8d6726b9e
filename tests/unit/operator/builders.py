"""Builders for the operator's unit tests: a ModelDeployment, an agent's answer, an
InferenceNode and the facts core decides from (pure values, no sockets)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from mlxfleet_agent import contract
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.fleet import facts as dfacts

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GIB = 2**30
A = "file:///models/a"
B = "file:///models/b"
SHAPE = contract.ModelShape(num_layers=2, num_kv_heads=2, head_dim=16)
T = NOW.isoformat()


def kopf_body(raw: Mapping[str, Any]) -> kopf.Body:
    """The body kopf hands a handler, from a Kubernetes object as the API server sends it
    (kopf's `RawBody` is a closed TypedDict that has no `generation`, nor other fields the
    server adds, so a real object is one only by a cast)."""
    return kopf.Body(cast(kopf.RawBody, raw))


def md(
    source: str = A, *, placements: list[dict[str, Any]] | None = None, **spec: Any
) -> mdep.ModelDeployment:
    body: dict[str, Any] = {"model": {"source": source}, "replicas": 2, **spec}
    return mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": "chat", "namespace": "ns", "generation": 3, "uid": "u"},
            "spec": body,
            "status": {"placements": placements or []},
        }
    )


def state(
    *,
    cached: Sequence[contract.CachedModel] = (),
    slots: Sequence[contract.SlotStatus] = (),
    budget: int = 16 * GIB,
    pressure: str = "normal",
) -> contract.AgentState:
    return contract.AgentState.model_validate(
        {
            "agentVersion": "1",
            "os": "linux",
            "chip": "cpu",
            "dataPort": 9000,
            "startedAt": NOW,
            "memory": {
                "totalBytes": 32 * GIB,
                "availableBytes": 20 * GIB,
                "budgetBytes": budget,
                "pressure": pressure,
            },
            "disk": {"freeBytes": 100 * GIB, "totalBytes": 200 * GIB},
            "slots": [s.model_dump() for s in slots],
            "cachedModels": [c.model_dump() for c in cached],
        }
    )


def node(name: str, *, ready: bool = True, **spec: Any) -> inode.InferenceNode:
    return inode.InferenceNode.model_validate(
        {
            "metadata": {"name": name, "generation": 1},
            "spec": {
                "agent": {"url": "http://10.0.0.1:8470", "tokenSecretRef": {"name": "t"}},
                **spec,
            },
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "HeartbeatOK",
                        "lastTransitionTime": NOW.isoformat(),
                    }
                ]
            },
        }
    )


def fact(name: str, st: contract.AgentState | None = None, **kw: Any) -> dfacts.NodeFacts:
    return dfacts.NodeFacts(
        node=node(name, **kw), state=st or state(), endpoint=f"http://{name}:9000"
    )


def sharded_md(
    source: str, *, groups: list[dict[str, Any]] | None = None, **spec: Any
) -> mdep.ModelDeployment:
    """ns/big: one group of 2 Tensor ranks of `source`; `groups`: its status.groups."""
    body: dict[str, Any] = {
        "model": {"source": source},
        "replicas": 1,
        "sharding": {"size": 2, "mode": "Tensor"},
        **spec,
    }
    return mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": "big", "namespace": "ns", "generation": 2, "uid": "u"},
            "spec": body,
            "status": {"groups": groups or []},
        }
    )


def rank(
    node: str,
    group: str,
    *,
    slot: str,
    source: str,
    phase: str = "Ready",
    ready: bool | None = None,
    error: str | None = None,
    swap: bool = False,
    serving: str | None = None,
) -> dfacts.NodeFacts:
    """Node `node` whose agent runs rank 0 of formation `group` of ns/big in slot `slot`
    (`ready`: by default, whether `phase` is Ready; `swap`: a swap to `group` is under way in
    it; `serving`: the formation its serving backend runs, by default `group` unless swapping,
    where the old one serves until the switch)."""
    spec = contract.SlotSpec.model_validate(
        {
            "source": source,
            "servedName": "big",
            "shard": {"group": group, "rank": 0, "worldSize": 2, "hosts": ["a:1", "b:2"]},
        }
    )
    observed = contract.SlotStatus(
        name=slot,
        served_name="big",
        source=source,
        phase=phase,
        ready=phase == "Ready" if ready is None else ready,
        spec=spec,
        last_error=error,
        active_swap="s1" if swap else None,
        serving_group=serving if serving is not None or swap else group,
    )
    return fact(node, state(slots=[observed]))
