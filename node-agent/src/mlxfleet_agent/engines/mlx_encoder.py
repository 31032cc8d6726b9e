"""Decoder embedding and rerank models on mlx_lm's own model classes (engine process only).

`Encoder.load(dir)` builds the model with `mlx_lm.utils.load_model` (so quantized mlx-community
checkpoints load too) and the tokenizer from `tokenizer.json` with the `tokenizers` package
(truncation and padding switched off: limits are checked before a forward, never silently).
- embed: the decoder stack without its LM head; the pooled hidden state (last token by
  default, the one Qwen3-Embedding uses) of each sequence, float32, not yet normalised.
- rerank: the whole causal LM; score = sigmoid(logit("yes") - logit("no")) at the last prompt
  token, which equals softmax over the two logits, Qwen3-Reranker's reference scoring.
Batches are right-padded: with a causal mask no real token attends to the padding after it, so
a padded row computes exactly what the row alone would (up to float rounding of other shapes),
and the last real token is read at its own index. Run every call from one thread.
May import: mlx, mlx_lm, tokenizers, numpy, engines.{batching,modelinfo,prompts}.
Called by: embed_server, tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm import utils as mlx_utils
from tokenizers import Tokenizer

from mlxfleet_agent.engines import batching, modelinfo, prompts, vectors

_Module: Any = nn.Module  # type: ignore[attr-defined]  # (mlx's stubs lack it)


def _arch(config: dict[str, Any]) -> tuple[type[Any], type[Any]]:
    # mlx_lm's own lookup (handles its model-type remapping); private but stable across 0.2x
    classes: tuple[type[Any], type[Any]] = mlx_utils._get_classes(config)
    return classes


def _embedder_classes(config: dict[str, Any]) -> tuple[type[Any], type[Any]]:
    full_class, args_class = _arch(config)

    class Embedder(_Module):  # type: ignore[misc]
        def __init__(self, args: Any) -> None:
            super().__init__()
            full = full_class(args)
            if not isinstance(getattr(full, "model", None), _Module):
                raise modelinfo.ModelDirError(
                    f"model type {config.get('model_type')!r} has no decoder stack to embed with"
                )
            self.model = full.model

        def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
            return modelinfo.embedding_weights(weights)

    return Embedder, args_class


@dataclass(frozen=True, slots=True)
class BatchShape:
    """How one forward pass is bounded (server flags)."""

    max_tokens: int  # padded tokens per forward pass
    max_rows: int


class Encoder:
    """A loaded model and tokenizer; `run(seqs)` gives pooled vectors or scores."""

    def __init__(
        self,
        *,
        info: modelinfo.ModelInfo,
        model: Any,
        tokenizer: Tokenizer,
        shape: BatchShape,
        end_id: int | None,
    ) -> None:
        self.info = info
        self.model = model
        self.tokenizer = tokenizer
        self.shape = shape
        self.end_id = end_id
        self.pad_id = end_id if end_id is not None else 0
        self.yes_id = tokenizer.token_to_id(prompts.YES_TOKEN)
        self.no_id = tokenizer.token_to_id(prompts.NO_TOKEN)
        if info.task == "rerank" and (self.yes_id is None or self.no_id is None):
            raise modelinfo.ModelDirError(
                'the tokenizer has no "yes"/"no" tokens, so this model cannot score as a '
                "Qwen3-Reranker-style reranker"
            )
        self._prefix = self._ids(prompts.RERANK_PREFIX)
        self._suffix = self._ids(prompts.RERANK_SUFFIX)

    @classmethod
    def load(
        cls,
        model_dir: Path,
        *,
        task: str = "auto",
        shape: BatchShape,
        end_token: str | None = prompts.END_TOKEN,
        matryoshka: bool | None = None,
    ) -> Encoder:
        info = modelinfo.read(model_dir, task=task, matryoshka=matryoshka)
        tok_path = model_dir / "tokenizer.json"
        if not tok_path.is_file():
            raise modelinfo.ModelDirError(f"{model_dir} has no tokenizer.json")
        tokenizer = Tokenizer.from_file(str(tok_path))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        if info.task == "embed":
            model, _ = mlx_utils.load_model(model_dir, get_model_classes=_embedder_classes)
        else:
            model, _ = mlx_utils.load_model(model_dir)
        end_id = tokenizer.token_to_id(end_token) if end_token else None
        return cls(info=info, model=model, tokenizer=tokenizer, shape=shape, end_id=end_id)

    # ---- tokens -------------------------------------------------------------------------------

    def _ids(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def embedding_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of texts as the embedding model sees them (end token appended if missing)."""
        out = []
        for enc in self.tokenizer.encode_batch(list(texts), add_special_tokens=True):
            ids: list[int] = list(enc.ids)
            last = self.info.task == "embed" and self.info.pooling == "last"
            if last and self.end_id is not None and prompts.needs_end_token(ids, self.end_id):
                ids.append(self.end_id)
            out.append(ids)
        return out

    def rerank_ids(
        self, query: str, documents: Sequence[str], *, instruction: str | None
    ) -> list[list[int]]:
        bodies = [prompts.rerank_body(query, d, instruction=instruction) for d in documents]
        encoded = self.tokenizer.encode_batch(bodies, add_special_tokens=False)
        return [self._prefix + list(enc.ids) + self._suffix for enc in encoded]

    # ---- forward ------------------------------------------------------------------------------

    def run(self, seqs: Sequence[Sequence[int]]) -> list[Any]:
        """Pooled float32 vectors (embed) or float scores in (0, 1) (rerank), in input order."""
        lengths = [len(s) for s in seqs]
        out: list[Any] = [None] * len(seqs)
        for batch in batching.plan(
            lengths, max_tokens=self.shape.max_tokens, max_rows=self.shape.max_rows
        ):
            rows = self._forward([seqs[i] for i in batch])
            for i, row in zip(batch, rows, strict=True):
                out[i] = row
        return out

    def _forward(self, seqs: Sequence[Sequence[int]]) -> list[Any]:
        width = max(len(s) for s in seqs)
        ids = mx.array([list(s) + [self.pad_id] * (width - len(s)) for s in seqs], dtype=mx.int32)
        lengths = mx.array([len(s) for s in seqs], dtype=mx.int32)
        hidden = self.model.model(ids)  # (rows, width, hidden), final norm applied
        last = hidden[mx.arange(len(seqs)), lengths - 1]
        if self.info.task == "rerank":
            logits = self._head(last).astype(mx.float32)
            scores = mx.sigmoid(logits[:, self.yes_id] - logits[:, self.no_id])
            mx.eval(scores)
            return [float(s) for s in np.array(scores)]
        pooled = self._pool(hidden, last, lengths).astype(mx.float32)
        mx.eval(pooled)
        matrix: vectors.Matrix = np.array(pooled, dtype=np.float32)
        return list(matrix)

    def _pool(self, hidden: mx.array, last: mx.array, lengths: mx.array) -> mx.array:
        if self.info.pooling == "last":
            return last
        if self.info.pooling == "first":
            return hidden[:, 0]
        mask = (mx.arange(hidden.shape[1])[None, :] < lengths[:, None]).astype(mx.float32)
        summed = (hidden.astype(mx.float32) * mask[:, :, None]).sum(axis=1)
        return summed / lengths[:, None].astype(mx.float32)

    def _head(self, last: mx.array) -> mx.array:
        lm_head = getattr(self.model, "lm_head", None)
        if lm_head is not None:
            out: mx.array = lm_head(last)
            return out
        tied: mx.array = self.model.model.embed_tokens.as_linear(last)
        return tied


def warm(encoder: Encoder) -> None:
    """One tiny forward so the first request does not pay for lazy initialisation."""
    if encoder.info.task == "rerank":
        encoder.run(encoder.rerank_ids("ping", ["ping"], instruction=None))
    else:
        encoder.run(encoder.embedding_ids(["ping"]))
