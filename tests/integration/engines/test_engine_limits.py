"""Limits and bad input on the real engines: clear 400/404/413 answers, and the engine serves on.

Limits come from conftest (embed: 256 inputs, 256 tokens per input, 20,000 per request, 1 MiB
body; rerank: 128 documents, 160 tokens per prompt).
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.integration.engines.conftest import EMBED_LIMITS, RERANK_LIMITS, Engine

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]

LONG_TEXT = "river " * 400  # > 256 tokens


def _error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    err: dict[str, Any] = resp.json()["error"]
    assert err["type"]
    assert err["message"]
    return err


def test_too_many_inputs_is_413_through_the_openai_client(embed_engine: Engine) -> None:
    too_many = ["river"] * (EMBED_LIMITS["max_inputs"] + 1)
    with pytest.raises(openai.APIStatusError) as caught:
        embed_engine.openai().embeddings.create(model=embed_engine.name, input=too_many)
    assert caught.value.status_code == 413
    message = str(caught.value)
    assert "`input` has 257 items" in message
    assert "at most 256" in message


def test_a_too_long_input_is_400_context_length_exceeded(embed_engine: Engine) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        embed_engine.openai().embeddings.create(model=embed_engine.name, input=["river", LONG_TEXT])
    body: Any = caught.value.body
    assert body["code"] == "context_length_exceeded"
    assert "`input[1]`" in body["message"]
    assert "at most 256 tokens" in body["message"]


def test_too_many_tokens_in_one_request_is_413(embed_engine: Engine) -> None:
    texts = ["river ocean forest " * 40] * 200  # ~120 tokens each, ~24,000 in all
    err = _error(embed_engine.post("/v1/embeddings", {"input": texts}), 413)
    assert err["code"] == "request_too_large"
    assert "at most 20000" in err["message"]


def test_a_body_over_the_byte_limit_is_413(embed_engine: Engine) -> None:
    big = "x" * (EMBED_LIMITS["max_body_bytes"] + 10)
    err = _error(embed_engine.post("/v1/embeddings", {"input": big}), 413)
    assert "larger than" in err["message"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        pytest.param({"input": []}, 400, "non-empty", id="empty-list"),
        pytest.param({"input": ""}, 400, "empty string", id="empty-string"),
        pytest.param({"input": ["a", 3]}, 400, "mixes types", id="mixed"),
        pytest.param({"input": [[1, 2], [99999]]}, 400, "`input[1][0]` = 99999", id="bad-token"),
        pytest.param({"input": [[True]]}, 400, "not a token id", id="bool-token"),
        pytest.param({"input": "a", "model": "other"}, 404, "does not exist", id="other-model"),
        pytest.param({"input": "a", "dimensions": 65}, 400, "between 1 and 64", id="dims-high"),
        pytest.param({"input": "a", "dimensions": 0}, 400, "between 1 and 64", id="dims-zero"),
        pytest.param({"input": "a", "encoding_format": "hex"}, 400, "encoding_format", id="format"),
        pytest.param({"input": {"text": "a"}}, 400, "`input` must be", id="object"),
    ],
)
def test_bad_embeddings_requests_name_the_field(
    embed_engine: Engine, body: dict[str, Any], status: int, needle: str
) -> None:
    assert needle in _error(embed_engine.post("/v1/embeddings", body), status)["message"]


def test_invalid_json_is_400(embed_engine: Engine) -> None:
    resp = httpx.post(
        embed_engine.url + "/v1/embeddings",
        content=b'{"input": [',
        timeout=10.0,
        headers={"content-type": "application/json"},
    )
    assert "not valid JSON" in _error(resp, 400)["message"]


def test_rerank_limits(rerank_engine: Engine) -> None:
    many = ["river"] * (RERANK_LIMITS["max_inputs"] + 1)
    err = _error(rerank_engine.post("/v1/rerank", {"query": "river", "documents": many}), 413)
    assert "`documents` has 129 items" in err["message"]
    long = ["river", "tiger " * 200]
    err = _error(rerank_engine.post("/v1/rerank", {"query": "river", "documents": long}), 400)
    assert err["code"] == "context_length_exceeded"
    assert "`documents[1]`" in err["message"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        pytest.param({"documents": ["a"]}, "`query`", id="no-query"),
        pytest.param({"query": "a", "documents": []}, "`documents`", id="no-documents"),
        pytest.param({"query": "a", "documents": [1]}, "`documents[0]`", id="number-doc"),
        pytest.param({"query": "a", "documents": ["a"], "top_n": 0}, "`top_n`", id="top-n"),
        pytest.param({"query": "a", "documents": ["a"], "top_n": "2"}, "top_n", id="top-n-str"),
    ],
)
def test_bad_rerank_requests_name_the_field(
    rerank_engine: Engine, body: dict[str, Any], needle: str
) -> None:
    assert needle in _error(rerank_engine.post("/v1/rerank", body), 400)["message"]


def test_the_engines_serve_on_after_refusals(embed_engine: Engine, rerank_engine: Engine) -> None:
    for engine in (embed_engine, rerank_engine):
        assert engine.proc.poll() is None, engine.log_tail()
    assert embed_engine.post("/v1/embeddings", {"input": "river"}).status_code == 200
    assert rerank_engine.post("/v1/rerank", {"query": "a", "documents": ["a"]}).status_code == 200
