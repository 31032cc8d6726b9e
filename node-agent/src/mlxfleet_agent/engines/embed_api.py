"""The wire side of the embeddings/rerank engine: parse, validate, answer (pure; no mlx).

Requests follow OpenAI `POST /v1/embeddings` (input: a string, a list of strings, a list of
token ids or a list of such lists; `encoding_format` float|base64; `dimensions`; `user`) and the
rerank shape Jina, Cohere and vLLM clients send to `POST /v1/rerank` (`query`, `documents` as
strings or `{"text": ...}`, `top_n`, `return_documents`; `instruction` is our extension for
instruction-aware rerankers). Every refusal is an `ApiError` whose body is OpenAI's
`{"error": {"message", "type", "param", "code"}}` and whose message names the field and what is
allowed: 400 for malformed input or one input over the context length, 413 for too many inputs
or too many tokens in one request, 404 for another model's name.
May import: pydantic, numpy (via vectors) and the standard library. Called by: embed_server, tests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pydantic

from mlxfleet_agent.engines import vectors


class ApiError(Exception):
    """A refused request with its HTTP status and OpenAI-style error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code
        self.type = type_

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": str(self),
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-request bounds (server flags); see embed_server for the defaults."""

    max_inputs: int
    max_input_tokens: int
    max_request_tokens: int


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What validation needs to know about the served model."""

    names: tuple[str, ...]  # accepted `model` values; the first is the served name
    vocab_size: int
    embedding_dim: int
    matryoshka: bool


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", strict=True)


class EmbeddingsBody(_Strict):
    model: str | None = None
    input: Any = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


class RerankBody(_Strict):
    model: str | None = None
    query: Any = None
    documents: Any = None
    top_n: int | None = None
    return_documents: bool = True
    instruction: str | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingsJob:
    """A validated embeddings request: either texts or token id lists (not both)."""

    model: str
    texts: tuple[str, ...] | None
    token_ids: tuple[tuple[int, ...], ...] | None
    encoding_format: Literal["float", "base64"]
    dimensions: int | None

    @property
    def count(self) -> int:
        return len(self.texts if self.texts is not None else self.token_ids or ())


@dataclass(frozen=True, slots=True)
class RerankJob:
    model: str
    query: str
    documents: tuple[str, ...]
    top_n: int
    return_documents: bool
    instruction: str | None


def load_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or ApiError 400."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def _model_name(requested: str | None, facts: ModelFacts) -> str:
    if requested is None or requested in facts.names:
        return facts.names[0]
    raise ApiError(
        404,
        f"The model `{requested}` does not exist; this server serves `{facts.names[0]}`.",
        param="model",
        code="model_not_found",
    )


def _parse(model: type[pydantic.BaseModel], body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(400, f"`{field}`: {first['msg']}", param=field) from None


def _is_token(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _too_many(n: int, limits: Limits, field: str) -> None:
    if n > limits.max_inputs:
        raise ApiError(
            413,
            f"`{field}` has {n} items; this server accepts at most {limits.max_inputs} per request",
            param=field,
            code="too_many_inputs",
        )


def _check_ids(ids: Sequence[int], where: str, facts: ModelFacts) -> tuple[int, ...]:
    if not ids:
        raise ApiError(400, f"`{where}` is empty; give at least one token id", param="input")
    for j, t in enumerate(ids):
        if not _is_token(t) or not 0 <= t < facts.vocab_size:
            raise ApiError(
                400,
                f"`{where}[{j}]` = {t!r} is not a token id of this model "
                f"(integers 0..{facts.vocab_size - 1})",
                param="input",
            )
    return tuple(ids)


def parse_embeddings(body: dict[str, Any], *, limits: Limits, facts: ModelFacts) -> EmbeddingsJob:
    parsed: EmbeddingsBody = _parse(EmbeddingsBody, body)
    model = _model_name(parsed.model, facts)
    raw = parsed.input
    texts: tuple[str, ...] | None = None
    token_ids: tuple[tuple[int, ...], ...] | None = None
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ApiError(
            400,
            "`input` must be a non-empty string, a list of strings, a list of token ids "
            "or a list of token id lists",
            param="input",
        )
    _too_many(len(raw), limits, "input")
    if all(isinstance(x, str) for x in raw):
        for i, text in enumerate(raw):
            if not text:
                raise ApiError(400, f"`input[{i}]` is an empty string", param="input")
        texts = tuple(raw)
    elif all(isinstance(x, int) for x in raw):  # bools too: _check_ids names them
        token_ids = (_check_ids(raw, "input", facts),)
    elif all(isinstance(x, list) for x in raw):
        token_ids = tuple(_check_ids(ids, f"input[{i}]", facts) for i, ids in enumerate(raw))
    else:
        raise ApiError(
            400,
            "`input` mixes types; give only strings, only token ids, or only token id lists",
            param="input",
        )
    dims = parsed.dimensions
    if dims is not None:
        if not facts.matryoshka:
            raise ApiError(
                400, f"model `{model}` does not support `dimensions`", param="dimensions"
            )
        if not 1 <= dims <= facts.embedding_dim:
            raise ApiError(
                400,
                f"`dimensions` must be between 1 and {facts.embedding_dim}, got {dims}",
                param="dimensions",
            )
    return EmbeddingsJob(model, texts, token_ids, parsed.encoding_format, dims)


def _document_text(doc: object, i: int) -> str:
    if isinstance(doc, dict) and isinstance(doc.get("text"), str):
        doc = doc["text"]
    if not isinstance(doc, str):
        raise ApiError(
            400, f'`documents[{i}]` must be a string or {{"text": string}}', param="documents"
        )
    return doc


def parse_rerank(body: dict[str, Any], *, limits: Limits, facts: ModelFacts) -> RerankJob:
    parsed: RerankBody = _parse(RerankBody, body)
    model = _model_name(parsed.model, facts)
    if not isinstance(parsed.query, str) or not parsed.query:
        raise ApiError(400, "`query` must be a non-empty string", param="query")
    docs = parsed.documents
    if not isinstance(docs, list) or not docs:
        raise ApiError(400, "`documents` must be a non-empty list of strings", param="documents")
    _too_many(len(docs), limits, "documents")
    texts = tuple(_document_text(d, i) for i, d in enumerate(docs))
    top_n = parsed.top_n if parsed.top_n is not None else len(texts)
    if top_n < 1:
        raise ApiError(400, f"`top_n` must be at least 1, got {top_n}", param="top_n")
    return RerankJob(
        model,
        parsed.query,
        texts,
        min(top_n, len(texts)),
        parsed.return_documents,
        parsed.instruction,
    )


def check_lengths(lengths: Sequence[int], *, limits: Limits, field: str) -> int:
    """Total tokens of a request, or ApiError 400 (one input too long) / 413 (too many)."""
    for i, n in enumerate(lengths):
        if n > limits.max_input_tokens:
            raise ApiError(
                400,
                f"`{field}[{i}]` has {n} tokens; this model accepts at most "
                f"{limits.max_input_tokens} tokens per input",
                param=field,
                code="context_length_exceeded",
            )
    total = sum(lengths)
    if total > limits.max_request_tokens:
        raise ApiError(
            413,
            f"the request has {total} tokens in all; this server accepts at most "
            f"{limits.max_request_tokens} per request (split it into smaller requests)",
            param=field,
            code="request_too_large",
        )
    return total


def embeddings_answer(job: EmbeddingsJob, matrix: vectors.Matrix, *, tokens: int) -> dict[str, Any]:
    data = [
        {"object": "embedding", "index": i, "embedding": row}
        for i, row in enumerate(vectors.encode(matrix, job.encoding_format))
    ]
    return {
        "object": "list",
        "data": data,
        "model": job.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def rerank_answer(
    job: RerankJob, scores: Sequence[float], *, tokens: int, request_id: str
) -> dict[str, Any]:
    """Results sorted best first (ties keep document order), cut to `top_n`."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: job.top_n]
    results: list[dict[str, Any]] = []
    for i in order:
        item: dict[str, Any] = {"index": i, "relevance_score": float(scores[i])}
        if job.return_documents:
            item["document"] = {"text": job.documents[i]}
        results.append(item)
    return {
        "id": request_id,
        "model": job.model,
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
