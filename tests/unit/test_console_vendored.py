"""The console's third-party files (issue 45, point 3): each as its npm package's tarball holds it, with its version,
source and licence recorded in static/vendor/VENDORED.json, and nothing loaded from another origin."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "trainctl" / "console"
VENDOR = CONSOLE / "static" / "vendor"


def manifest() -> list[dict]:
    return json.loads((VENDOR / "VENDORED.json").read_text())["packages"]


def test_every_vendored_file_has_the_recorded_sha256():
    for package in manifest():
        for name, recorded in package["files"].items():
            content = (VENDOR / package["folder"] / name).read_bytes()
            assert hashlib.sha256(content).hexdigest() == recorded["sha256"], f"{package['folder']}/{name}"


def test_every_vendored_package_names_its_version_source_and_licence_file():
    for package in manifest():
        assert package["folder"] == f"{package['folder'].split('-')[0]}-{package['version']}"
        assert package["source"] == (
            f"https://registry.npmjs.org/{package['package']}/-/{package['package']}-{package['version']}.tgz"
        )
        assert re.fullmatch(r"[0-9a-f]{64}", package["tarball_sha256"])
        assert "LICENSE" in package["files"] and (VENDOR / package["folder"] / "LICENSE").stat().st_size > 100


def test_nothing_on_disk_is_unrecorded():
    recorded = {f"{p['folder']}/{name}" for p in manifest() for name in p["files"]}
    present = {p.relative_to(VENDOR).as_posix() for p in VENDOR.rglob("*") if p.is_file()} - {"VENDORED.json"}
    assert present == recorded


def test_no_page_loads_anything_from_another_origin():
    for template in (CONSOLE / "templates").glob("*.html"):
        text = template.read_text()
        assert not re.search(r"""(src|href)=["'](https?:)?//""", text), template.name
