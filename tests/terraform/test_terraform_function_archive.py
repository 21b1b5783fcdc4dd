"""The deployed archive still works (issue 39, point 6): the Cloud Functions source archive, built as terraform/
functions.tf builds it — the files its `fileset` patterns match, plus root_main.py as the root main.py — carries
every subpackage of functions/, and each deployed entry point imports from it alone: nothing the archive leaves out
(the trainer, trainctl, local/) is reached."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from tfconfig import TERRAFORM_DIR

REPO = TERRAFORM_DIR.parent


def _expanded(pattern: str) -> list[str]:
    """A Terraform fileset pattern with its `{a,b}` alternatives spelled out, for pathlib's glob."""
    parts = re.split(r"\{([^}]*)\}", pattern)
    choices = [[part] if index % 2 == 0 else part.split(",") for index, part in enumerate(parts)]
    return ["".join(combination) for combination in itertools.product(*choices)]


def archive_files(tf) -> dict[str, Path]:
    """Archive name -> file, from the locals Terraform reads: each fileset pattern over the repository, and the
    literal files beside them."""
    expression = tf.locals["source_files"]
    files: dict[str, Path] = {}
    for pattern in re.findall(r'fileset\(local\.repo_root, "([^"]+)"\)', expression):
        for glob in _expanded(pattern):
            files |= {str(p.relative_to(REPO)): p for p in REPO.glob(glob) if "__pycache__" not in p.parts}
    for literal in re.findall(r'\["([^"]+)"\]', expression):
        files[literal] = REPO / literal
    return files


def test_the_archive_carries_every_subpackage_and_each_entry_point_imports_from_it_alone(tf, tmp_path):
    files = archive_files(tf)
    packages = {p.parent.name for p in (REPO / "functions").glob("*/__init__.py")}
    assert packages and all(f"functions/{name}/__init__.py" in files for name in packages), packages
    archive = tmp_path / "function-source.zip"
    with zipfile.ZipFile(archive, "w") as built:
        for name, path in files.items():
            built.write(path, name)
        built.write(TERRAFORM_DIR / "root_main.py", "main.py")
    unpacked = tmp_path / "source"
    zipfile.ZipFile(archive).extractall(unpacked)

    probe = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(unpacked)!r})\n"
        "import main\n"
        "entry = {name: callable(getattr(main, name)) for name in main.__all__}\n"
        "ours = {n: getattr(m, '__file__', '') or '' for n, m in list(sys.modules.items())\n"
        "        if n.split('.')[0] in ('main', 'functions', 'schemas', 'trainer', 'trainctl', 'local')}\n"
        "print(json.dumps({'entry': entry, 'modules': ours}))\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["entry"] and all(found["entry"].values()), found["entry"]
    outside = {name: path for name, path in found["modules"].items() if not path.startswith(str(unpacked))}
    assert outside == {}, f"imported from outside the archive: {outside}"
    assert any(name.startswith("functions.intake") for name in found["modules"]), "the subpackages were imported"
