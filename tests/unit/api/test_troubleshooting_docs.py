"""docs/troubleshooting.md has an entry for every condition reason: what it means, what to do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlxfleet_operator.api import conditions

DOC = Path(__file__).resolve().parents[3] / "docs" / "troubleshooting.md"


def entries() -> dict[str, str]:
    """Reason -> the text of its `### `Reason`` section."""
    parts = re.split(r"^### `([A-Za-z]+)`\s*$", DOC.read_text(), flags=re.MULTILINE)
    return {parts[i]: parts[i + 1].split("\n## ")[0] for i in range(1, len(parts), 2)}


@pytest.mark.parametrize("reason", [pytest.param(r.value, id=r.value) for r in conditions.Reason])
def test_every_reason_says_what_it_means_and_what_to_do(reason: str) -> None:
    text = entries().get(reason)
    assert text is not None, f"docs/troubleshooting.md has no `### `{reason}`` entry"
    means, _, do = text.partition("**Do:**")
    assert "**Means:**" in means, reason
    assert len(means.split("**Means:**")[1].strip()) > 20, f"{reason}: say what it means"
    assert len(do.strip()) > 5, f"{reason}: say what to do"


def test_no_entry_for_a_reason_that_does_not_exist() -> None:
    assert set(entries()) <= {r.value for r in conditions.Reason}
