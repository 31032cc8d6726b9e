"""Memory estimate: hand-computed KV sizes, config parsing, fail-closed cases, properties."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlxfleet_agent import contract, sizing
from mlxfleet_agent.models import modeldir

GIB = 1024**3
LLAMA3_8B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
}


def _shape(layers: int = 32, kv: int = 8, head_dim: int = 128) -> contract.ModelShape:
    return contract.ModelShape(num_layers=layers, num_kv_heads=kv, head_dim=head_dim)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(LLAMA3_8B, (32, 8, 128, 2.0), id="llama3-8b-gqa"),
        pytest.param(
            {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64},
            (2, 4, 16, 2.0),
            id="no-kv-heads-falls-back-to-heads-default-fp16",
        ),
        pytest.param(
            {**LLAMA3_8B, "head_dim": 256, "torch_dtype": "float32"},
            (32, 8, 256, 4.0),
            id="explicit-head-dim-fp32",
        ),
        pytest.param(
            {
                "model_type": "llava",
                "torch_dtype": "float16",
                "vision_config": {"hidden_size": 1},
                "text_config": {
                    "num_hidden_layers": 40,
                    "num_attention_heads": 40,
                    "num_key_value_heads": 8,
                    "hidden_size": 5120,
                },
            },
            (40, 8, 128, 2.0),
            id="multimodal-text-config",
        ),
        pytest.param(
            {"n_layer": 12, "n_head": 12, "n_embd": 768, "torch_dtype": "torch.float16"},
            (12, 12, 64, 2.0),
            id="gpt2-style-names",
        ),
    ],
)
def test_shape_from_config(config: dict[str, Any], expected: tuple[int, int, int, float]) -> None:
    shape = sizing.shape_from_config(config)
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.dtype_bytes) == expected


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        pytest.param({}, "num_hidden_layers", id="empty"),
        pytest.param(
            {"num_hidden_layers": 2, "hidden_size": 64}, "num_attention_heads", id="no-heads"
        ),
        pytest.param(
            {"num_hidden_layers": 2, "num_attention_heads": 3, "hidden_size": 64},
            "head_dim",
            id="hidden-not-divisible",
        ),
        pytest.param({**LLAMA3_8B, "num_hidden_layers": 0}, "num_hidden_layers", id="zero-layers"),
        pytest.param({**LLAMA3_8B, "num_hidden_layers": "32"}, "num_hidden_layers", id="string"),
        pytest.param({**LLAMA3_8B, "torch_dtype": "int3"}, "torch_dtype", id="unknown-dtype"),
    ],
)
def test_shape_unknown(config: dict[str, Any], needle: str) -> None:
    with pytest.raises(sizing.UnknownModelSize, match=needle):
        sizing.shape_from_config(config)


def test_llama3_8b_kv_cache_is_4_gib() -> None:
    # 2 x 32 layers x 8 kv heads x 128 dims x 8192 ctx x 4 seqs x 2 bytes = 4 GiB
    shape = sizing.shape_from_config(LLAMA3_8B)
    kv = sizing.kv_cache_bytes(shape, context_length=8192, max_concurrency=4, kv_bits=None)
    assert kv == 4 * GIB


@pytest.mark.parametrize(
    ("kv_bits", "expected"),
    [
        pytest.param(8, 4 * GIB * 1.0625 / 2, id="8-bit: 1 byte + fp16 scale+bias per 64"),
        pytest.param(4, 4 * GIB * 0.5625 / 2, id="4-bit: 0.5 byte + fp16 scale+bias per 64"),
    ],
)
def test_quantized_kv(kv_bits: int, expected: float) -> None:
    kv = sizing.kv_cache_bytes(_shape(), context_length=8192, max_concurrency=4, kv_bits=kv_bits)
    assert kv == int(expected)


def test_bad_kv_bits_rejected() -> None:
    with pytest.raises(ValueError, match="kv_bits"):
        sizing.kv_cache_bytes(_shape(), context_length=1, max_concurrency=1, kv_bits=7)


def test_estimate_sums_parts() -> None:
    est = sizing.estimate(
        weights_bytes=16 * GIB,
        shape=_shape(),
        context_length=8192,
        max_concurrency=4,
        kv_bits=None,
        overhead_bytes=GIB,
    )
    assert (est.weights_bytes, est.kv_bytes, est.overhead_bytes) == (16 * GIB, 4 * GIB, GIB)
    assert est.total_bytes == 21 * GIB


@pytest.mark.parametrize(
    ("weights", "shape"),
    [
        pytest.param(None, _shape(), id="no-weights"),
        pytest.param(0, _shape(), id="zero-weights"),
        pytest.param(GIB, None, id="no-shape"),
    ],
)
def test_estimate_fails_closed(weights: int | None, shape: contract.ModelShape | None) -> None:
    with pytest.raises(sizing.UnknownModelSize, match="refusing"):
        sizing.estimate(
            weights_bytes=weights, shape=shape, context_length=8192, max_concurrency=1, kv_bits=None
        )


@pytest.mark.parametrize(
    ("total", "kwargs", "expected"),
    [
        pytest.param(64 * GIB, {}, 44 * GIB, id="64g-default"),
        pytest.param(
            16 * GIB, {"usable_fraction": 0.5, "reserved_bytes": 2 * GIB}, 6 * GIB, id="custom"
        ),
        pytest.param(4 * GIB, {}, 0, id="never-negative"),
    ],
)
def test_budget(total: int, kwargs: dict[str, Any], expected: int) -> None:
    assert sizing.budget_bytes(total, **kwargs) == expected


def test_budget_rejects_bad_fraction() -> None:
    with pytest.raises(ValueError, match="usable_fraction"):
        sizing.budget_bytes(GIB, usable_fraction=1.5)


def _write_safetensors(path: Path, tensors: dict[str, int]) -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "mlx"}}
    offset = 0
    for name, size in tensors.items():
        header[name] = {"dtype": "U8", "shape": [size], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_inspect_model_dir_sums_shards(tmp_path: Path) -> None:
    _write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": 100, "b": 28})
    _write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"c": 72})
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    size, shape = modeldir.inspect(tmp_path)
    assert size == 200
    assert shape.num_kv_heads == 8


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        pytest.param({"config.json": json.dumps(LLAMA3_8B)}, "no safetensors", id="no-weights"),
        pytest.param({"model.safetensors": b"\x01\x02"}, "truncated", id="truncated-header"),
        pytest.param(
            {"model.safetensors": struct.pack("<Q", 5) + b"{nope"}, "unreadable", id="bad-json"
        ),
        pytest.param(
            {"model.safetensors": "ok", "config.json": "[1]"},
            "not a JSON object",
            id="config-not-object",
        ),
        pytest.param({"model.safetensors": "ok"}, "config.json unreadable", id="no-config"),
    ],
)
def test_inspect_model_dir_unknown(tmp_path: Path, files: dict[str, Any], needle: str) -> None:
    for name, content in files.items():
        if content == "ok":
            _write_safetensors(tmp_path / name, {"w": 8})
        elif isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        else:
            (tmp_path / name).write_text(content)
    with pytest.raises(sizing.UnknownModelSize, match=needle):
        modeldir.inspect(tmp_path)


shapes = st.builds(
    contract.ModelShape,
    num_layers=st.integers(1, 128),
    num_kv_heads=st.integers(1, 64),
    head_dim=st.sampled_from([32, 64, 80, 96, 128, 256]),
    dtype_bytes=st.sampled_from([2.0, 4.0]),
)


@given(
    shape=shapes,
    ctx=st.integers(1, 200_000),
    conc=st.integers(1, 64),
    bits=st.sampled_from([4, 8, None]),
)
def test_kv_monotone_in_context_and_concurrency(
    shape: contract.ModelShape, ctx: int, conc: int, bits: int | None
) -> None:
    kv = sizing.kv_cache_bytes(shape, context_length=ctx, max_concurrency=conc, kv_bits=bits)
    assert kv > 0
    assert (
        sizing.kv_cache_bytes(shape, context_length=ctx + 1, max_concurrency=conc, kv_bits=bits)
        > kv
    )
    assert (
        sizing.kv_cache_bytes(shape, context_length=ctx, max_concurrency=conc + 1, kv_bits=bits)
        > kv
    )


@given(shape=shapes, ctx=st.integers(64, 200_000), conc=st.integers(1, 64))
def test_kv_bits_order(shape: contract.ModelShape, ctx: int, conc: int) -> None:
    def kv(bits: int | None) -> int:
        return sizing.kv_cache_bytes(shape, context_length=ctx, max_concurrency=conc, kv_bits=bits)

    assert kv(4) < kv(8) < kv(None)
