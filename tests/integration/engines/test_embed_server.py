"""The embeddings engine through real HTTP and the real `openai` client (tiny Qwen3 embedder).

Vectors are checked against an independent computation: mlx_lm's own qwen3 model run on one
unpadded sequence (the model card's recipe: the tokenizer appends <|endoftext|>, take the last
hidden state, L2-normalise), so wrong pooling, padding or weight loading in the engine fails.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.engines.conftest import EMBED_LIMITS, Engine

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "apple banana cherry",
    "A fleet of small computers serves language models.",
    "river",
    "Swap the model without dropping a single request; drain, switch, and stop. " * 3,
    "Memory is unified: weights, the key value cache and the runtime share it.",
]
TOL = 2e-3  # bfloat16 weights: a padded batch rounds a little differently from a lone row


def _matrix(resp: Any) -> np.ndarray:
    return np.array([d.embedding for d in sorted(resp.data, key=lambda d: d.index)], np.float32)


def _reference(model_dir: Path, texts: list[str]) -> tuple[np.ndarray, list[int]]:
    import mlx.core as mx
    from mlx_lm.models import qwen3
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    config = json.loads((model_dir / "config.json").read_text())
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))  # type: ignore[no-untyped-call]
    weights = mx.load(str(model_dir / "model.safetensors"))
    assert isinstance(weights, dict)
    model.load_weights([(f"model.{k}", v) for k, v in weights.items()])  # a Qwen3Model export
    rows, counts = [], []
    for text in texts:
        ids = tok.encode(text).ids
        assert ids[-1] == tok.token_to_id("<|endoftext|>")  # the model card's requirement
        last = model.model(mx.array([ids]))[0, -1].astype(mx.float32)
        vec = np.array(last)
        rows.append(vec / np.linalg.norm(vec))
        counts.append(len(ids))
    return np.stack(rows), counts


def test_vectors_match_an_independent_last_token_computation(
    embed_engine: Engine, embedding_model: Path
) -> None:
    resp = embed_engine.openai().embeddings.create(
        model=embed_engine.name, input=TEXTS, encoding_format="float"
    )
    got = _matrix(resp)
    want, counts = _reference(embedding_model, TEXTS)
    assert got.shape == (len(TEXTS), 64)
    assert [d.index for d in resp.data] == list(range(len(TEXTS)))
    assert np.abs(got - want).max() < TOL
    assert resp.usage.prompt_tokens == resp.usage.total_tokens == sum(counts)
    assert resp.model == embed_engine.name


def test_a_string_input_gives_one_unit_vector(embed_engine: Engine) -> None:
    resp = embed_engine.openai().embeddings.create(
        model=embed_engine.name, input="river", encoding_format="float"
    )
    assert len(resp.data) == 1
    assert abs(float(np.linalg.norm(resp.data[0].embedding)) - 1.0) < 1e-5


def test_every_vector_is_unit_length(embed_engine: Engine) -> None:
    got = _matrix(embed_engine.openai().embeddings.create(model=embed_engine.name, input=TEXTS))
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_identical_inputs_give_identical_vectors(embed_engine: Engine) -> None:
    client = embed_engine.openai()
    same = [TEXTS[2], TEXTS[0], TEXTS[2], TEXTS[2]]
    batch = _matrix(client.embeddings.create(model=embed_engine.name, input=same))
    assert np.array_equal(batch[0], batch[2])
    assert np.array_equal(batch[0], batch[3])
    again = _matrix(client.embeddings.create(model=embed_engine.name, input=same))
    assert np.array_equal(batch, again)
    assert not np.allclose(batch[0], batch[1])  # different texts really differ


def test_a_batch_equals_single_calls_in_any_order(embed_engine: Engine) -> None:
    rng = random.Random(5)
    words = [
        "fleet",
        "model",
        "swap",
        "memory",
        "token",
        "vector",
        "query",
        "river",
        "ocean",
        "apple",
        "piano",
        "node",
    ]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(40)]
    client = embed_engine.openai()
    batch = _matrix(client.embeddings.create(model=embed_engine.name, input=texts))
    singles = np.stack(
        [_matrix(client.embeddings.create(model=embed_engine.name, input=t))[0] for t in texts]
    )
    order = list(range(len(texts)))
    rng.shuffle(order)
    shuffled = _matrix(
        client.embeddings.create(model=embed_engine.name, input=[texts[i] for i in order])
    )
    assert np.abs(batch - singles).max() < TOL
    assert np.abs(shuffled - batch[order]).max() < TOL


def test_concurrent_requests_are_batched_without_mixing_answers(embed_engine: Engine) -> None:
    texts = [f"{t} {i}" for i, t in enumerate(TEXTS * 4)]
    client = embed_engine.openai()
    alone = {
        t: _matrix(client.embeddings.create(model=embed_engine.name, input=t))[0] for t in texts
    }
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        futures = {
            t: pool.submit(client.embeddings.create, model=embed_engine.name, input=[t, "river"])
            for t in texts
        }
        together = {t: _matrix(f.result()) for t, f in futures.items()}
    for t in texts:
        assert np.abs(together[t][0] - alone[t]).max() < TOL, t


def test_base64_decodes_to_the_float_answer(embed_engine: Engine) -> None:
    client = embed_engine.openai()
    floats = _matrix(
        client.embeddings.create(model=embed_engine.name, input=TEXTS, encoding_format="float")
    )
    # the openai client asks for base64 by default and decodes it itself
    decoded = _matrix(client.embeddings.create(model=embed_engine.name, input=TEXTS))
    assert np.array_equal(floats, decoded)
    raw = embed_engine.post(
        "/v1/embeddings",
        {"model": embed_engine.name, "input": TEXTS[0], "encoding_format": "base64"},
    ).json()
    text = raw["data"][0]["embedding"]
    assert isinstance(text, str)
    assert np.array_equal(np.frombuffer(base64.b64decode(text), dtype="<f4"), floats[0])


@pytest.mark.parametrize(
    "dims", [pytest.param(16, id="16"), pytest.param(1, id="1"), pytest.param(64, id="all")]
)
def test_dimensions_truncate_and_renormalise(embed_engine: Engine, dims: int) -> None:
    client = embed_engine.openai()
    full = _matrix(
        client.embeddings.create(model=embed_engine.name, input=TEXTS, encoding_format="float")
    )
    short = _matrix(
        client.embeddings.create(
            model=embed_engine.name, input=TEXTS, dimensions=dims, encoding_format="float"
        )
    )
    want = full[:, :dims] / np.linalg.norm(full[:, :dims], axis=1, keepdims=True)
    assert short.shape == (len(TEXTS), dims)
    assert np.abs(short - want).max() < 1e-5


def test_token_id_input_equals_text_input(embed_engine: Engine, embedding_model: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(embedding_model / "tokenizer.json"))
    client = embed_engine.openai()
    ids = [tok.encode(t).ids for t in TEXTS[:3]]
    by_text = _matrix(client.embeddings.create(model=embed_engine.name, input=TEXTS[:3]))
    by_ids = _matrix(client.embeddings.create(model=embed_engine.name, input=ids))
    one = _matrix(client.embeddings.create(model=embed_engine.name, input=ids[1]))
    assert np.abs(by_text - by_ids).max() < TOL
    assert np.abs(one[0] - by_text[1]).max() < TOL


def test_models_and_health_name_the_served_model(embed_engine: Engine) -> None:
    listed = embed_engine.openai().models.list()
    assert [m.id for m in listed.data] == [embed_engine.name]
    health = httpx.get(embed_engine.url + "/health", timeout=5.0)
    assert health.status_code == 200
    assert health.json()["task"] == "embed"


def test_the_largest_allowed_request_is_served(embed_engine: Engine) -> None:
    texts = [f"vector {i}" for i in range(EMBED_LIMITS["max_inputs"])]
    resp = embed_engine.openai().embeddings.create(model=embed_engine.name, input=texts)
    assert len(resp.data) == EMBED_LIMITS["max_inputs"]
    assert [d.index for d in resp.data] == list(range(len(texts)))


def test_a_reranker_engine_refuses_embeddings(rerank_engine: Engine) -> None:
    resp = rerank_engine.post("/v1/embeddings", {"input": "river"})
    assert resp.status_code == 400
    assert "/v1/rerank" in resp.json()["error"]["message"]


def test_embeddings_through_httpx_name_usage(embed_engine: Engine) -> None:
    resp = httpx.post(
        embed_engine.url + "/embeddings", json={"input": ["a", "b"]}, timeout=30.0
    ).json()
    assert resp["object"] == "list"
    assert resp["usage"]["prompt_tokens"] > 0
    assert [d["object"] for d in resp["data"]] == ["embedding", "embedding"]


def test_the_end_token_is_appended_when_the_tokenizer_does_not(
    embed_engine: Engine,
    embedding_model: Path,
    start_engine: Callable[..., Engine],
    tmp_path: Path,
) -> None:
    # the same weights with a tokenizer that does not append <|endoftext|> (as older
    # Qwen3-Embedding tokenizer.json files did not): the engine must still pool that token
    plain = tmp_path / "plain-tokenizer"
    shutil.copytree(embedding_model, plain)
    tok = json.loads((plain / "tokenizer.json").read_text())
    tok["post_processor"] = tok["post_processor"]["processors"][0]  # ByteLevel only
    (plain / "tokenizer.json").write_text(json.dumps(tok))
    engine = start_engine(plain, "plain")
    want = _matrix(embed_engine.openai().embeddings.create(model=embed_engine.name, input=TEXTS))
    got = _matrix(engine.openai().embeddings.create(model=engine.name, input=TEXTS))
    assert np.abs(got - want).max() < TOL
    engine.stop()
    # and without it (--end-token ''), the vectors are another model's: the check can fail
    bare = start_engine(plain, "bare", "--end-token=")
    other = _matrix(bare.openai().embeddings.create(model=bare.name, input=TEXTS))
    assert np.abs(other - want).max() > 0.1
    bare.stop()
