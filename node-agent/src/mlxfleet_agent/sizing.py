"""Memory sizing of a loaded model: weights + KV cache + runtime overhead, and the node budget.

Pure functions over a model's shape (parsed from its config.json) and its weight size: no file
reads (those live in `mlxfleet_agent.models.modeldir`). Unknown size fails closed
(`UnknownModelSize`): an unsized model once wired all of a Mac's memory.

KV cache: 2 (K and V) x layers x kv_heads (GQA: not attention heads) x head_dim x context_length x
max_concurrency x bytes per element. Unquantized elements take the model's dtype (2 bytes for
float16/bfloat16). With `kv_bits` 4 or 8, mlx-lm's QuantizedKVCache stores `bits/8` bytes per
element plus, per group of `KV_GROUP_SIZE` (64) elements, a scale and a bias in the model dtype:
bytes/element = bits/8 + 2 x dtype_bytes / group_size (8-bit fp16: 1.0625; 4-bit fp16: 0.5625).

May import: the standard library and `mlxfleet_agent.contract` only (no mlx, no psutil, no
file I/O): the operator imports this module for placement. Called by: the agent (models.catalog
for admission and swaps, slots.registry for the budget), models.store (shapes of cached
models), the operator's placement core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mlxfleet_agent import contract

GIB = 1024**3
KV_GROUP_SIZE = 64
DEFAULT_OVERHEAD_BYTES = 512 * 1024**2  # python + mlx runtime + activations of a small batch
DEFAULT_USABLE_FRACTION = 0.75
DEFAULT_RESERVED_BYTES = 4 * GIB  # macOS, the agent, whatever else the Mac runs

DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "float": 4.0,
    "float16": 2.0,
    "half": 2.0,
    "bfloat16": 2.0,
    "float64": 8.0,
}


class UnknownModelSize(ValueError):
    """The model's size or shape cannot be told; callers must refuse to place or load it."""


@dataclass(frozen=True)
class Estimate:
    """Bytes a model needs once loaded and serving at its context length and concurrency."""

    weights_bytes: int
    kv_bytes: int
    overhead_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.overhead_bytes


def _positive_int(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value > 0 else None


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config (multimodal configs nest it under text_config)."""
    for key in ("text_config", "language_config", "llm_config"):
        nested = config.get(key)
        if isinstance(nested, dict) and "num_hidden_layers" in nested:
            merged = {k: v for k, v in config.items() if k != key}
            merged.update(nested)
            return merged
    return config


def dtype_bytes(config: dict[str, Any]) -> float:
    """Bytes per unquantized activation/KV element, from torch_dtype (or dtype); float16 default."""
    name = config.get("torch_dtype", config.get("dtype"))
    if name is None:
        return 2.0
    if not isinstance(name, str) or name.removeprefix("torch.") not in DTYPE_BYTES:
        allowed = ", ".join(sorted(DTYPE_BYTES))
        raise UnknownModelSize(f"config torch_dtype {name!r} is not one of {allowed}")
    return DTYPE_BYTES[name.removeprefix("torch.")]


def shape_from_config(config: dict[str, Any]) -> contract.ModelShape:
    """Read layers, KV heads, head_dim and dtype from a (possibly multimodal) config.json."""
    cfg = _text_config(config)
    layers = _positive_int(cfg, "num_hidden_layers") or _positive_int(cfg, "n_layer")
    heads = _positive_int(cfg, "num_attention_heads") or _positive_int(cfg, "n_head")
    kv_heads = _positive_int(cfg, "num_key_value_heads") or heads
    head_dim = _positive_int(cfg, "head_dim")
    if head_dim is None:
        hidden = _positive_int(cfg, "hidden_size") or _positive_int(cfg, "n_embd")
        if hidden is not None and heads is not None and hidden % heads == 0:
            head_dim = hidden // heads
    missing = [
        name
        for name, value in (
            ("num_hidden_layers", layers),
            ("num_key_value_heads or num_attention_heads", kv_heads),
            ("head_dim or hidden_size/num_attention_heads", head_dim),
        )
        if value is None
    ]
    if missing or layers is None or kv_heads is None or head_dim is None:
        raise UnknownModelSize(
            f"config.json lacks {', '.join(missing)}: positive integers are required"
        )
    return contract.ModelShape(
        num_layers=layers, num_kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes(cfg)
    )


def kv_bytes_per_element(shape: contract.ModelShape, kv_bits: int | None) -> float:
    """Bytes one cached K or V element takes, with group-quantization scale+bias overhead."""
    if kv_bits is None:
        return shape.dtype_bytes
    if kv_bits not in (2, 3, 4, 5, 6, 8):
        raise ValueError(f"kv_bits must be one of 2, 3, 4, 5, 6, 8 or None, got {kv_bits!r}")
    return kv_bits / 8 + 2 * shape.dtype_bytes / KV_GROUP_SIZE


def kv_cache_bytes(
    shape: contract.ModelShape, *, context_length: int, max_concurrency: int, kv_bits: int | None
) -> int:
    """KV cache at full context for every concurrent sequence (rounded up to whole bytes)."""
    if context_length < 1 or max_concurrency < 1:
        raise ValueError("context_length and max_concurrency must be >= 1")
    elements = (
        2
        * shape.num_layers
        * shape.num_kv_heads
        * shape.head_dim
        * context_length
        * max_concurrency
    )
    return math.ceil(elements * kv_bytes_per_element(shape, kv_bits))


def estimate(
    *,
    weights_bytes: int | None,
    shape: contract.ModelShape | None,
    context_length: int,
    max_concurrency: int,
    kv_bits: int | None,
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES,
) -> Estimate:
    """The memory a slot needs; raises UnknownModelSize when weights or shape are unknown."""
    if weights_bytes is None or weights_bytes <= 0:
        raise UnknownModelSize("weights size is unknown (no safetensors found): refusing to load")
    if shape is None:
        raise UnknownModelSize("model shape is unknown (no usable config.json): refusing to load")
    kv = kv_cache_bytes(
        shape, context_length=context_length, max_concurrency=max_concurrency, kv_bits=kv_bits
    )
    return Estimate(weights_bytes=weights_bytes, kv_bytes=kv, overhead_bytes=overhead_bytes)


def budget_bytes(
    total_bytes: int,
    *,
    usable_fraction: float = DEFAULT_USABLE_FRACTION,
    reserved_bytes: int = DEFAULT_RESERVED_BYTES,
) -> int:
    """Allocatable memory for slots: total x usable fraction - reserved, never below zero."""
    if not 0 < usable_fraction <= 1:
        raise ValueError(f"usable_fraction must be in (0, 1], got {usable_fraction}")
    return max(0, int(total_bytes * usable_fraction) - reserved_bytes)
