"""The one guard every handler runs in: adapter errors become kopf retries after --poll-seconds,
and every run is counted by kind and result."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from mlxfleet_operator import settings
from mlxfleet_operator.adapters import agent, kube, metrics, runtime
from mlxfleet_operator.api import resources
from mlxfleet_operator.handlers import guard

KIND = resources.SWAP_PLAN


def runs(result: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "mlxfleet_operator_reconciles_total", {"kind": KIND.kind, "result": result}
    )
    return value or 0.0


def guarded(failure: BaseException | None = None, *, invalid: bool = False) -> None:
    config = settings.OperatorSettings(poll_seconds=3)
    rt = runtime.Runtime(config=config, kube=None, fleet=None)  # type: ignore[arg-type]
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
