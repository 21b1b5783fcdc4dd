"""The local stack's lasting folder (local/saved_state.py, issue 44 point 4): created with its versioned format file;
`--fresh` removes only state that is trainctl's; a folder of another format — older or newer — is refused with what
to do, before anything starts and before anything in it is read or changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local.saved_state import FORMAT_FILE, STATE_FORMAT, SavedStateError, check, prepare, trainctl_version
from local.stack_state import LOCAL_DIR_VAR
from trainctl.cli import main


def forge(directory: Path, version: int) -> None:
    """A folder as another trainctl would have left it: its format file says `version`, and it holds a bucket."""
    prepare(directory)
    document = json.loads((directory / FORMAT_FILE).read_text())
    document |= {"format": version, "written_by": "trainctl 0.0.9"}
    (directory / FORMAT_FILE).write_text(json.dumps(document))
    (directory / "buckets" / "old-bucket").mkdir()


def test_a_new_folder_gets_the_format_file_and_its_pieces(tmp_path: Path):
    saved = prepare(tmp_path / "saved")

    document = json.loads((tmp_path / "saved" / FORMAT_FILE).read_text())
    assert document["format"] == STATE_FORMAT
    assert document["written_by"] == f"trainctl {trainctl_version()}"
    assert saved.buckets.is_dir() and saved.jobservice.is_dir()
    (saved.buckets / "kept").write_text("x")
    assert (prepare(tmp_path / "saved").buckets / "kept").read_text() == "x"  # a second start keeps it


@pytest.mark.parametrize("version", [STATE_FORMAT - 1, STATE_FORMAT + 1])
def test_another_format_is_refused_with_what_to_do(tmp_path: Path, version: int):
    forge(tmp_path / "saved", version)

    with pytest.raises(SavedStateError) as refused:
        prepare(tmp_path / "saved")

    message = str(refused.value)
    assert f"format {version} (written by trainctl 0.0.9)" in message
    assert f"reads format {STATE_FORMAT} only" in message
    assert "`trainctl local up --fresh`" in message
    assert "`trainctl local export DIR`" in message
    assert ("newer" if version > STATE_FORMAT else "older") in message
    assert (tmp_path / "saved" / "buckets" / "old-bucket").is_dir()  # nothing touched


def test_fresh_removes_trainctls_old_state(tmp_path: Path):
    forge(tmp_path / "saved", STATE_FORMAT - 1)

    saved = prepare(tmp_path / "saved", fresh=True)

    assert list(saved.buckets.iterdir()) == []
    assert json.loads((saved.directory / FORMAT_FILE).read_text())["format"] == STATE_FORMAT


def test_a_folder_that_is_not_trainctls_is_neither_read_nor_removed(tmp_path: Path):
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")

    for fresh in (False, True):
        with pytest.raises(SavedStateError, match="not trainctl's local state"):
            prepare(folder, fresh=fresh)
    (folder / FORMAT_FILE).write_text('{"kind": "something else", "format": 1}')
    with pytest.raises(SavedStateError, match="is not trainctl's local state file"):
        prepare(folder, fresh=True)

    assert (folder / "thesis.tex").read_text() == "years of work"


def test_local_up_refuses_a_forged_older_state_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv(LOCAL_DIR_VAR, str(tmp_path / "local"))
    forge(tmp_path / "local" / "saved", STATE_FORMAT - 1)

    for detach in ([], ["--detach"]):
        assert main(["local", "up", *detach]) == 4
        err = capsys.readouterr().err
        assert err.startswith(f"trainctl local up: {tmp_path / 'local' / 'saved'} holds local state in format 0")
        assert "Traceback" not in err
    assert not (tmp_path / "local" / "run").exists()  # nothing started
    check_after = json.loads((tmp_path / "local" / "saved" / FORMAT_FILE).read_text())
    assert check_after["format"] == STATE_FORMAT - 1  # and nothing rewritten
    check(tmp_path / "empty")  # an absent folder is fine: a first start


def test_local_export_copies_the_kept_buckets_out_as_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv(LOCAL_DIR_VAR, str(tmp_path / "local"))
    assert main(["local", "export", str(tmp_path / "out")]) == 3  # nothing kept yet
    forge(tmp_path / "local" / "saved", STATE_FORMAT - 1)  # any format: the buckets are plain files
    model = tmp_path / "local" / "saved" / "buckets" / "control" / "models" / "churn" / "1" / "model.joblib"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"weights")
    (tmp_path / "local" / "saved" / "buckets" / "control.bucketMetadata").write_text("{}")
    capsys.readouterr()

    assert main(["local", "export", str(tmp_path / "out")]) == 0

    assert (tmp_path / "out" / "control" / "models" / "churn" / "1" / "model.joblib").read_bytes() == b"weights"
    assert not (tmp_path / "out" / "control.bucketMetadata").exists()
    assert capsys.readouterr().out == f"exported 2 bucket(s) to {tmp_path / 'out'}: control, old-bucket\n"
    assert main(["local", "export", str(tmp_path / "out")]) == 2  # never into a folder that holds something
