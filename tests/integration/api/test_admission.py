"""Invalid objects are rejected by the real API server at admission, naming the field.

The same table (tests/unit/api/cases.py) is rejected by the pydantic models, so the operator and
the API server refuse the same input.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.unit.api import cases

pytestmark = pytest.mark.cluster

NAMESPACE = "api-admission"


@pytest.fixture(scope="module")
def namespace(cluster: Any) -> str:
    manifest = json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    cluster.kubectl("apply", "--server-side", "-f", "-", input=manifest)
    return NAMESPACE


def _create(cluster: Any, namespace: str, body: dict[str, Any]) -> Any:
    target = [] if body["kind"] == "InferenceNode" else ["-n", namespace]
    return cluster.kubectl("create", "-f", "-", *target, input=json.dumps(body), check=False)


def _name(case_id: str) -> str:
    return f"api-{case_id}"[:63]


def test_at_least_25_invalid_cases() -> None:
    assert len(cases.INVALID) >= 25
    assert len({c.id for c in cases.INVALID}) == len(cases.INVALID)


@pytest.mark.parametrize("kind", sorted(cases.BASE))
def test_the_valid_base_objects_are_accepted(cluster: Any, namespace: str, kind: str) -> None:
    body = cases.merge(cases.BASE[kind], {"metadata": {"name": f"api-valid-{kind.lower()}"}})
    proc = _create(cluster, namespace, body)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in cases.VALID])
def test_valid_variant_is_accepted(cluster: Any, namespace: str, case: cases.Valid) -> None:
    proc = _create(cluster, namespace, case.body(_name(case.id)))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in cases.INVALID])
def test_invalid_object_is_rejected_naming_the_field(
    cluster: Any, namespace: str, case: cases.Invalid
) -> None:
    proc = _create(cluster, namespace, case.body(_name(case.id)))
    assert proc.returncode != 0, f"{case.id} was accepted: {proc.stdout}"
    assert "is invalid" in proc.stderr, proc.stderr
    # The field is where the error is reported (`spec.x.y: ...` or `spec.x.y[1]: ...`).
    assert re.search(re.escape(case.field) + r"(\[\d+\])?: ", proc.stderr), proc.stderr


def test_the_command_env_refusal_says_what_is_allowed(cluster: Any, namespace: str) -> None:
    """The chain of issue 22 item 2 is refused by the API server, and the message lists the
    names a deployment may set."""
    body = cases.merge(
        cases.BASE[cases.MD],
        {
            "metadata": {"name": "api-command-env-chain"},
            "spec": {
                "engine": {
                    "name": "command",
                    "command": {
                        "argv": ["llama-server", "--host", "{host}", "--port", "{port}"],
                        "capabilities": ["chat"],
                        "memoryBytes": 2**30,
                        "env": cases.ATTACK_ENV,
                    },
                }
            },
        },
    )
    proc = _create(cluster, namespace, body)
    assert proc.returncode != 0, proc.stdout
    assert "spec.engine.command.env: " in proc.stderr, proc.stderr
    assert "may set only CUDA_VISIBLE_DEVICES, HF_HUB_DISABLE_TELEMETRY" in proc.stderr
