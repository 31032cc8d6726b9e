"""The monthly report's full detail as CSV: one row per node and one per model of the month.

The executive PDF lists the DETAIL_ROWS nodes and models that cost most and sums the rest
(reports.monthly); these files, written next to the PDF (`monthly-YYYY-MM-nodes.csv`,
`monthly-YYYY-MM-models.csv`) and put in the bucket with it by `--write-back`, hold every row with
the PDF's columns, unrounded: fractions as fractions, money in USD, memory in bytes, latency in
seconds; an empty cell is a figure that is not known (no cost inputs, no requests).
May import: the standard library, reports.monthly. Called by: cli.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from mlxfleet_operator.reports import monthly

Cell = str | int | float | None

NODE_COLUMNS = (
    "node",
    "uptime_fraction",
    "busy_fraction",
    "requests",
    "tokens",
    "hardware_usd",
    "energy_kwh",
    "energy_source",
    "total_usd",
    "idle_usd",
    "usd_per_million_tokens",
    "peak_memory_bytes",
    "memory_total_bytes",
)
MODEL_COLUMNS = (
    "namespace",
    "model",
    "node_count",
    "nodes",
    "requests",
    "errors",
    "prompt_tokens",
    "completion_tokens",
    "tokens",
    "p50_seconds",
    "p95_seconds",
    "cost_usd",
    "usd_per_million_tokens",
    "reference_usd_per_million_tokens",
    "saving_ratio",
)


def _csv(columns: Sequence[str], rows: Iterable[Sequence[Cell]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow("" if v is None else v for v in row)
    return out.getvalue().encode()


def nodes_csv(report: monthly.MonthlyReport) -> bytes:
    """Every node of the month, in the report's order (by name)."""
    return _csv(
        NODE_COLUMNS,
        (
            (
                n.node,
                n.uptime,
                n.busy,
                n.requests,
                n.tokens,
                n.hardware_usd,
                n.energy_kwh,
                n.energy_note,
                n.total_usd,
                n.idle_usd,
                n.cpm,
                n.peak_memory,
                n.memory_total,
            )
            for n in report.nodes
        ),
    )


def models_csv(report: monthly.MonthlyReport) -> bytes:
    """Every model of the month, in the report's order (namespace, model); `nodes` is the
    names of the nodes that served it, separated by spaces."""
    return _csv(
        MODEL_COLUMNS,
        (
            (
                m.namespace,
                m.model,
                len(m.node_names),
                " ".join(m.node_names),
                m.requests,
                m.errors,
                m.prompt_tokens,
                m.completion_tokens,
                m.tokens,
                m.p50,
                m.p95,
                m.cost_usd,
                m.cpm,
                m.reference_cpm,
                m.saving,
            )
            for m in report.models
        ),
    )


def files(report: monthly.MonthlyReport) -> dict[str, bytes]:
    """{file name: CSV bytes} of the nodes and the models."""
    nodes_name, models_name = monthly.detail_names(report.s.period)
    return {nodes_name: nodes_csv(report), models_name: models_csv(report)}
