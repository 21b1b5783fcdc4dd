"""Where the user's documentation lives (issue 44, point 1): README.md, a new user's page, and docs/, one page per
area. Tests that check the documentation says what the code does read the page the text lives on."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
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


# Every shell block of README.md and docs/ carries one of these marks, on the line right above it (issue 44: every
# command in the documentation is run by a test as typed, or says why it cannot be here):
# - `<!-- tour: NAME -->`: typed, in order, by the test of TOURS[NAME]; `<!-- tour: NAME (end) -->` marks the block
#   that ends the tour (its `local down`), typed after every other block of it, whatever page they are on;
# - `<!-- cloud-only -->`: needs a real Google Cloud project (terraform apply, gcloud against Google's services);
# - `<!-- not run: WHY -->`: something else that no test can type here, WHY saying what holds it instead.
# Both kinds of block that are not typed must still parse (`bash -n`) and name only trainctl commands and options the
# parser has (tests/unit/test_docs_layout.py).
TOUR_MARK = re.compile(r"^<!-- tour: ([a-z][a-z-]*)( \(end\))? -->$")
NOT_RUN_MARK = re.compile(r"^<!-- (cloud-only|not run: \S.*) -->$")
# A fenced block with one of these info strings holds shell commands; output, diagrams and files say `text`, `yaml`…
SHELL_INFO = frozenset({"", "sh", "bash", "shell", "console"})
# Each tour: the pages whose blocks it types, in this order (a page's blocks in their order on the page), and the
# test file that types them — one file per tour or two, since a file runs on one worker (`--dist loadfile`).
# A stack takes half a minute to start, so the pages that need one share a tour's (docs/local.md's) where they can.
TOURS: dict[str, tuple[tuple[str, ...], str]] = {
    "quickstart": (("README.md", "local.md"), "tests/e2e/test_readme_tour.py"),
    "local": (("local.md", "own-code.md", "requests.md", "models.md", "operations.md"),
              "tests/e2e/test_docs_local_tour.py"),
    "offline": (("requests.md", "capacity.md", "operations.md"), "tests/e2e/test_docs_offline_tour.py"),
}  # fmt: skip


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page: where it starts (1-based line of its opening fence), its info string, the mark
    on the line above it (or ""), and its lines."""

    page: str
    line: int
    info: str
    mark: str
    lines: tuple[str, ...]

    @property
    def shell(self) -> bool:
        return self.info in SHELL_INFO

    @property
    def tour(self) -> str | None:
        found = TOUR_MARK.match(self.mark)
        return found[1] if found else None

    @property
    def ends_tour(self) -> bool:
        found = TOUR_MARK.match(self.mark)
        return bool(found and found[2])

    def commands(self) -> list[str]:
        """The commands typed in the block (a block without a `$ ` prompt is commands only)."""
        if not any(line.startswith("$ ") for line in self.lines):
            return [line for line in self.lines if line.strip() and not line.lstrip().startswith("#")]
        return [command for command, _ in self.typed()]

    def typed(self) -> list[tuple[str, list[str]]]:
        """Each `$ ` command, with its continuation lines and here-document, and the lines the page shows after it."""
        typed: list[tuple[str, list[str]]] = []
        i = 0
        while i < len(self.lines):
            line = self.lines[i]
            i += 1
            if not line.startswith("$ "):
                if typed:
                    typed[-1][1].append(line)
                continue
            command = [line[2:]]
            heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)  # its body is taken as it stands, quotes and all
            continued = heredoc is None
            while heredoc or (continued and (command[-1].endswith("\\") or not balanced("\n".join(command)))):
                command.append(self.lines[i])
                if heredoc and self.lines[i] == heredoc[1]:
                    heredoc = None
                i += 1
            typed.append(("\n".join(command), []))
        return typed


def balanced(command: str) -> bool:
    """Whether `command` closes every quote it opens (a quoted argument may span lines)."""
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a markdown page, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        mark = lines[i - 1].strip() if i and lines[i - 1].startswith("<!--") else ""
        found.append(Block(path.name, i + 1, lines[i][3:].strip(), mark, tuple(lines[i + 1 : end])))
        i = end + 1
    return found


def tour_blocks(name: str) -> list[Block]:
    """The blocks a tour types, in its pages' order, the block that ends it last."""
    names, _ = TOURS[name]
    marked = [b for page in names for b in blocks(README if page == "README.md" else DOCS / page) if b.tour == name]
    return sorted(marked, key=lambda block: block.ends_tour)  # a stable sort: the others keep their order
