"""Placement decisions for tests of status verdicts: every node keeps the replica it has."""

from __future__ import annotations

from mlxfleet_operator.core.fleet import placement


def kept(nodes: tuple[str, ...], *, fits_nowhere: bool = False) -> placement.Decision:
    return placement.Decision(
        nodes=nodes,
        kept=nodes,
        added=(),
        dropped=(),
        rejections=(),
        missing=0,
        fits_nowhere=fits_nowhere,
    )
