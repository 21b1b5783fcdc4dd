"""`trainctl submit --source` packs the same code into the same bytes (issue 40, point 14): the archive's name is its
sha256, so a resubmission reuses the object only if packing is reproducible. Until now only a 30 s end-to-end test
noticed when it was not; this packs one folder twice, the second time as a fresh copy written in another order, at
another time, with other file times and modes, and compares the bytes."""

from __future__ import annotations

import gzip
import os
import tarfile
import time
from io import BytesIO
from pathlib import Path

from trainctl.source_package import build_source_archive

FILES = {
    "pkg/__init__.py": "",
    "pkg/train.py": "import argparse\n\nprint('training')\n",
    "pkg/data/__init__.py": "",
    "pkg/data/read.py": "ROWS = 3\n",
    "README.md": "code\n",
}


def write(folder: Path, names: list[str], mtime: float, mode: int) -> None:
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(FILES[name])
        path.chmod(mode)
        os.utime(path, (mtime, mtime))


def test_packing_a_folder_twice_gives_the_same_bytes(tmp_path, monkeypatch):
    """Issue 40, point 14: equal code, equal archive: whatever the files' order on disk, their times and modes,
    and the time of packing (gzip's header would hold it)."""
    first = tmp_path / "one" / "trainer_code"
    write(first, list(FILES), mtime=1_000_000_000, mode=0o644)
    packed = build_source_archive(first)

    second = tmp_path / "two" / "trainer_code"
    write(second, list(reversed(FILES)), mtime=1_700_000_000, mode=0o755)
    later = time.time() + 86_400
    monkeypatch.setattr(gzip.time, "time", lambda: later)  # packed a day later
    again = build_source_archive(second)

    assert again.data == packed.data and again.sha256 == packed.sha256
    assert again.filename == packed.filename == "trainer_code-0.0.0.tar.gz"
    with tarfile.open(fileobj=BytesIO(packed.data)) as archive:
        names = archive.getnames()
    assert names == sorted(names) and "trainer_code-0.0.0/pkg/data/read.py" in names
