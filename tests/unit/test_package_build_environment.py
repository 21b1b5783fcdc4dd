"""A package's build runs without the JobService's environment (issue 40, point 6): its setup.py is the requester's
code, and the JobService runs it on the developer's machine, where the shell holds their credentials."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from local.jobservice.packages import pip_install

# Variables a developer's shell holds that the requester's code must never see.
HOST_SECRETS = {
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/dev/.config/gcloud/adc-{marker}.json",
    "CLOUDSDK_AUTH_ACCESS_TOKEN": "ya29.{marker}",
    "AWS_SECRET_ACCESS_KEY": "aws-{marker}",
    "STORAGE_EMULATOR_HOST": "http://127.0.0.1:1/{marker}",
    "PUBSUB_EMULATOR_HOST": "127.0.0.1:2",
    "PIP_INDEX_URL": "https://pypi.example/{marker}/simple",
}


def spying_package(folder: Path, record: Path) -> Path:
    """A source tree whose setup.py records the environment it runs in, and the HOME it sees."""
    folder.mkdir()
    (folder / "spy").mkdir()
    (folder / "spy" / "__init__.py").write_text("")
    (folder / "setup.py").write_text(
        "import json, os\n"
        f"open({str(record)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
        "from setuptools import setup\n"
        "setup(name='spy', version='1.0', packages=['spy'])\n"
    )
    return folder


def test_a_packages_setup_py_sees_no_credential_nor_emulator_of_the_jobservice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A setup.py that prints its environment, built by the local executor in a JobService whose environment holds
    a developer's cloud credentials and the emulators' hosts: none of GOOGLE_*, CLOUDSDK_*, AWS_*, *_EMULATOR_HOST
    (nor a pip index) reaches it, no value holds the marker, and its HOME is an empty folder of its own."""
    marker = f"host-secret-{os.getpid()}"
    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value.format(marker=marker))
    record = tmp_path / "seen.json"
    source = spying_package(tmp_path / "src", record)

    result = pip_install([source], tmp_path / "target")

    assert result.returncode == 0, result.stderr
    raw = record.read_text()
    seen = json.loads(raw)
    assert marker not in raw
    leaked = [
        name
        for name in seen
        if name.startswith(("GOOGLE_", "CLOUDSDK_", "AWS_"))
        or name.endswith("_EMULATOR_HOST")
        or name == "PIP_INDEX_URL"
    ]
    assert leaked == []
    assert seen["HOME"] != os.environ.get("HOME") and Path(seen["HOME"]).is_relative_to(tmp_path)
    assert seen["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert (tmp_path / "target" / "spy" / "__init__.py").exists()
