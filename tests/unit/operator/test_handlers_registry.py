"""Handler registration: settings are injected (never read at import), every handler is
registered once in the registry `main` runs, and the SwapPlans have one index."""

from __future__ import annotations

import importlib

import kopf
from kopf._core.intents import handlers as kopf_handlers

from mlxfleet_operator import handlers, settings
from mlxfleet_operator.handlers import lifecycle


def test_timer_intervals_come_from_the_settings_passed_in() -> None:
    registry = handlers.registry(settings.OperatorSettings(poll_seconds=7))
    spawning = registry._spawning.get_all_handlers()
    timers = {h.id: h.interval for h in spawning if isinstance(h, kopf_handlers.TimerHandler)}
    assert timers == {"heartbeat_poll": 7.0, "converge": 7.0, "follow": 3.5, "route_status": 7.0}
    daemons = {h.id: h.backoff for h in spawning if isinstance(h, kopf_handlers.DaemonHandler)}
    assert daemons == {"groups": 7.0}  # the sharded group watch, retried after a poll period
    fast = handlers.registry(settings.OperatorSettings(poll_seconds=0.2))
    spawning = fast._spawning.get_all_handlers()
    assert {h.id: h.interval for h in spawning if isinstance(h, kopf_handlers.TimerHandler)}[
        kopf.HandlerId("follow")
    ] == 0.5


def test_every_handler_is_registered_once_with_one_index_per_kind() -> None:
    registry = handlers.registry(settings.OperatorSettings())
    assert sorted(h.id for h in registry._indexing.get_all_handlers()) == [
        "deployments",
        "inference_nodes",
        "model_demand",
        "swap_plans",
    ]
    activities = [h.id for h in registry._activities.get_all_handlers()]
    assert activities == ["login", "configure", "close", "nodes"]
    changing = sorted(h.id for h in registry._changing.get_all_handlers())
    assert changing == (
        ["changed"] * 3 + ["forget"] + ["gone"] * 2 + ["route_changed"] * 3 + ["teardown"]
    )  # SwapPlans' create/update/resume; ModelDeployments only their delete
    watching = sorted(h.id for h in registry._watching.get_all_handlers())
    assert watching == ["changed", "observed"]  # ModelDeployments, ModelDemands


def test_kopf_keeps_no_record_on_model_deployments_and_does_on_other_kinds() -> None:
    """ModelDeployments are handled on watch events, remembered in memory: kopf's record of the
    last handled spec would only be written (two annotations on every object), never read."""
    storage = lifecycle.DiffBase(prefix="mlxfleet.io", key="last-handled-configuration")
    record = "mlxfleet.io/last-handled-configuration"

    def body(kind: str) -> kopf.Body:
        annotations = {record: '{"spec":{}}'}
        return kopf.Body({"kind": kind, "metadata": {"name": "x", "annotations": annotations}})

    for kind, kept in (("ModelDeployment", False), ("SwapPlan", True)):
        patch = kopf.Patch()
        storage.store(body=body(kind), patch=patch, essence={"spec": {"a": 1}})
        assert (record in patch.metadata.annotations) is kept, kind
        assert (storage.fetch(body=body(kind)) is not None) is kept, kind


def test_importing_the_handlers_registers_nothing_and_reads_no_settings() -> None:
    before = kopf.get_default_registry()
    counts = (
        len(before._spawning.get_all_handlers()),
        len(before._changing.get_all_handlers()),
        len(before._indexing.get_all_handlers()),
    )
    for name in (
        "nodes",
        "deployments",
        "swapplans",
        "modelroutes",
        "lifecycle",
        "indexes",
        "guard",
    ):
        importlib.reload(importlib.import_module(f"mlxfleet_operator.handlers.{name}"))
    after = kopf.get_default_registry()
    assert counts == (
        len(after._spawning.get_all_handlers()),
        len(after._changing.get_all_handlers()),
        len(after._indexing.get_all_handlers()),
    )
    assert not hasattr(settings, "current")
