"""Successive answers of one agent share the parts they agree on (`core.fleet.answers.share`):
the operator held two parsed trees per node (its last answer, and the facts made from the one
before), 16 MB at 500 nodes x 1,000 deployments. Sharing must change nothing a reader sees."""

from __future__ import annotations

import json
from typing import Any

from mlxfleet_agent import contract
from mlxfleet_operator.core.fleet import answers

from .builders import GIB, NOW, SHAPE


def _answer(*, in_flight: int = 0, context: int = 8192, used: bool = False) -> bytes:
    """An answer as the agent sends it (JSON), parsed afresh per poll like the fleet does."""
    spec = {"source": "file:///m", "servedName": "m", "contextLength": context}
    body: dict[str, Any] = {
        "agentVersion": "1",
        "os": "linux",
        "chip": "cpu",
        "dataPort": 9000,
        "startedAt": NOW.isoformat(),
        "memory": {"totalBytes": 32 * GIB, "availableBytes": 20 * GIB, "budgetBytes": 16 * GIB},
        "disk": {"freeBytes": 100 * GIB, "totalBytes": 200 * GIB},
        "slots": [
            {
                "name": name,
                "servedName": "m",
                "source": "file:///m",
                "phase": "Ready",
                "ready": True,
                "inFlight": in_flight,
                "spec": spec if name == "a" else {**spec, "contextLength": 4096},
            }
            for name in ("a", "b")
        ],
        "cachedModels": [
            {
                "id": "m1",
                "source": "file:///m",
                "sizeBytes": GIB,
                "shape": SHAPE.model_dump(by_alias=True),
                "inUse": used,
            }
        ],
        "engines": [{"name": "mlx-lm", "available": True}],
    }
    return json.dumps(body).encode()


def _parse(raw: bytes) -> contract.AgentState:
    return contract.AgentState.model_validate_json(raw)


def test_the_parts_two_answers_agree_on_are_one_object() -> None:
    old = _parse(_answer())
    new = answers.share(old, _parse(_answer(in_flight=2, used=True)))
    assert new.slots[0].spec is old.slots[0].spec
    assert new.slots[1].spec is old.slots[1].spec
    assert new.engines is old.engines
    assert new.memory is old.memory
    # what changed is the new answer's own: the slot (its counters), the cached model (in use)
    assert new.slots[0] is not old.slots[0]
    assert new.slots[0].in_flight == 2
    assert new.cached_models[0] is not old.cached_models[0]
    assert new.cached_models[0].in_use
    assert new.cached_models[0].shape is old.cached_models[0].shape


def test_a_changed_part_is_not_shared_and_no_reader_sees_a_difference() -> None:
    old = _parse(_answer())
    raw = _answer(context=16384, in_flight=1)
    new = answers.share(old, _parse(raw))
    assert new.slots[0].spec is not old.slots[0].spec
    assert new.slots[0].spec is not None
    assert new.slots[0].spec.context_length == 16384
    assert new.slots[1].spec is old.slots[1].spec  # slot b's spec did not change
    # the shared answer says exactly what the agent sent
    assert new.model_dump(mode="json") == _parse(raw).model_dump(mode="json")
    assert old.model_dump(mode="json") == _parse(_answer()).model_dump(mode="json")


def test_the_first_answer_is_kept_as_it_came() -> None:
    first = _parse(_answer())
    assert answers.share(None, first) is first
