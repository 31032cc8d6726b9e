"""Request parsing, limits and answers of the embeddings/rerank engine (pure, no model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlxfleet_agent.engines import embed_api, vectors

LIMITS = embed_api.Limits(max_inputs=4, max_input_tokens=10, max_request_tokens=25)
FACTS = embed_api.ModelFacts(
    ("tiny", "/models/tiny"), vocab_size=100, embedding_dim=8, matryoshka=True
)


def _embeddings(
    body: dict[str, Any], facts: embed_api.ModelFacts = FACTS
) -> embed_api.EmbeddingsJob:
    return embed_api.parse_embeddings(body, limits=LIMITS, facts=facts)


def _refusal(body: dict[str, Any], facts: embed_api.ModelFacts = FACTS) -> embed_api.ApiError:
    with pytest.raises(embed_api.ApiError) as caught:
        _embeddings(body, facts)
    return caught.value


@pytest.mark.parametrize(
    ("raw", "texts", "ids"),
    [
        pytest.param("hi", ("hi",), None, id="string"),
        pytest.param(["a", "b"], ("a", "b"), None, id="strings"),
        pytest.param([1, 2, 3], None, ((1, 2, 3),), id="token-ids"),
        pytest.param([[1], [2, 3]], None, ((1,), (2, 3)), id="token-id-lists"),
    ],
)
def test_input_shapes(raw: Any, texts: Any, ids: Any) -> None:
    job = _embeddings({"input": raw, "model": "tiny"})
    assert (job.texts, job.token_ids) == (texts, ids)
    assert job.model == "tiny"
    assert job.encoding_format == "float"


def test_the_model_may_be_omitted_or_given_by_path() -> None:
    assert _embeddings({"input": "a"}).model == "tiny"
    assert _embeddings({"input": "a", "model": "/models/tiny"}).model == "tiny"
    err = _refusal({"input": "a", "model": "big"})
    assert (err.status, err.code, err.param) == (404, "model_not_found", "model")


@pytest.mark.parametrize(
    ("body", "status", "param", "needle"),
    [
        pytest.param({}, 400, "input", "`input` must be", id="missing"),
        pytest.param({"input": []}, 400, "input", "non-empty", id="empty"),
        pytest.param(
            {"input": ["a", ""]}, 400, "input", "`input[1]` is an empty string", id="empty-item"
        ),
        pytest.param({"input": ["a", 1]}, 400, "input", "mixes", id="mixed"),
        pytest.param({"input": [[1], []]}, 400, "input", "`input[1]` is empty", id="empty-ids"),
        pytest.param({"input": [100]}, 400, "input", "0..99", id="id-range"),
        pytest.param({"input": [-1]}, 400, "input", "not a token id", id="negative-id"),
        pytest.param({"input": [True]}, 400, "input", "not a token id", id="bool-id"),
        pytest.param({"input": [1.5]}, 400, "input", "mixes", id="float-id"),
        pytest.param({"input": ["a"] * 5}, 413, "input", "has 5 items", id="too-many"),
        pytest.param(
            {"input": "a", "dimensions": 9}, 400, "dimensions", "between 1 and 8", id="dims"
        ),
        pytest.param(
            {"input": "a", "dimensions": "8"}, 400, "dimensions", "valid integer", id="dims-str"
        ),
        pytest.param(
            {"input": "a", "encoding_format": "hex"},
            400,
            "encoding_format",
            "encoding_format",
            id="format",
        ),
        pytest.param({"input": "a", "model": 3}, 400, "model", "`model`", id="model-type"),
    ],
)
def test_refusals_name_the_field(
    body: dict[str, Any], status: int, param: str, needle: str
) -> None:
    err = _refusal(body)
    assert (err.status, err.param) == (status, param)
    assert needle in str(err)
    assert err.body()["error"]["message"] == str(err)


def test_dimensions_need_a_matryoshka_model() -> None:
    facts = embed_api.ModelFacts(("tiny",), vocab_size=100, embedding_dim=8, matryoshka=False)
    err = _refusal({"input": "a", "dimensions": 4}, facts)
    assert err.status == 400
    assert "does not support `dimensions`" in str(err)


def test_unknown_fields_are_ignored() -> None:
    assert _embeddings({"input": "a", "user": "u", "extra": 1}).count == 1


def test_length_limits() -> None:
    assert embed_api.check_lengths([10, 10, 5], limits=LIMITS, field="input") == 25
    with pytest.raises(embed_api.ApiError) as one:
        embed_api.check_lengths([3, 11], limits=LIMITS, field="input")
    assert one.value.status == 400
    assert one.value.code == "context_length_exceeded"
    assert "`input[1]` has 11 tokens" in str(one.value)
    with pytest.raises(embed_api.ApiError) as total:
        embed_api.check_lengths([10, 10, 6], limits=LIMITS, field="documents")
    assert total.value.status == 413
    assert "26 tokens" in str(total.value)


def test_json_body_must_be_an_object() -> None:
    for raw in (b"[1]", b"{", b"\xff"):
        with pytest.raises(embed_api.ApiError) as caught:
            embed_api.load_json(raw)
        assert caught.value.status == 400


def test_rerank_parsing() -> None:
    job = embed_api.parse_rerank(
        {"query": "q", "documents": ["a", {"text": "b"}], "top_n": 9}, limits=LIMITS, facts=FACTS
    )
    assert job.documents == ("a", "b")
    assert job.top_n == 2
    assert job.return_documents
    cases: list[tuple[dict[str, object], str]] = [
        ({"query": "", "documents": ["a"]}, "`query`"),
        ({"query": "q", "documents": "a"}, "`documents`"),
        ({"query": "q", "documents": [{"txt": "a"}]}, "`documents[0]`"),
        ({"query": "q", "documents": ["a"], "top_n": -1}, "`top_n`"),
        ({"query": "q", "documents": ["a"], "return_documents": "no"}, "return_documents"),
    ]
    for body, needle in cases:
        with pytest.raises(embed_api.ApiError) as caught:
            embed_api.parse_rerank(body, limits=LIMITS, facts=FACTS)
        assert needle in str(caught.value)
    with pytest.raises(embed_api.ApiError) as many:
        embed_api.parse_rerank({"query": "q", "documents": ["a"] * 5}, limits=LIMITS, facts=FACTS)
    assert many.value.status == 413


def test_rerank_answer_is_sorted_best_first_ties_in_document_order() -> None:
    job = embed_api.parse_rerank(
        {"query": "q", "documents": ["a", "b", "c", "d"], "top_n": 3}, limits=LIMITS, facts=FACTS
    )
    answer = embed_api.rerank_answer(job, [0.2, 0.9, 0.2, 0.5], tokens=40, request_id="r1")
    assert [r["index"] for r in answer["results"]] == [1, 3, 0]
    assert answer["results"][0] == {"index": 1, "relevance_score": 0.9, "document": {"text": "b"}}
    assert answer["usage"] == {"prompt_tokens": 40, "total_tokens": 40}
    assert answer["id"] == "r1"
    assert answer["model"] == "tiny"


def test_embeddings_answer_in_both_formats() -> None:
    matrix = np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32)
    for fmt in ("float", "base64"):
        job = _embeddings({"input": ["a", "b"], "encoding_format": fmt})
        answer = embed_api.embeddings_answer(job, matrix, tokens=7)
        assert [d["index"] for d in answer["data"]] == [0, 1]
        assert answer["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
        first = answer["data"][0]["embedding"]
        row = vectors.decode_base64(first) if fmt == "base64" else np.array(first, np.float32)
        assert np.array_equal(row, matrix[0])
