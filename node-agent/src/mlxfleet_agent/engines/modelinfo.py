"""What a model directory is, for the embeddings/rerank engine: task, pooling, sizes.

A decoder checkpoint's config.json alone does not say whether it embeds or reranks
(Qwen3-Embedding, Qwen3-Reranker and the chat Qwen3 all say `Qwen3ForCausalLM`), so the task is
decided from, in order: the `--task` the engine was started with; a sentence-transformers layout
(`modules.json`, `1_Pooling/config.json`, which Qwen3-Embedding ships) -> embed; an
`mlxfleet_devmodel.kind` marker of our generated test models; else a clear error. Pooling comes
from `1_Pooling/config.json` (last token by default, Qwen3-Embedding's).
`describe` is pure (parsed JSON in, ModelInfo out); `read` gathers the files.
May import: the standard library. Called by: embed_server, mlx_encoder, tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Task = Literal["embed", "rerank"]
Pooling = Literal["last", "mean", "first"]
TASKS: tuple[str, ...] = ("embed", "rerank")
MARKER_KEY = "mlxfleet_devmodel"
# model types whose Matryoshka training we know of (Qwen3-Embedding: any prefix of the vector)
MATRYOSHKA_TYPES = frozenset({"qwen3"})
_POOLING_KEYS: tuple[tuple[str, Pooling], ...] = (
    ("pooling_mode_lasttoken", "last"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_cls_token", "first"),
)


class ModelDirError(ValueError):
    """The directory cannot be served by this engine (the message says why and what to do)."""


@dataclass(frozen=True, slots=True)
class ModelInfo:
    task: Task
    model_type: str
    hidden_size: int
    vocab_size: int
    max_positions: int
    pooling: Pooling
    matryoshka: bool


def _int(config: dict[str, Any], key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ModelDirError(f"config.json: `{key}` must be a positive integer, got {value!r}")
    return value


def _pooling(pooling_config: dict[str, Any] | None) -> Pooling:
    if pooling_config is None:
        return "last"
    for key, mode in _POOLING_KEYS:
        if pooling_config.get(key) is True:
            return mode
    raise ModelDirError(
        "1_Pooling/config.json asks for a pooling this engine does not implement "
        "(supported: pooling_mode_lasttoken, pooling_mode_mean_tokens, pooling_mode_cls_token)"
    )


def decide_task(requested: str, *, config: dict[str, Any], sentence_transformers: bool) -> Task:
    if requested in TASKS:
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ModelDirError(f"task must be one of auto, embed, rerank; got {requested!r}")
    if sentence_transformers:
        return "embed"
    marker = config.get(MARKER_KEY)
    kind = marker.get("kind") if isinstance(marker, dict) else None
    if isinstance(kind, str) and kind.endswith("-embedding"):
        return "embed"
    if isinstance(kind, str) and kind.endswith("-reranker"):
        return "rerank"
    raise ModelDirError(
        "cannot tell whether this model embeds or reranks (its config.json names a causal LM "
        "and it has no sentence-transformers files); start the engine with --task embed or "
        "--task rerank"
    )


def describe(
    config: dict[str, Any],
    *,
    requested_task: str,
    sentence_transformers: bool,
    pooling_config: dict[str, Any] | None,
    matryoshka: bool | None = None,
) -> ModelInfo:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ModelDirError("config.json has no `model_type`")
    task = decide_task(requested_task, config=config, sentence_transformers=sentence_transformers)
    max_positions = config.get("max_position_embeddings", 32768)
    if not isinstance(max_positions, int) or max_positions < 1:
        max_positions = 32768
    mrl = matryoshka if matryoshka is not None else model_type in MATRYOSHKA_TYPES
    return ModelInfo(
        task=task,
        model_type=model_type,
        hidden_size=_int(config, "hidden_size"),
        vocab_size=_int(config, "vocab_size"),
        max_positions=max_positions,
        pooling=_pooling(pooling_config) if task == "embed" else "last",
        matryoshka=mrl and task == "embed",
    )


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ModelDirError(f"{path.name}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelDirError(f"{path.name}: expected a JSON object")
    return data


def read_config(model_dir: Path) -> dict[str, Any]:
    config = _json(model_dir / "config.json")
    if config is None:
        raise ModelDirError(f"{model_dir} has no config.json")
    return config


def read(model_dir: Path, *, task: str = "auto", matryoshka: bool | None = None) -> ModelInfo:
    """Describe the model in `model_dir` (reads config.json and the sentence-transformers files)."""
    modules = (model_dir / "modules.json").is_file()
    pooling = _json(model_dir / "1_Pooling" / "config.json")
    return describe(
        read_config(model_dir),
        requested_task=task,
        sentence_transformers=modules or pooling is not None,
        pooling_config=pooling,
        matryoshka=matryoshka,
    )


def embedding_weights(weights: dict[str, Any]) -> dict[str, Any]:
    """Weights of the decoder stack only, under `model.` (what the embedding engine loads).

    A sentence-transformers / `Qwen3Model` export stores `layers.0...`, `embed_tokens.weight`,
    `norm.weight`; an mlx_lm or `*ForCausalLM` one stores the same under `model.` plus
    `lm_head.weight`. Both become `model.*`; the LM head and rotary caches are dropped.
    """
    out: dict[str, Any] = {}
    for name, value in weights.items():
        if name.startswith("lm_head.") or name.endswith("rotary_emb.inv_freq"):
            continue
        out[name if name.startswith("model.") else f"model.{name}"] = value
    return out
