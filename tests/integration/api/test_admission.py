"""Invalid objects are rejected by the real API server at admission, naming the field.

The same table (tests/unit/api/cases.py) is rejected by the pydantic models, so the operator and
the API server refuse the same input.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit.api import cases

pytestmark = pytest.mark.cluster

NAMESPACE = "api-admission"
REPO = Path(__file__).resolve().parents[3]


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


def _errors(stderr: str) -> list[str]:
    """The error lines kubectl prints (one, or `* ...` lines for several)."""
    lines = [ln.split(" is invalid: ", 1)[-1].strip() for ln in stderr.splitlines()]
    lines = [ln.removeprefix("* ") for ln in lines]
    return [ln for ln in lines if ": Invalid value: " in ln]


@pytest.mark.parametrize(
    ("case_id", "says"),
    [
        pytest.param(
            "mr-external-url-ftp",
            "must be an http:// or https:// base URL of an OpenAI-compatible API",
            id="external-url",
        ),
        pytest.param(
            "in-url-ftp-short", "must be an http:// or https:// URL with a host", id="agent-url"
        ),
    ],
)
def test_a_short_url_with_another_scheme_gets_one_message_saying_the_scheme(
    cluster: Any, namespace: str, case_id: str, says: str
) -> None:
    """`external.url: ftp://x` got "should be at least 8 chars long" before the scheme rule
    (issue 28 item 6): now the one message says what a URL must be."""
    case = next(c for c in cases.INVALID if c.id == case_id)
    proc = _create(cluster, namespace, case.body(_name(case.id)))
    errors = _errors(proc.stderr)
    assert len(errors) == 1, proc.stderr
    assert says in errors[0]
    assert errors[0].startswith(case.field + ": ")


def test_replicas_of_the_wrong_type_is_named_first_with_what_it_must_be(
    cluster: Any, namespace: str
) -> None:
    """`replicas: "two"` (issue 28 item 6): the schema's message comes first and names the field
    and the type. The API server adds a line of its own from the scale subresource (`kubectl
    scale` reads `.spec.replicas`): docs/api.md says to read the first."""
    case = next(c for c in cases.INVALID if c.id == "md-replicas-not-integer")
    proc = _create(cluster, namespace, case.body(_name(case.id)))
    errors = _errors(proc.stderr)
    assert errors[0].startswith("spec.replicas: "), proc.stderr
    assert "must be of type integer" in errors[0]
    assert "accessor error" not in errors[0]
    doc = (REPO / "docs" / "api.md").read_text()
    assert "accessor error" in doc
