"""Every error `code` the gateway can answer is in docs/gateway.md's error table (a new user met
`backend_unusable` and found nothing): the codes are read from the gateway's source, so a new one
without a row fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SOURCE = REPO / "gateway" / "src" / "mlxfleet_gateway"
# code="x": a refusal; code or "x": an upstream's answer without a code; code: str = "x": a default
CODE = re.compile(r'\bcode(?:=| or |: str = )"([a-z_]+)"')


def _table(doc: str) -> str:
    start = doc.index("### Errors")
    end = doc.index("\n## ", start)
    return doc[start:end]


def test_every_error_code_the_gateway_answers_has_a_row() -> None:
    codes = {m for f in SOURCE.rglob("*.py") for m in CODE.findall(f.read_text())}
    assert {"no_backend", "backend_unusable", "model_not_found"} <= codes  # the scan works
    table = _table((REPO / "docs" / "gateway.md").read_text())
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    documented = {c for row in rows for c in re.findall(r"`([a-z_]+)`", row)}
    assert sorted(codes - documented) == []
