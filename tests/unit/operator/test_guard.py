"""The one guard every handler runs in: adapter errors become kopf retries after --poll-seconds,
and every run is counted by kind and result."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import kopf
import pytest

from mlxfleet_operator import settings
from mlxfleet_operator.adapters import agent, kube, metrics, runtime
from mlxfleet_operator.api import resources
from mlxfleet_operator.handlers import guard
from tests.unit.operator.builders import kopf_body

KIND = resources.SWAP_PLAN


def runs(result: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "mlxfleet_operator_reconciles_total", {"kind": KIND.kind, "result": result}
    )
    return value or 0.0


def guarded(failure: BaseException | None = None, *, invalid: bool = False) -> None:
    config = settings.OperatorSettings(poll_seconds=3)
    rt = runtime.Runtime(config=config, kube=None, fleet=None, publisher=None)  # type: ignore[arg-type]
    memo = kopf.Memo({runtime.KEY: rt})
    body = kopf.Body({"metadata": {"uid": "u", "name": "p", "namespace": "ns"}})

    async def go() -> None:
        async with guard.guarded(KIND, body, memo) as run:
            assert run.rt is rt
            if invalid:
                run.invalid()
            if failure is not None:
                raise failure

    asyncio.run(go())


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(kube.KubeError("get ModelDeployment ns/chat: 500"), id="kubernetes"),
        pytest.param(agent.AgentUnreachable("GET /state: timeout"), id="agent-unreachable"),
        pytest.param(agent.AgentRefused("HTTP 409", status=409), id="agent-refused"),
    ],
)
def test_adapter_errors_become_a_retry_after_the_poll_interval(failure: Exception) -> None:
    before = runs("error")
    with pytest.raises(kopf.TemporaryError) as raised:
        guarded(failure)
    assert raised.value.delay == 3
    assert str(failure) in str(raised.value)
    assert runs("error") == before + 1


@pytest.mark.parametrize(
    ("kwargs", "result"),
    [
        pytest.param({}, "ok", id="ok"),
        pytest.param({"invalid": True}, "invalid", id="invalid"),
    ],
)
def test_every_run_is_counted(kwargs: dict[str, Any], result: str) -> None:
    before = runs(result)
    guarded(**kwargs)
    assert runs(result) == before + 1


def test_a_deliberate_retry_and_anything_else_propagate_as_they_are() -> None:
    before = runs("retry")
    with pytest.raises(kopf.TemporaryError, match="waiting"):
        guarded(kopf.TemporaryError("waiting for the first poll", delay=1))
    assert runs("retry") == before + 1
    with pytest.raises(ValueError, match="bug"):
        guarded(ValueError("bug"))


NO_INDEXES: dict[str, Any] = {
    "inference_nodes": {},
    "deployments": {},
    "swap_plans": {},
}  # what kopf passes a ModelDeployment handler of an empty cluster


def _runtime() -> tuple[runtime.Runtime, kopf.Memo]:
    """A runtime with a fleet and nothing else (a reconcile of an invalid body does no I/O)."""
    from mlxfleet_operator.adapters import fleet

    rt = runtime.Runtime(
        config=settings.OperatorSettings(),
        kube=None,  # type: ignore[arg-type]
        fleet=fleet.Fleet(None),  # type: ignore[arg-type]
        publisher=None,  # type: ignore[arg-type]
    )
    return rt, kopf.Memo({runtime.KEY: rt})


def test_an_event_and_the_timer_on_the_same_inputs_reconcile_once() -> None:
    """kopf starts an object's timer on its first sight, together with the create handler: both
    ran a full reconcile of every new ModelDeployment (issue 12, 1,000 created at once). The
    run that waited for the lock finds the work done on the same inputs and skips (counted as
    `skipped`, not timed)."""
    from mlxfleet_operator.handlers import deployments, indexes

    rt, memo = _runtime()
    meta = {"uid": "u", "name": "chat", "namespace": "ns", "resourceVersion": "1"}
    body = kopf_body({"metadata": meta, "spec": {"replicas": 1}})  # no model: invalid, no I/O
    kwargs = dict(NO_INDEXES)
    assert indexes.Indexes.of(kwargs).inference_nodes() == []

    def count(result: str) -> float:
        kind = resources.MODEL_DEPLOYMENT.kind
        labels = {"kind": kind, "result": result}
        return metrics.REGISTRY.get_sample_value("mlxfleet_operator_reconciles_total", labels) or 0

    def timed() -> float:
        labels = {"kind": resources.MODEL_DEPLOYMENT.kind}
        sample = "mlxfleet_operator_reconcile_seconds_count"
        return metrics.REGISTRY.get_sample_value(sample, labels) or 0

    before = count("invalid"), count("skipped"), timed()

    async def both() -> None:
        async with rt.lock("u"):  # a run in progress: both wait for the lock
            runs = asyncio.gather(
                deployments.changed(
                    {"type": "MODIFIED", "object": cast(kopf.RawBody, dict(body))},
                    body,
                    memo,
                    kopf.Patch(),
                    logging.getLogger("t"),
                    **kwargs,
                ),
                deployments.converge(body, memo, kopf.Patch(), **kwargs),
            )
            await asyncio.sleep(0.01)
        await runs

    asyncio.run(both())
    assert (count("invalid"), count("skipped"), timed()) == (
        before[0] + 1,
        before[1] + 1,
        before[2] + 1,
    )
    asyncio.run(both())  # the same inputs again: nothing runs, nothing is counted or timed
    assert (count("invalid"), timed()) == (before[0] + 1, before[2] + 1)


def test_a_handler_the_timer_retries_never_fails_to_kopf() -> None:
    """A create/update/resume handler that fails is retried by kopf with its progress written
    on the object (an annotation per try, a `touch-dummy` to wake it): at 500 x 1,000 these
    were the steady state's ModelDeployment PATCHes. `by_timer` logs the failure and returns;
    the kind's timer is the retry. Cancellation still propagates."""
    logged: list[tuple[str, str]] = []

    class _Logger:
        def warning(self, msg: str) -> None:
            logged.append(("warning", msg))

        def exception(self, msg: str) -> None:
            logged.append(("exception", msg))

    async def go(failure: BaseException) -> None:
        async with guard.by_timer(_Logger()):  # type: ignore[arg-type]
            raise failure

    asyncio.run(go(kopf.TemporaryError("waiting for the first poll of n1", delay=5)))
    asyncio.run(go(ValueError("bug")))
    assert logged == [
        ("warning", "Not finished now, the timer tries again: waiting for the first poll of n1"),
        ("exception", "Failed, the timer tries again"),
    ]
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(go(asyncio.CancelledError()))


def test_the_event_handler_runs_for_spec_labels_annotations_not_status_writes() -> None:
    """ModelDeployments have a handler of watch events instead of kopf's create/update/resume
    (which wrote two annotations on every object: 1,543 PATCHes converging 1,000). It runs on
    first sight and when the spec, labels or annotations change; a status or finalizer write
    (mostly ours) and kopf's own annotations are left to the timer, which takes several at
    once, as kopf's update handler did."""
    from mlxfleet_operator.handlers import deployments

    rt, memo = _runtime()
    kwargs: dict[str, Any] = dict(NO_INDEXES)
    kind = resources.MODEL_DEPLOYMENT.kind
    runs: list[float] = []

    def event(rv: int, status: dict[str, Any] | None = None, **meta: Any) -> None:
        """The handler on one watch event; records whether a reconcile ran (no model: invalid)."""
        metadata = {"uid": "u", "name": "chat", "namespace": "ns", "resourceVersion": str(rv)}
        metadata |= {"generation": 1} | meta
        body = kopf_body({"metadata": metadata, "spec": {"replicas": 1}, "status": status or {}})
        labels = {"kind": kind, "result": "invalid"}
        before = metrics.REGISTRY.get_sample_value("mlxfleet_operator_reconciles_total", labels)
        raw = {"type": "MODIFIED", "object": dict(body)}
        log = logging.getLogger("t")
        asyncio.run(deployments.changed(raw, body, memo, kopf.Patch(), log, **kwargs))  # type: ignore[arg-type]
        after = metrics.REGISTRY.get_sample_value("mlxfleet_operator_reconciles_total", labels)
        runs.append((after or 0) - (before or 0))

    event(1)  # first sight
    event(2, finalizers=["mlxfleet.io/finalizer"])  # a finalizer added
    event(3, status={"desiredReplicas": 1})  # a status write
    event(3, annotations={"mlxfleet.io/kopf-managed": "yes"})  # kopf's own record (old objects)
    event(4, generation=2)  # the spec changed
    event(5, generation=2, labels={"team": "a"})
    event(6, generation=2, labels={"team": "a"}, annotations={resources.WAKE_ANNOTATION: "t"})
    assert runs == [1, 0, 0, 0, 1, 1, 1]
    rt.objects.forget("u")  # teardown ran and forgot the object's record
    for kind, meta in (("MODIFIED", {"deletionTimestamp": "t"}), ("DELETED", {})):
        gone = kopf_body({"metadata": {"uid": "u", "generation": 3, **meta}})
        raw = {"type": kind, "object": dict(gone)}
        log = logging.getLogger("t")
        asyncio.run(deployments.changed(raw, gone, memo, kopf.Patch(), log, **kwargs))  # type: ignore[arg-type]
    assert rt.objects.get("u") is None  # its last events leave no record behind
