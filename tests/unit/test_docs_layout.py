"""Issue 44, point 1: README.md is a new user's page that fits on a few screens, the reference lives in docs/, one
page per area, and no link between them points at nothing."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess

from functions.intake.marker_policy import DEFAULT_MAY_SET, MAY_SET_KEY
from local.stack import DEFAULT_TEMPLATE
from tests.conftest import REPO_ROOT
from tests.docs import (
    DOCS,
    NOT_RUN_MARK,
    README,
    TOUR_MARK,
    TOURS,
    anchors,
    blocks,
    doc,
    pages,
    prose,
    relative_links,
    tour_blocks,
)
from trainctl.cli import build_parser

README_MAX_LINES = 320
# The areas issue 44 names, each a page of its own.
AREAS = {
    "requests.md", "capacity.md", "teams.md", "models.md", "own-code.md", "operations.md", "local.md",
    "deploying.md", "troubleshooting.md",
}  # fmt: skip
# A command in an indented (unfenced) code block: no mark can say whether it runs.
INDENTED_COMMAND = re.compile(r"^ {4}(\$ |\.venv/bin/|trainctl |gcloud |terraform |uv |pipx |make |source |python )")


def test_readme_stays_short():
    """Guards issue 44, point 1: README was 2,338 lines of reference; a new user's page stays within ~300."""
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference text to a docs/ page"


def test_readmes_map_links_every_docs_page_and_each_exists():
    """Every page the map names exists, every docs/ page is on the map, and every area has its page."""
    targets = {target.split("#")[0] for target in relative_links(README) if target.startswith("docs/")}
    linked = {target for target in targets if target.endswith(".md")}  # not the pictures
    assert {f"docs/{name}" for name in AREAS} <= linked, "an area of issue 44 has no page on README's map"
    assert all((README.parent / target).is_file() for target in linked), "README's map names a page that is not there"
    assert linked == {f"docs/{page.name}" for page in DOCS.glob("*.md")}, "a docs/ page missing from README's map"


def test_every_relative_link_in_readme_and_docs_resolves():
    """A link to a file of this repository names one that exists, and an anchor names a heading of that page."""
    broken = []
    for page in pages():
        for target in relative_links(page):
            path, _, fragment = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_exit_codes_are_findable():
    """The exit-code table has a heading of its own, and README's map points to its page."""
    assert "exit-codes" in anchors(DOCS / "operations.md")
    assert re.search(r"\[docs/operations\.md\]\(docs/operations\.md\)[^\n]*exit codes", doc("README.md"))


def test_the_quickstart_says_the_defaults_a_marker_gets():
    """Issue 44: the defaults a marker gets were found only in `trainctl local env`. The quickstart says them as the
    local stack's rule has them: the target column, the epochs, and the fields a marker may set (a model among them)."""
    readme = doc("README.md")
    assert f"predicting the column **`{DEFAULT_TEMPLATE['dataset']['target']}`**" in readme
    assert f"**{DEFAULT_TEMPLATE['trainer']['hyperparameters']['epochs']} epochs**" in readme
    may_set = [*DEFAULT_MAY_SET, *DEFAULT_TEMPLATE[MAY_SET_KEY]]
    assert "model" in may_set
    for field in may_set:
        assert f"`{field}`" in readme, f"the quickstart does not say a marker may set {field}"


def test_every_shell_block_is_run_by_a_tour_or_says_why_not():
    """Issue 44: every command in README and docs/ is run by a test as typed. A shell block carries a tour mark (a
    tour test types it) or says why it cannot run here (cloud-only, or `not run: WHY`); output, diagrams and files
    are `text`, `yaml`, … blocks; no shell command hides in an indented block, outside both."""
    unmarked = [f"{b.page}:{b.line}" for page in pages() for b in blocks(page)
                if b.shell and not (TOUR_MARK.match(b.mark) or NOT_RUN_MARK.match(b.mark))]  # fmt: skip
    assert not unmarked, f"shell blocks with neither a tour mark nor a reason not to run: {unmarked}"
    prompted = [f"{b.page}:{b.line}" for page in pages() for b in blocks(page)
                if not b.shell and any(line.startswith("$ ") for line in b.lines)]  # fmt: skip
    assert not prompted, f"`$ ` commands in a block that says it is not shell ({prompted}): mark it as shell"
    indented = [f"{page.name}: {line.strip()}" for page in pages() for line in prose(page.read_text()).splitlines()
                if INDENTED_COMMAND.match(line)]  # fmt: skip
    assert not indented, f"commands in indented blocks, which no mark can hold (fence them): {indented}"


def test_every_tour_mark_names_a_tour_that_a_test_file_runs():
    """A tour mark names a tour of TOURS on one of its pages, and each tour's test file types it (tour_steps)."""
    for page in pages():
        for block in blocks(page):
            if block.tour is not None:
                assert block.tour in TOURS, f"{page.name}:{block.line}: no tour {block.tour!r} in tests/docs.py"
                assert page.name in TOURS[block.tour][0], f"{page.name}:{block.line}: not a page of {block.tour!r}"
    for name, (_, test_file) in TOURS.items():
        assert f'tour_steps("{name}")' in (REPO_ROOT / test_file).read_text(), f"{test_file} does not type {name}"
        assert tour_blocks(name), f"no block is marked for the tour {name!r}"


def trainctl_calls(command: str) -> list[list[str]]:
    """The argument lists a command line gives `trainctl` (`.venv/bin/trainctl` alike), each up to the end of its
    simple command (a pipe, `;`, `&&`, a redirection, a comment)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    calls = []
    for i, word in enumerate(words):
        if word == "trainctl" or word.endswith("/trainctl"):
            args = []
            for arg in words[i + 1 :]:
                if arg and set(arg) <= set("|&;<>()"):
                    break
                args.append(arg)
            calls.append(args)
    return calls


def unknown_words(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """The commands and options of `args` that `parser` (trainctl's) does not have."""
    unknown = []
    for arg in args:
        if arg.startswith("-"):
            option = arg.split("=", 1)[0]
            if option not in parser._option_string_actions:
                unknown.append(arg)
            continue
        subcommands = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if subcommands is not None and not arg.startswith(("$", "<", "[")):
            if arg not in subcommands.choices:
                unknown.append(arg)
                break
            parser = subcommands.choices[arg]
    return unknown


def test_blocks_that_no_tour_types_still_parse_and_name_real_commands():
    """A cloud-only or not-run block is still what a person types: bash parses it (`bash -n`), and every trainctl
    command and option it names is one the parser has."""
    parser = build_parser()
    problems = []
    for page in pages():
        for block in blocks(page):
            if not (block.shell and NOT_RUN_MARK.match(block.mark)):
                continue
            script = "\n".join(block.commands())
            parsed = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)
            if parsed.returncode != 0:
                problems.append(f"{page.name}:{block.line}: bash -n: {parsed.stderr.strip()}")
            for args in (args for command in block.commands() for args in trainctl_calls(command)):
                if unknown := unknown_words(parser, [a.strip("[]") for a in args]):
                    problems.append(f"{page.name}:{block.line}: trainctl {' '.join(args)}: no {unknown}")
    assert not problems, "\n".join(problems)


def test_the_check_of_untyped_blocks_finds_a_wrong_command_or_option():
    """The check above would see a misspelt subcommand, an option the parser lacks, or a line bash cannot parse."""
    parser = build_parser()
    assert unknown_words(parser, trainctl_calls("trainctl report --since 7d --by team --json")[0]) == []
    assert unknown_words(parser, trainctl_calls("trainctl reprot --since 7d")[0]) == ["reprot"]
    assert unknown_words(parser, trainctl_calls(".venv/bin/trainctl models promote m 2 --alais c | head")[0]) == [
        "--alais"
    ]
    assert trainctl_calls("x=$(.venv/bin/trainctl list --all); echo") == [["list", "--all"]]
