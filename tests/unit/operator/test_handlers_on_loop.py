"""Every resource handler the operator registers runs on kopf's own loop: kopf hands a plain
function to a thread pool, and the index functions were plain ones (a thread hop per object
change, three per ModelDeployment change, for microseconds of work; at 500 x 1,000 the pool's
threads took CPU from the loop that decides)."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from kopf._core.actions import invocation

from mlxfleet_operator import handlers
from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.handlers import indexes


def _resource_handlers(registry: kopf.OperatorRegistry) -> list[object]:
    found: list[object] = []
    for kind in (registry._indexing, registry._changing, registry._spawning, registry._watching):
        found.extend(kind.get_all_handlers())
    return found


def test_no_resource_handler_runs_in_a_thread() -> None:
    registry = handlers.registry(opsettings.OperatorSettings())
    found = _resource_handlers(registry)
    assert len(found) > 10
    in_threads = [h.id for h in found if not invocation.is_async_fn(h.fn)]  # type: ignore[attr-defined]
    assert in_threads == []


def test_an_index_function_gives_kopf_the_same_value_on_the_loop() -> None:
    registry = kopf.OperatorRegistry()
    indexes.register(registry)
    (handler,) = [h for h in registry._indexing.get_all_handlers() if h.id == "deployments"]
    body = kopf.Body({"metadata": {"name": "d", "namespace": "ns"}, "status": {"readyReplicas": 2}})
    kwargs: dict[str, Any] = {"namespace": "ns", "name": "d", "body": body, "memo": kopf.Memo()}
    got = asyncio.run(invocation.invoke(handler.fn, kwargs=kwargs))
    assert got == indexes.deployments(**kwargs)
    assert got[naming.slot_name("ns", "d")].ready == 2
