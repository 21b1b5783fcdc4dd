"""Checkpoint storage on a local folder and on Cloud Storage (fake-gcs-server): commit markers, skipping what
is not committed or does not match its marker, keeping the last K."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading

import pytest
import torch

from trainer.checkpoints.committed import Checkpoints
from trainer.storage.folders import open_folder


@pytest.fixture(params=["local", "gcs"])
def checkpoint_uri(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "checkpoints")
    bucket = request.getfixturevalue("gcs_bucket")
    return f"gs://{bucket}/run/checkpoints/"


def state(step: int) -> dict:
    return {"step": step, "weights": torch.full((3,), float(step)), "rng": torch.get_rng_state()}


def warnings(capsys) -> list[dict]:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [e for e in lines if e["severity"] == "WARNING"]


def test_newest_committed_checkpoint_is_loaded_exactly(checkpoint_uri):
    checkpoints = Checkpoints(checkpoint_uri, keep=3)
    for step in (10, 20):
        checkpoints.save(step, state(step))
    step, loaded = checkpoints.latest()
    assert step == 20
    assert torch.equal(loaded["weights"], torch.full((3,), 20.0))
    assert torch.equal(loaded["rng"], torch.get_rng_state())


def test_no_checkpoint_means_a_fresh_start(checkpoint_uri):
    assert Checkpoints(checkpoint_uri).latest() is None


def test_uncommitted_and_corrupt_checkpoints_are_skipped_with_a_log_line(checkpoint_uri, capsys):
    checkpoints = Checkpoints(checkpoint_uri, keep=5)
    checkpoints.save(10, state(10))
    checkpoints.save(20, state(20))
    folder = open_folder(checkpoint_uri)
    folder.write_bytes("step-000000030/state.pt", b"half a checkpoint")  # a save cut short: no marker
    folder.write_bytes("step-000000020/state.pt", folder.read_bytes("step-000000010/state.pt"))  # marker mismatch
    capsys.readouterr()

    step, loaded = checkpoints.latest()

    assert step == 10 and loaded["step"] == 10
    skipped = warnings(capsys)
    assert [(e["message"], e["step"]) for e in skipped] == [
        ("skipping uncommitted checkpoint (no commit marker)", 30),
        ("skipping corrupt checkpoint", 20),
    ]
    assert "do not match its commit marker" in skipped[1]["reason"]


def _junk_marker(folder, step: str) -> str:
    folder.write_bytes(f"{step}/COMMITTED", b"{not json")
    return "unreadable"


def _state_that_does_not_load(folder, step: str) -> str:
    """State bytes that match their marker (a marker written for them) but are not a torch file."""
    data = b"PK\x03\x04 not a torch archive"
    marker = {"step": 20, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "time": 0}
    folder.write_bytes(f"{step}/state.pt", data)
    folder.write_bytes(f"{step}/COMMITTED", json.dumps(marker).encode())
    return "does not load"


@pytest.mark.parametrize("spoil", [_junk_marker, _state_that_does_not_load])
def test_a_checkpoint_whose_marker_is_unreadable_or_whose_state_does_not_load_falls_back_to_the_one_before(
    checkpoint_uri, capsys, spoil
):
    """Issue 29, point 7: a committed checkpoint that cannot be used (its COMMITTED marker is junk, or its state
    matches the marker but torch cannot load it) is passed over, with a log line saying why, for the previous
    committed one."""
    checkpoints = Checkpoints(checkpoint_uri, keep=5)
    checkpoints.save(10, state(10))
    checkpoints.save(20, state(20))
    why = spoil(open_folder(checkpoint_uri), "step-000000020")
    capsys.readouterr()

    step, loaded = checkpoints.latest()

    assert step == 10 and torch.equal(loaded["weights"], torch.full((3,), 10.0))
    skipped = warnings(capsys)
    assert [(e["message"], e["step"]) for e in skipped] == [("skipping corrupt checkpoint", 20)]
    assert why in skipped[0]["reason"]


def test_only_the_last_k_committed_checkpoints_are_kept_and_leftovers_are_removed(checkpoint_uri):
    checkpoints = Checkpoints(checkpoint_uri, keep=2)
    folder = open_folder(checkpoint_uri)
    folder.write_bytes("step-000000015/state.pt", b"left by an interrupted save")
    for step in (10, 20, 30, 40):
        checkpoints.save(step, state(step))
    assert folder.list() == [
        "step-000000030/COMMITTED", "step-000000030/state.pt", "step-000000040/COMMITTED", "step-000000040/state.pt"
    ]  # fmt: skip


def test_keeping_fewer_than_one_checkpoint_is_refused(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        Checkpoints(str(tmp_path), keep=0)


class Failing(Exception):
    """Injected into an upload: the node dies, or the network drops, halfway through the state."""


def fail_halfway_through_writing(checkpoints: Checkpoints, monkeypatch) -> None:
    """The next upload writes part of the state, then fails, as a crash mid-upload would leave it."""
    real_open_writer = checkpoints.folder.open_writer

    @contextlib.contextmanager
    def open_writer(name, **kwargs):
        with real_open_writer(name, **kwargs) as sink:
            yield HalfThenFail(sink)

    monkeypatch.setattr(checkpoints.folder, "open_writer", open_writer)


class HalfThenFail:
    def __init__(self, sink):
        self.sink, self.written = sink, 0

    def write(self, data):
        if self.written > 100:
            raise Failing("the upload broke off")
        self.written += len(data)
        return self.sink.write(data)

    def flush(self):
        self.sink.flush()


def test_a_crash_mid_upload_leaves_the_previous_checkpoint_the_newest_committed_one(checkpoint_uri, monkeypatch):
    """Guards issue 17 item 9: an upload that fails part-way never commits, the checkpoint before it still
    resumes, and the failure reaches the trainer at its next wait."""
    checkpoints = Checkpoints(checkpoint_uri, keep=3)
    checkpoints.save(10, big_state(10))
    fail_halfway_through_writing(checkpoints, monkeypatch)

    checkpoints.start_save(20, big_state(20))
    with pytest.raises(Failing):
        checkpoints.wait()

    step, loaded = Checkpoints(checkpoint_uri).latest()
    assert step == 10 and torch.equal(loaded["weights"], big_state(10)["weights"])
    assert not any(name.startswith("step-000000020/") for name in open_folder(checkpoint_uri).list())


def test_the_marker_is_written_after_every_byte_of_the_state(checkpoint_uri, monkeypatch):
    """Guards issue 17 item 9: the commit marker is the last thing a save writes."""
    checkpoints = Checkpoints(checkpoint_uri)
    written: list[str] = []
    real_open_writer, real_write_bytes = checkpoints.folder.open_writer, checkpoints.folder.write_bytes

    @contextlib.contextmanager
    def open_writer(name, **kwargs):
        with real_open_writer(name, **kwargs) as sink:
            yield sink
        written.append(name)  # the block ended: the state is complete

    def write_bytes(name, data):
        real_write_bytes(name, data)
        written.append(name)

    monkeypatch.setattr(checkpoints.folder, "open_writer", open_writer)
    monkeypatch.setattr(checkpoints.folder, "write_bytes", write_bytes)

    checkpoints.save(10, big_state(10))

    # (a local folder's write_bytes goes through open_writer too: each name is counted once, when first complete)
    assert list(dict.fromkeys(written)) == ["step-000000010/state.pt", "step-000000010/COMMITTED"]


def test_training_may_change_the_state_as_soon_as_the_save_returns(checkpoint_uri, monkeypatch):
    """Guards issue 17 item 9: the save copies the state before it returns, so the upload in the background
    writes the state as it was at the save even when training goes on changing the live tensors."""
    checkpoints = Checkpoints(checkpoint_uri)
    trained_on = hold_uploads_until(checkpoints, monkeypatch)
    live = big_state(10)
    expected = live["weights"].clone()

    checkpoints.start_save(10, live)
    live["weights"].add_(1.0)  # the next optimizer step, in place
    live["history"].append({"epoch": 2})
    trained_on.set()
    checkpoints.wait()

    _, loaded = checkpoints.latest()
    assert torch.equal(loaded["weights"], expected)
    assert loaded["history"] == [{"epoch": 1}]


def hold_uploads_until(checkpoints: Checkpoints, monkeypatch) -> threading.Event:
    """Uploads start writing only once the returned event is set (at the latest after 30 s)."""
    release = threading.Event()
    real_open_writer = checkpoints.folder.open_writer

    @contextlib.contextmanager
    def open_writer(name, **kwargs):
        release.wait(timeout=30)
        with real_open_writer(name, **kwargs) as sink:
            yield sink

    monkeypatch.setattr(checkpoints.folder, "open_writer", open_writer)
    return release


def test_one_upload_at_a_time_the_next_save_waits_for_the_previous_one(checkpoint_uri, monkeypatch):
    """Guards issue 17 item 9: at most one upload is in flight; a second save starts only after the first is
    committed."""
    checkpoints = Checkpoints(checkpoint_uri)
    release = hold_uploads_until(checkpoints, monkeypatch)
    checkpoints.start_save(10, big_state(10))
    second = threading.Thread(target=checkpoints.start_save, args=(20, big_state(20)))
    second.start()
    try:
        second.join(timeout=0.5)
        assert second.is_alive(), "the second save did not wait for the first upload"
        assert open_folder(checkpoint_uri).list() == []
    finally:
        release.set()
        second.join()
        checkpoints.wait()
    assert Checkpoints(checkpoint_uri).latest()[0] == 20


def test_a_large_state_reaches_cloud_storage_in_parts_composed_into_one_object(gcs_bucket):
    """Guards issue 17 item 9: a gs:// state is uploaded over several streams as parts (more than one compose
    request's 32), composed into `state.pt`, and the parts are deleted."""
    uri = f"gs://{gcs_bucket}/run/checkpoints/"
    folder = open_folder(uri)
    data = torch.randint(0, 256, (70 * 1024 + 17,), dtype=torch.uint8).numpy().tobytes()

    with folder.open_writer("step-000000010/state.pt", part_bytes=1024) as sink:
        for start in range(0, len(data), 5000):
            sink.write(data[start : start + 5000])

    assert folder.read_bytes("step-000000010/state.pt") == data
    assert folder.list() == ["step-000000010/state.pt"]


def test_a_failed_part_leaves_no_object_and_no_parts(gcs_bucket):
    """Guards issue 17 item 9: an error while writing a multi-part upload leaves neither the object nor parts."""
    uri = f"gs://{gcs_bucket}/run/checkpoints/"
    folder = open_folder(uri)

    with pytest.raises(Failing), folder.open_writer("step-000000010/state.pt", part_bytes=1024) as sink:
        sink.write(b"x" * 5000)
        raise Failing("the node died")

    assert folder.list() == []


def big_state(step: int) -> dict:
    """A state with tensors of more than one upload part, and a history the trainer appends to."""
    generator = torch.Generator().manual_seed(step)
    return {"step": step, "weights": torch.randn(300_000, generator=generator), "history": [{"epoch": 1}]}
