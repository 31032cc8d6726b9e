"""Batching plans, vector finishing, prompt pieces and model-directory facts (pure)."""

from __future__ import annotations

import base64
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlxfleet_agent.engines import batching, modelinfo, prompts, vectors


@given(
    lengths=st.lists(st.integers(min_value=1, max_value=300), max_size=80),
    max_tokens=st.integers(min_value=1, max_value=2000),
    max_rows=st.integers(min_value=1, max_value=16),
)
def test_a_plan_covers_every_sequence_once_within_bounds(
    lengths: list[int], max_tokens: int, max_rows: int
) -> None:
    plan = batching.plan(lengths, max_tokens=max_tokens, max_rows=max_rows)
    assert sorted(i for b in plan for i in b) == list(range(len(lengths)))
    for b in plan:
        assert 1 <= len(b) <= max_rows
        width = max(lengths[i] for i in b)
        assert len(b) * width <= max_tokens or len(b) == 1  # only a lone long one may exceed


def test_similar_lengths_share_a_batch() -> None:
    lengths = [5, 100, 6, 98, 5, 99]
    plan = batching.plan(lengths, max_tokens=300, max_rows=8)
    assert plan == [[1, 5, 3], [2, 0, 4]]
    assert batching.padded_tokens(lengths, plan) == 300 + 18


def test_plan_rejects_empty_budgets() -> None:
    with pytest.raises(ValueError, match="positive"):
        batching.plan([1], max_tokens=0, max_rows=1)


def test_finish_truncates_then_normalises() -> None:
    pooled = np.array([[3.0, 4.0, 12.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    full = vectors.finish(pooled, dimensions=None, normalize=True)
    assert np.allclose(full[0], [3 / 13, 4 / 13, 12 / 13])
    assert np.array_equal(full[1], [0, 0, 0])  # a zero vector stays zero, no NaN
    short = vectors.finish(pooled, dimensions=2, normalize=True)
    assert np.allclose(short[0], [0.6, 0.8])
    raw = vectors.finish(pooled, dimensions=2, normalize=False)
    assert np.array_equal(raw[0], [3.0, 4.0])


def test_base64_is_little_endian_float32() -> None:
    row = np.array([[1.0, -2.5, 0.1]], dtype=np.float32)
    (text,) = vectors.encode(row, "base64")
    assert isinstance(text, str)
    assert base64.b64decode(text) == struct.pack("<3f", 1.0, -2.5, np.float32(0.1))
    assert np.array_equal(vectors.decode_base64(text), row[0])
    assert vectors.encode(row, "float") == [[1.0, -2.5, float(np.float32(0.1))]]


def test_rerank_prompt_is_the_model_cards() -> None:
    p = prompts.rerank_prompt("what is mlx?", "MLX is an array framework.")
    text = p.prefix + p.body + p.suffix
    assert text == (
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
        'Query and the Instruct provided. Note that the answer can only be "yes" or "no".'
        "<|im_end|>\n<|im_start|>user\n"
        "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
        "<Query>: what is mlx?\n<Document>: MLX is an array framework."
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    custom = prompts.rerank_body("q", "d", instruction="Find code")
    assert custom == "<Instruct>: Find code\n<Query>: q\n<Document>: d"


def test_needs_end_token() -> None:
    assert prompts.needs_end_token([5, 6], 0)
    assert not prompts.needs_end_token([5, 0], 0)
    assert prompts.needs_end_token([], 0)
    assert not prompts.needs_end_token([5], None)


CONFIG: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 64,
    "vocab_size": 100,
    "max_position_embeddings": 4096,
}
LAST = {"pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False}


@pytest.mark.parametrize(
    ("requested", "config", "st_files", "task"),
    [
        pytest.param("embed", CONFIG, False, "embed", id="told-embed"),
        pytest.param("rerank", CONFIG, True, "rerank", id="told-rerank-wins"),
        pytest.param("auto", CONFIG, True, "embed", id="sentence-transformers"),
        pytest.param(
            "auto",
            {**CONFIG, "mlxfleet_devmodel": {"kind": "qwen3-reranker"}},
            False,
            "rerank",
            id="marker-rerank",
        ),
        pytest.param(
            "auto",
            {**CONFIG, "mlxfleet_devmodel": {"kind": "qwen3-embedding"}},
            False,
            "embed",
            id="marker-embed",
        ),
    ],
)
def test_task_decision(requested: str, config: dict[str, Any], st_files: bool, task: str) -> None:
    info = modelinfo.describe(
        config, requested_task=requested, sentence_transformers=st_files, pooling_config=None
    )
    assert info.task == task


def test_an_undecidable_task_says_what_to_pass() -> None:
    with pytest.raises(modelinfo.ModelDirError, match="--task embed or --task rerank"):
        modelinfo.describe(
            CONFIG, requested_task="auto", sentence_transformers=False, pooling_config=None
        )
    with pytest.raises(modelinfo.ModelDirError, match="one of auto, embed, rerank"):
        modelinfo.describe(
            CONFIG, requested_task="chat", sentence_transformers=False, pooling_config=None
        )


def test_pooling_and_matryoshka() -> None:
    def info(**kw: Any) -> modelinfo.ModelInfo:
        args: dict[str, Any] = {
            "requested_task": "embed",
            "sentence_transformers": True,
            "pooling_config": LAST,
        }
        args.update(kw)
        return modelinfo.describe(args.pop("config", CONFIG), **args)

    assert info().pooling == "last"
    assert info().matryoshka
    assert info(pooling_config={"pooling_mode_mean_tokens": True}).pooling == "mean"
    assert info(pooling_config={"pooling_mode_cls_token": True}).pooling == "first"
    assert not info(config={**CONFIG, "model_type": "llama"}).matryoshka
    assert not info(matryoshka=False).matryoshka
    assert not info(requested_task="rerank").matryoshka
    with pytest.raises(modelinfo.ModelDirError, match="pooling"):
        info(pooling_config={"pooling_mode_max_tokens": True})
    with pytest.raises(modelinfo.ModelDirError, match="hidden_size"):
        info(config={**CONFIG, "hidden_size": "64"})


def test_embedding_weights_take_either_export() -> None:
    st_export = {"embed_tokens.weight": 1, "layers.0.mlp.up_proj.weight": 2, "norm.weight": 3}
    lm_export = {
        "model.embed_tokens.weight": 1,
        "model.layers.0.mlp.up_proj.weight": 2,
        "model.norm.weight": 3,
        "lm_head.weight": 4,
        "model.layers.0.self_attn.rotary_emb.inv_freq": 5,
    }
    want = {
        "model.embed_tokens.weight": 1,
        "model.layers.0.mlp.up_proj.weight": 2,
        "model.norm.weight": 3,
    }
    assert modelinfo.embedding_weights(st_export) == want
    assert modelinfo.embedding_weights(lm_export) == want
