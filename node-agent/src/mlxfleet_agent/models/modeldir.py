"""What a local model directory holds, for sizing: safetensors headers and config.json.

The file-reading half of model sizing (the pure half is `mlxfleet_agent.sizing`): the weight
bytes declared by safetensors headers and the shape from config.json. Unknown size fails closed
(`sizing.UnknownModelSize`).
May import: the standard library, contract, sizing. Called by: models.catalog (estimates),
models.store (the index); never by the operator.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from mlxfleet_agent import contract, sizing


def safetensors_bytes(path: Path) -> int:
    """Tensor data bytes declared by a safetensors header (UnknownModelSize if malformed)."""
    try:
        with path.open("rb") as f:
            raw_len = f.read(8)
            if len(raw_len) != 8:
                raise sizing.UnknownModelSize(f"{path.name}: truncated safetensors header")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len > 100 * 1024**2:
                raise sizing.UnknownModelSize(f"{path.name}: implausible safetensors header")
            header = json.loads(f.read(header_len))
    except (OSError, ValueError) as exc:
        if isinstance(exc, sizing.UnknownModelSize):
            raise
        raise sizing.UnknownModelSize(f"{path.name}: unreadable safetensors ({exc})") from exc
    if not isinstance(header, dict):
        raise sizing.UnknownModelSize(f"{path.name}: safetensors header is not an object")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2):
            raise sizing.UnknownModelSize(f"{path.name}: tensor {name!r} lacks data_offsets")
        end = max(end, int(offsets[1]))
    return end


def weights_bytes(path: Path) -> int:
    """Sum of the tensor data of every *.safetensors file in a model directory (0 if none)."""
    return sum(safetensors_bytes(p) for p in sorted(Path(path).glob("*.safetensors")))


def read_config(path: Path) -> dict[str, Any]:
    """config.json of a model directory as a dict (UnknownModelSize if unusable)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise sizing.UnknownModelSize(f"config.json unreadable in {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise sizing.UnknownModelSize(f"config.json in {path} is not a JSON object")
    return config


def inspect(path: Path) -> tuple[int, contract.ModelShape]:
    """(weights bytes, shape) of a local model directory (UnknownModelSize: cannot tell)."""
    size = weights_bytes(path)
    if size <= 0:
        raise sizing.UnknownModelSize(f"no safetensors weights in {path}")
    return size, sizing.shape_from_config(read_config(path))
