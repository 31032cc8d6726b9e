"""README and docs/ stay inside the repository: every relative link resolves (anchors too) and
no text points outside the checkout (issue 15 item 11: README sent readers to ../shared/design/).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docs import anchors

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _id(page: Path) -> str:
    return str(page.relative_to(REPO))


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_relative_links_resolve_inside_the_repository(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        missing = not resolved.is_relative_to(REPO) or not resolved.exists()
        if missing or (anchor and resolved.suffix == ".md" and anchor not in anchors(resolved)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_no_page_points_outside_the_checkout(page: Path) -> None:
    outside = [m.group(0) for m in re.finditer(r"(?<![\w/.])\.\./[\w./-]*", page.read_text())]
    assert [o for o in outside if not (page.parent / o).resolve().is_relative_to(REPO)] == []


def test_readme_links_the_design_notes() -> None:
    readme = (REPO / "README.md").read_text()
    for doc in ("docs/architecture.md", "docs/style.md", "docs/install.md"):
        assert f"]({doc})" in readme
