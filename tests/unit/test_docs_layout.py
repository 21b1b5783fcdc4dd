"""Issue 44, point 1: README.md is a new user's page that fits on a few screens, the reference lives in docs/, one
page per area, and no link between them points at nothing."""

from __future__ import annotations

import re

from functions.intake.marker_policy import DEFAULT_MAY_SET, MAY_SET_KEY
from local.stack import DEFAULT_TEMPLATE
from tests.docs import DOCS, README, anchors, doc, pages, relative_links

README_MAX_LINES = 320
# The areas issue 44 names, each a page of its own.
AREAS = {
    "requests.md", "capacity.md", "teams.md", "models.md", "own-code.md", "operations.md", "local.md",
    "deploying.md", "troubleshooting.md",
}  # fmt: skip


def test_readme_stays_short():
    """Guards issue 44, point 1: README was 2,338 lines of reference; a new user's page stays within ~300."""
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference text to a docs/ page"


def test_readmes_map_links_every_docs_page_and_each_exists():
    """Every page the map names exists, every docs/ page is on the map, and every area has its page."""
    linked = {target.split("#")[0] for target in relative_links(README) if target.startswith("docs/")}
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
