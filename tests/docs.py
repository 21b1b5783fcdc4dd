"""Where the user's documentation lives (issue 44, point 1): README.md, a new user's page, and docs/, one page per
area. Tests that check the documentation says what the code does read the page the text lives on."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
# A markdown link's target: [text](target), images included; an <a href> is not used in these pages.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def doc(name: str) -> str:
    """The text of a docs/ page (`models.md`) or of README.md."""
    return (README if name == "README.md" else DOCS / name).read_text()


def pages() -> list[Path]:
    """README.md, then every docs/ page in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def prose(text: str) -> str:
    """The text without its fenced code blocks (a `[x](y)` or `# x` there is not markdown)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return "\n".join(kept)


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings."""
    return {anchor(heading) for heading in re.findall(r"^#+ (.+)$", prose(path.read_text()), re.MULTILINE)}


def relative_links(path: Path) -> list[str]:
    """The targets of a markdown file's links that point inside this repository (not http:, mailto:)."""
    words = re.sub(r"`[^`]*`", "", prose(path.read_text()))  # nor is one in inline code
    return [t for t in LINK.findall(words) if not re.match(r"^[a-z]+:", t)]
