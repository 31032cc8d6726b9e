"""Malformed input on both APIs answers 4xx with a body naming the field, never 5xx, never a crash,
and never changes state: a table of cases, then a schema-driven fuzz run of the control API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from schemathesis.core.result import Ok

from mlxfleet_agent import contract
from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]

GOOD = {"source": "file:///tmp/x", "servedName": "x"}


def _snapshot(agent: Agent) -> list[dict[str, Any]]:
    keep = ("name", "servedName", "source", "phase", "ready", "backendPort", "spec", "restarts")
    return [{k: s[k] for k in keep} for s in agent.state()["slots"]]


@pytest.fixture(scope="module")
def before(serving_agent: Agent) -> list[dict[str, Any]]:
    return _snapshot(serving_agent)


CONTROL_CASES = [
    pytest.param("PUT", "/v1/slots/x", b"{not json", None, 400, "body", id="bad-json"),
    pytest.param("PUT", "/v1/slots/x", b"[1, 2]", None, 422, None, id="not-an-object"),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "contextLength": "big"},
        None,
        422,
        "contextLength",
        id="wrong-type",
    ),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "source": "ftp://host/m"},
        None,
        422,
        "source",
        id="unknown-scheme",
    ),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "source": "file:///models/../../etc"},
        None,
        422,
        "source",
        id="traversing-path",
    ),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "source": "file://models/m"},
        None,
        422,
        "source",
        id="relative-path",
    ),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "source": "file:///etc"},
        None,
        403,
        "source",
        id="outside-allowed-roots",
    ),
    pytest.param("PUT", "/v1/slots/Not_A_Label", GOOD, None, 422, "name", id="non-dns-slot-name"),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "server": {"temperature": 2}},
        None,
        422,
        "server.temperature",
        id="unknown-server-option",
    ),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "server": {"kvBits": 3}},
        None,
        422,
        "server.kvBits",
        id="kv-bits-3",
    ),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "swap": {"strategy": "yolo"}},
        None,
        422,
        "swap.strategy",
        id="unknown-strategy",
    ),
    pytest.param(
        "PUT",
        "/v1/slots/x",
        {**GOOD, "servedNme": "typo"},
        None,
        422,
        "servedNme",
        id="unknown-field",
    ),
    pytest.param("PUT", "/v1/slots/x", b"x" * (2 * 1024 * 1024), None, 413, "body", id="huge-body"),
    pytest.param(
        "PUT", "/v1/slots/x", iter([b"x" * 65536] * 40), None, 413, "body", id="huge-chunked-body"
    ),
    pytest.param("GET", "/v1/state", None, "", 401, "authorization", id="missing-token"),
    pytest.param("GET", "/v1/state", None, "Bearer nope", 401, "authorization", id="wrong-token"),
    pytest.param(
        "DELETE", "/v1/slots/x", None, "Basic YTpi", 401, "authorization", id="basic-auth"
    ),
    pytest.param("GET", "/v1/slots/nope", None, None, 404, "name", id="unknown-slot"),
    pytest.param("DELETE", "/v1/models/nope", None, None, 404, "id", id="unknown-model-id"),
    pytest.param(
        "POST",
        "/v1/models/prefetch",
        {"source": "s3://Bad_Bucket/x"},
        None,
        422,
        "source",
        id="prefetch-bad-bucket",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "auth", "status", "field"), CONTROL_CASES)
def test_control_api_rejects_malformed_input(
    serving_agent: Agent,
    before: list[dict[str, Any]],
    method: str,
    path: str,
    body: Any,
    auth: str | None,
    status: int,
    field: str | None,
) -> None:
    headers = {"Content-Type": "application/json"}
    headers["Authorization"] = f"Bearer {serving_agent.token}" if auth is None else auth
    is_raw = isinstance(body, bytes) or hasattr(body, "__next__")
    kwargs: dict[str, Any] = {"content": body} if is_raw else {"json": body}
    resp = httpx.request(
        method, serving_agent.control_url + path, headers=headers, timeout=30, **kwargs
    )
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["message"]
    if field is not None:
        assert error.get("field") == field, error
    assert _snapshot(serving_agent) == before


def test_model_that_does_not_fit_is_507_with_estimate_and_budget(
    serving_agent: Agent, before: list[dict[str, Any]], model_b: Path
) -> None:
    resp = serving_agent.put_slot("big", slot_spec(model_b, "big", memoryBytes=1 << 50))
    assert resp.status_code == 507, resp.text
    body = resp.json()
    assert body["estimateBytes"] == 1 << 50
    assert body["budgetBytes"] > 0
    assert body["freeBytes"] <= body["budgetBytes"]
    assert body["error"]["field"] == "source"
    assert _snapshot(serving_agent) == before


def test_served_name_taken_is_409(
    serving_agent: Agent, before: list[dict[str, Any]], model_b: Path
) -> None:
    resp = serving_agent.put_slot("other", slot_spec(model_b, "tiny-a"))
    assert resp.status_code == 409, resp.text
    assert resp.json()["error"]["field"] == "servedName"
    assert _snapshot(serving_agent) == before


def test_same_spec_twice_changes_nothing(
    serving_agent: Agent, before: list[dict[str, Any]], model_a: Path
) -> None:
    resp = serving_agent.put_slot("a", slot_spec(model_a, "tiny-a"))
    assert resp.status_code == 202
    assert resp.json()["backendPort"] == before[0]["backendPort"]
    assert serving_agent.swaps("a") == []
    assert _snapshot(serving_agent) == before


DATA_CASES = [
    pytest.param("POST", "/v1/chat/completions", b"{oops", 400, id="bad-json"),
    pytest.param("POST", "/v1/chat/completions", b'"just a string"', 400, id="not-an-object"),
    pytest.param("POST", "/v1/completions", b'{"prompt": "hi"}', 400, id="missing-model"),
    pytest.param("POST", "/v1/completions", b'{"model": 42, "prompt": "hi"}', 400, id="model-type"),
    pytest.param(
        "POST", "/v1/completions", b'{"model": "tiny-a", "stream": "yes"}', 400, id="stream-type"
    ),
    pytest.param(
        "POST", "/v1/completions", b'{"model": "nope", "prompt": "x"}', 404, id="unknown-model"
    ),
    pytest.param("POST", "/v1/no-such-endpoint", b"{}", 404, id="unknown-path"),
    pytest.param("GET", "/v1/chat/completions", None, 405, id="wrong-method"),
    pytest.param("POST", "/v1/completions", b"x" * (17 * 1024 * 1024), 413, id="huge-body"),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), DATA_CASES)
def test_data_plane_rejects_malformed_input(
    serving_agent: Agent,
    before: list[dict[str, Any]],
    method: str,
    path: str,
    body: bytes | None,
    status: int,
) -> None:
    resp = httpx.request(
        method,
        serving_agent.data_url + path,
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["message"]
    assert set(error) >= {"message", "type", "code"}
    assert _snapshot(serving_agent) == before


def test_unknown_model_is_an_openai_not_found(serving_agent: Agent) -> None:
    client = serving_agent.openai(timeout=30.0)
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(
            model="gpt-nope", messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.code == "model_not_found"
    assert [m.id for m in client.models.list()] == ["tiny-a"]


def test_client_fields_that_load_other_weights_are_dropped(serving_agent: Agent) -> None:
    resp = httpx.post(
        serving_agent.data_url + "/v1/completions",
        json={"model": "tiny-a", "prompt": "hi", "max_tokens": 3, "adapters": "/etc"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == "tiny-a"


# ---- schema-driven fuzzing of the control API ---------------------------------------------------

CREDENTIALS = ("PUT", "/v1/credentials")


def _gives_keys(case: Any) -> bool:
    """A valid PUT /v1/credentials: the agent would hold keys of its own, and its data plane
    (open on loopback while it has none) would refuse this module's keyless requests from then
    on, as it should. It changes the serving agent as a PUT of slot `a` would."""
    if (case.method.upper(), case.path) != CREDENTIALS:
        return False
    try:
        contract.NodeCredentials.model_validate(case.body)
    except pydantic.ValidationError:
        return False
    return True


def test_control_api_fuzz_never_5xx(serving_agent: Agent) -> None:
    """Every operation of /openapi.json, with generated (valid and invalid) inputs."""
    raw = httpx.get(serving_agent.control_url + "/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(raw)
    headers = {"Authorization": f"Bearer {serving_agent.token}"}
    seen: list[int] = []
    refused: list[int] = []  # PUT /v1/credentials, with invalid keys
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result.err()  # the agent's own schema is a valid one
        operations.append(result.ok())
    assert len(operations) >= 8

    for operation in operations:
        # valid keys would close the serving agent's data plane (`_gives_keys`): invalid ones only
        gives_keys = (operation.method.upper(), operation.path) == CREDENTIALS
        modes = schemathesis.GenerationMode
        mode = modes.NEGATIVE if gives_keys else modes.POSITIVE

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case: Any) -> None:
            if case.path_parameters and case.path_parameters.get("name") == "a":
                case.path_parameters["name"] = "not-a"  # the serving slot must stay as it is
            assume(not _gives_keys(case))  # ... and its data plane open, as it is
            resp = case.call(base_url=serving_agent.control_url, headers=headers)
            seen.append(resp.status_code)
            assert resp.status_code < 500, (case.method, case.formatted_path, resp.text)
            if (case.method.upper(), case.path) == CREDENTIALS:
                refused.append(resp.status_code)
                assert resp.status_code >= 400, ("the agent took these keys", case.body)
            if resp.status_code >= 400:
                assert resp.json()["error"]["message"]

        run()
    assert len(seen) > 100
    assert refused, "PUT /v1/credentials was not fuzzed"
    assert any(code >= 400 for code in seen)


def test_state_unchanged_after_everything(
    serving_agent: Agent, before: list[dict[str, Any]]
) -> None:
    assert serving_agent.proc.poll() is None, "the agent crashed"
    assert serving_agent.state()["credentials"] is None  # no keys: the data plane is still open
    after = _snapshot(serving_agent)
    assert [s for s in after if s["name"] == "a"] == before
    reply = serving_agent.openai(timeout=30.0).completions.create(
        model="tiny-a", prompt="hi", max_tokens=3
    )
    assert reply.choices[0].finish_reason == "length"
