"""SECURITY.md names, for every threat, the tests that prove its control: each named test must exist."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`")


def test_every_test_named_in_security_md_exists():
    text = (ROOT / "SECURITY.md").read_text()
    current, named, missing = None, 0, []
    for match in REFERENCE.finditer(text):
        path, name = match.groups()
        current = path or current
        if path and not (ROOT / path).exists():
            missing.append(path)
        if name:
            named += 1
            if f"def {name}(" not in (ROOT / current).read_text():
                missing.append(f"{current}::{name}")
    assert named >= 20 and missing == []
    assert text.count("### ") >= 10  # one section per threat
