"""The rerank engine through real HTTP (httpx) on the tiny constructed Qwen3 reranker.

Two kinds of check, both able to fail:
- relevance: the tiny reranker provably scores a document that shares a word with the query
  above one of the same token length that does not (testmodels' docstring says why); pairs come
  from a seed the generator did not calibrate on. Swapped yes/no ids, a dropped query, or
  reading a padding position instead of the last prompt token break the ordering.
- the prompt: scores equal an independent computation written from Qwen3-Reranker's model card
  (prefix, `<Instruct>/<Query>/<Document>` body, suffix with an empty think block; softmax over
  the "no"/"yes" logits of the last token) with mlx_lm's model loader, one unpadded prompt at a
  time. A different template, instruction, or token order changes the logits.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxfleet_agent.dev import testmodels
from tests.integration.engines.conftest import Engine

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]

# Qwen3-Reranker model card, copied here on purpose (not imported from the engine)
CARD_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
CARD_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
CARD_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def _rerank(engine: Engine, query: str, documents: list[Any], **extra: Any) -> dict[str, Any]:
    resp = engine.post(
        "/v1/rerank", {"model": engine.name, "query": query, "documents": documents, **extra}
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _by_index(answer: dict[str, Any]) -> dict[int, float]:
    return {r["index"]: r["relevance_score"] for r in answer["results"]}


def _card_logits(model_dir: Path, query: str, docs: list[str], instruction: str) -> list[float]:
    """logit(yes) - logit(no) per document, the model card's way, one prompt at a time."""
    import mlx.core as mx
    from mlx_lm.utils import load_model
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    model, _ = load_model(model_dir)
    yes, no = tok.token_to_id("yes"), tok.token_to_id("no")

    def enc(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False).ids)

    out = []
    for doc in docs:
        body = f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"
        ids = enc(CARD_PREFIX) + enc(body) + enc(CARD_SUFFIX)
        logits = model(mx.array([ids]))[0, -1].astype(mx.float32)
        out.append(float(logits[yes]) - float(logits[no]))
    return out


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


@pytest.mark.parametrize(
    "relevant_first",
    [pytest.param(True, id="relevant-first"), pytest.param(False, id="relevant-last")],
)
def test_a_relevant_document_scores_above_an_irrelevant_one(
    rerank_engine: Engine, relevant_first: bool
) -> None:
    pairs = testmodels.sample_pairs(seed=7, count=12)
    for query, good, bad in pairs:
        docs = [good, bad] if relevant_first else [bad, good]
        answer = _rerank(rerank_engine, query, docs)
        best = answer["results"][0]
        assert best["index"] == (0 if relevant_first else 1), (query, answer)
        assert best["document"]["text"] == good
        scores = [r["relevance_score"] for r in answer["results"]]
        assert scores == sorted(scores, reverse=True)
        assert all(0.0 < s < 1.0 for s in scores)


def test_more_shared_words_score_higher(rerank_engine: Engine) -> None:
    # same token length: the query word appears 0, 1, 2, 3 times among four content words
    docs = [
        "the tiger near the piano by the drum of the harp",
        "the river near the piano by the drum of the harp",
        "the river near the river by the drum of the harp",
        "the river near the river by the river of the harp",
    ]
    scores = _by_index(_rerank(rerank_engine, "river", docs))
    assert scores[0] < scores[1] < scores[2] < scores[3]


def test_scores_follow_the_model_card_prompt(rerank_engine: Engine, reranker_model: Path) -> None:
    query = "eagle otter"
    docs = [
        "the eagle of a shark",
        "a whale in the canyon near the desert, under a falcon and the eagle",
        "otter",
        "the violin",
        "a mango, an olive and a lemon with the otter on the island of the eagle",
    ]
    want = _card_logits(reranker_model, query, docs, CARD_INSTRUCTION)
    got = _by_index(_rerank(rerank_engine, query, docs))
    for i, logit in enumerate(want):
        assert abs(_logit(got[i]) - logit) < 0.15, (i, _logit(got[i]), logit)


def test_an_instruction_changes_the_prompt(rerank_engine: Engine, reranker_model: Path) -> None:
    query, docs = "harp", ["the harp of the cello", "the drum"]
    instruction = "Find passages about string instruments"
    want = _card_logits(reranker_model, query, docs, instruction)
    got = _by_index(_rerank(rerank_engine, query, docs, instruction=instruction))
    default = _by_index(_rerank(rerank_engine, query, docs))
    for i, logit in enumerate(want):
        assert abs(_logit(got[i]) - logit) < 0.15
    assert got != default


def test_many_documents_score_as_they_do_alone(rerank_engine: Engine) -> None:
    docs = [f"{q} {good}" for q, good, _ in testmodels.sample_pairs(seed=11, count=30)]
    docs += [bad for _, _, bad in testmodels.sample_pairs(seed=12, count=30)]
    together = _by_index(_rerank(rerank_engine, "river mango", docs))
    for i in range(0, len(docs), 7):
        alone = _by_index(_rerank(rerank_engine, "river mango", [docs[i]]))[0]
        assert abs(_logit(together[i]) - _logit(alone)) < 0.15


def test_top_n_and_return_documents(rerank_engine: Engine) -> None:
    docs = ["the river", "the tiger", "river river", "the piano", {"text": "a river bank"}]
    full = _rerank(rerank_engine, "river", docs)
    top = _rerank(rerank_engine, "river", docs, top_n=2, return_documents=False)
    assert len(full["results"]) == 5
    assert [r["index"] for r in top["results"]] == [r["index"] for r in full["results"][:2]]
    assert all("document" not in r for r in top["results"])
    assert full["results"][0]["index"] == 2
    assert {r["index"] for r in full["results"]} == set(range(5))
    assert full["usage"]["total_tokens"] > 5 * 70  # the template alone is ~75 tokens a pair
    assert full["model"] == rerank_engine.name


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_rerank_routes(rerank_engine: Engine, path: str) -> None:
    resp = httpx.post(
        rerank_engine.url + path,
        json={"query": "river", "documents": ["river", "drum"]},
        timeout=30.0,
    )
    assert resp.status_code == 200
    assert resp.json()["results"][0]["index"] == 0


def test_an_embedding_engine_refuses_rerank(embed_engine: Engine) -> None:
    resp = embed_engine.post("/v1/rerank", {"query": "river", "documents": ["river"]})
    assert resp.status_code == 400
    assert "/v1/embeddings" in resp.json()["error"]["message"]
