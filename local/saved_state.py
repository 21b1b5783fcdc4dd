"""The local stack's lasting state (issue 44, point 4): what `trainctl local up` keeps across restarts, in one folder,
`saved/` in the stack's folder (local.stack_state.local_dir: `.trainctl/local/saved/` in a checkout):

    saved/trainctl-local-state.json   the marker and format file: {"format": N, "written_by": "trainctl X.Y.Z", …}
    saved/buckets/                    fake-gcs-server's filesystem root: every bucket (data, ledger, history, runs)
    saved/jobservice/                 the local JobService's --state-dir: jobs, Model Registry, endpoints,
                                      persistent resources, batch predictions and their logs

The Pub/Sub emulator keeps nothing: `local up` creates its topics and subscriptions again, and `reconcile` finds
every request the ledger holds that had not ended (its records are in the control bucket).

The format is versioned: a folder written in another format is refused, never read, with what to do (`--fresh`, or
moving it away); a folder without the marker file is never removed, since it may be someone else's.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from local.stack_state import local_dir

# Raised whenever what is kept, or how, changes so that an older or newer trainctl would read it wrong.
STATE_FORMAT = 1
FORMAT_FILE = "trainctl-local-state.json"
_KIND = "trainctl local stack state"


class SavedStateError(Exception):
    """The folder cannot be used as it is; the message says why and what to do."""


@dataclass(frozen=True)
class SavedState:
    directory: Path

    @property
    def buckets(self) -> Path:
        return self.directory / "buckets"

    @property
    def jobservice(self) -> Path:
        return self.directory / "jobservice"


def saved_dir() -> Path:
    return local_dir() / "saved"


def trainctl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trainctl")
    except PackageNotFoundError:
        return "unknown"


def read_format(directory: Path) -> dict[str, object] | None:
    """The format file's content; None when there is none. Raises SavedStateError when it is not one of ours."""
    path = directory / FORMAT_FILE
    try:
        content = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SavedStateError(f"{path} cannot be read ({exc}): not trainctl's local state, or damaged") from None
    if not isinstance(content, dict) or content.get("kind") != _KIND:
        raise SavedStateError(f"{path} is not trainctl's local state file")
    return content


def check(directory: Path) -> None:
    """Refuse (SavedStateError) a folder this trainctl must not read: one of another format, or not trainctl's."""
    if not directory.exists() or not any(directory.iterdir()):
        return
    content = read_format(directory)
    if content is None:
        raise SavedStateError(
            f"{directory} is not empty and holds no {FORMAT_FILE}: it is not trainctl's local state, so `local up` "
            "neither reads nor removes it. Move it away (or set TRAINCTL_LOCAL_DIR to another folder)"
        )
    found = content.get("format")
    if found != STATE_FORMAT:
        written_by = content.get("written_by", "an unknown trainctl")
        newer = isinstance(found, int) and found > STATE_FORMAT
        raise SavedStateError(
            f"{directory} holds local state in format {found} (written by {written_by}); this trainctl "
            f"({trainctl_version()}) reads format {STATE_FORMAT} only, and will not read it "
            f"{'written by a newer trainctl' if newer else 'from an older trainctl'}. "
            "To start empty, first copy out what you want to keep: `trainctl local export DIR` copies its buckets "
            "(data, trained models, ledger and history) as files; then `trainctl local up --fresh` removes that state. "
            f"Or move {directory} away, or run the trainctl that wrote it"
        )


def prepare(directory: Path | None = None, fresh: bool = False) -> SavedState:
    """The lasting folder, ready for a stack: created (with its format file) when empty; with `fresh`, the old state
    removed first — only when its format file says it is trainctl's. Raises SavedStateError as `check` does."""
    directory = (directory or saved_dir()).resolve()
    if fresh and directory.exists() and any(directory.iterdir()):
        read_format(directory)  # raises for a format file that is not ours
        if not (directory / FORMAT_FILE).is_file():
            check(directory)  # refuses: not ours, so not removed
        shutil.rmtree(directory)
    check(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / FORMAT_FILE).exists():
        document = {
            "kind": _KIND,
            "format": STATE_FORMAT,
            "written_by": f"trainctl {trainctl_version()}",
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        (directory / FORMAT_FILE).write_text(json.dumps(document, indent=2) + "\n")
    saved = SavedState(directory)
    saved.buckets.mkdir(exist_ok=True)
    saved.jobservice.mkdir(exist_ok=True)
    return saved
