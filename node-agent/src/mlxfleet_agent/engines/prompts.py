"""Prompt and token rules of the decoder embedding and rerank models (pure; no mlx).

Qwen3-Reranker scores a (query, document) pair by the next-token logits of "yes" and "no" after a
fixed chat prompt. The text pieces below are the model card's (Qwen/Qwen3-Reranker-*): the
prefix, the user turn `<Instruct>: ...\\n<Query>: ...\\n<Document>: ...` and the suffix that
opens an assistant turn with an empty think block. Each piece is tokenised on its own without
special tokens and the ids are concatenated, as the reference code does.

Qwen3-Embedding pools the hidden state of the last token, which must be `<|endoftext|>`: the
model's own tokenizer appends it (its post-processor); `needs_end_token` tells whether an
encoding still lacks it, so a tokenizer that does not append it gives the same vectors.
May import: the standard library. Called by: mlx_encoder, dev.testmodels, tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

RERANK_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".'
    "<|im_end|>\n<|im_start|>user\n"
)
RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_RERANK_INSTRUCTION = (
    "Given a web search query, retrieve relevant passages that answer the query"
)
YES_TOKEN = "yes"  # noqa: S105 (a token, not a secret)
NO_TOKEN = "no"  # noqa: S105
END_TOKEN = "<|endoftext|>"  # noqa: S105 (a token, not a secret)


@dataclass(frozen=True, slots=True)
class RerankPrompt:
    """The three pieces of one rerank prompt, each tokenised separately."""

    prefix: str
    body: str
    suffix: str


def rerank_body(query: str, document: str, *, instruction: str | None = None) -> str:
    """The user turn of a Qwen3-Reranker prompt."""
    inst = instruction if instruction else DEFAULT_RERANK_INSTRUCTION
    return f"<Instruct>: {inst}\n<Query>: {query}\n<Document>: {document}"


def rerank_prompt(query: str, document: str, *, instruction: str | None = None) -> RerankPrompt:
    return RerankPrompt(
        RERANK_PREFIX, rerank_body(query, document, instruction=instruction), RERANK_SUFFIX
    )


def needs_end_token(ids: Sequence[int], end_id: int | None) -> bool:
    """True when `end_id` exists and the encoding does not already end with it."""
    return end_id is not None and (not ids or ids[-1] != end_id)
