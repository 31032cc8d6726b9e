"""Turn pooled hidden states into the vectors an embeddings answer carries (pure; numpy only).

`finish` applies Matryoshka truncation (the first `dimensions` coordinates) and L2
normalisation, in that order, so a truncated vector is unit length again (how Qwen3-Embedding's
model card says to shorten its vectors). `encode` writes rows as JSON floats or as OpenAI's
base64: the little-endian float32 bytes of the row.
May import: numpy and the standard library. Called by: embed_server, tests.
"""

from __future__ import annotations

import base64
from typing import Literal

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
EPS = 1e-12


def finish(pooled: Matrix, *, dimensions: int | None, normalize: bool) -> Matrix:
    """Rows of `pooled` (n x d, float32) truncated to `dimensions` and L2-normalised."""
    out = np.asarray(pooled, dtype=np.float32)
    if dimensions is not None:
        out = out[:, :dimensions]
    if normalize:
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out = out / np.maximum(norms, EPS)
    return np.ascontiguousarray(out, dtype=np.float32)


def encode(matrix: Matrix, fmt: Literal["float", "base64"]) -> list[list[float]] | list[str]:
    """One entry per row: a list of floats, or base64 of little-endian float32 bytes."""
    if fmt == "base64":
        little = np.ascontiguousarray(matrix, dtype="<f4")
        return [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    rows: list[list[float]] = matrix.astype(np.float32).tolist()
    return rows


def decode_base64(text: str) -> Matrix:
    """The inverse of `encode(..., "base64")` for one row (clients and tests)."""
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)
