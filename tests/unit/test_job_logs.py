"""The Cloud Logging stand-in's `entries:list` over a job's log folder, with the filters `gcloud ai custom-jobs
stream-logs` sends (google-cloud-sdk command_lib/logs/stream.py, command_lib/ai/log_util.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from local.jobservice.job_logs import JobLogs, list_entries
from local.jobservice.rest import RestAbort
from local.jobservice.store import JobStore

JOB_ID = "1795000000000001"
PROJECT = "trainctl-local"
# gcloud's first poll: the job, then "from the Unix epoch (+1 h) to 5 s ago".
GCLOUD_FILTER = (
    f'resource.type="ml_job" AND resource.labels.job_id="{JOB_ID}" AND '
    'timestamp>="1970-01-01T01:00:00.000000000Z" AND timestamp<"2999-01-01T00:00:00.000000+00:00"'
)


def write_logs(store: JobStore, files: dict[str, str], mtime: float = 1_800_000_000.0) -> Path:
    log_dir = store.jobs_dir / JOB_ID / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = log_dir / f"{name}.log"
        path.write_text(text)
        os.utime(path, (mtime, mtime))
    return log_dir


def listed(logs: JobLogs, filter_: str = GCLOUD_FILTER, **body) -> list[dict]:
    request = {"resourceNames": [f"projects/{PROJECT}"], "filter": filter_, "orderBy": "timestamp asc", **body}
    return list_entries(logs, request).get("entries", [])


@pytest.fixture
def store(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path)


def test_each_node_line_is_an_ml_job_entry_labelled_with_its_task(store: JobStore):
    """Guards issue 13 item 2: the nodes' lines in Cloud Logging's entry shape (resource.type=ml_job,
    labels.task_name), service lines under task `service`, in time order."""
    write_logs(
        store,
        {
            "service": "2027-01-15T08:00:00.000001+00:00 JOB_STATE_RUNNING\n",
            "workerpool0-0": "epoch 1 loss 0.5\nepoch 2 loss 0.4\n",
            "workerpool1-0": "worker ready\n",
        },
    )

    entries = listed(JobLogs(store))

    assert [(entry["resource"]["labels"]["task_name"], entry.get("textPayload")) for entry in entries] == [
        ("workerpool0-0", "epoch 1 loss 0.5"),
        ("workerpool0-0", "epoch 2 loss 0.4"),
        ("workerpool1-0", "worker ready"),
        ("service", "JOB_STATE_RUNNING"),
    ]
    first = entries[0]
    assert first["resource"] == {
        "type": "ml_job",
        "labels": {"project_id": PROJECT, "job_id": JOB_ID, "task_name": "workerpool0-0"},
    }
    assert first["logName"] == f"projects/{PROJECT}/logs/workerpool0-0"
    assert first["timestamp"] == "2027-01-15T08:00:00.000000Z"  # the file's modification time
    assert entries[-1]["timestamp"] == "2027-01-15T08:00:00.000001Z"
    assert len({entry["insertId"] for entry in entries}) == 4


def test_a_json_line_is_a_json_payload_with_its_severity(store: JobStore):
    """Guards issue 13 item 2: structured output reads as Cloud Logging parses it (jsonPayload.message)."""
    write_logs(store, {"workerpool0-0": json.dumps({"severity": "warning", "message": "slow step"}) + "\n"})

    (entry,) = listed(JobLogs(store))

    assert entry["jsonPayload"] == {"severity": "warning", "message": "slow step"}
    assert entry["severity"] == "WARNING"
    assert "textPayload" not in entry


def test_gcloud_polls_see_each_line_once_in_order(store: JobStore):
    """Guards issue 13 item 2: a line keeps its first timestamp, so gcloud's next poll (lower bound = the last
    timestamp seen, insertId breaking ties) returns only the lines written since."""
    log_dir = write_logs(store, {"workerpool0-0": "one\ntwo\n"}, mtime=1_800_000_000.0)
    logs = JobLogs(store)
    first = listed(logs)
    with open(log_dir / "workerpool0-0.log", "a") as log:
        log.write("three\nhalf a li")
    os.utime(log_dir / "workerpool0-0.log", (1_800_000_060.0, 1_800_000_060.0))

    last = first[-1]
    since = (
        f'resource.type="ml_job" AND resource.labels.job_id="{JOB_ID}" AND '
        f'((timestamp="{last["timestamp"]}" AND insertId>"{last["insertId"]}") OR timestamp>"{last["timestamp"]}")'
        ' AND timestamp<"2999-01-01T00:00:00.000000+00:00"'
    )
    second = listed(logs, since)

    assert [entry["textPayload"] for entry in first] == ["one", "two"]
    assert [entry["textPayload"] for entry in second] == ["three"]  # the unfinished line waits
    assert second[0]["timestamp"] > last["timestamp"]
    assert [entry["timestamp"] for entry in listed(logs)][:2] == [entry["timestamp"] for entry in first]


def test_task_name_upper_bound_and_paging_are_honoured(store: JobStore):
    """Guards issue 13 item 2: `--task-name`, gcloud's "until 5 s ago" bound, pageSize/pageToken."""
    write_logs(store, {"workerpool0-0": "a\nb\nc\n", "workerpool1-0": "d\n"})
    logs = JobLogs(store)

    only_worker = listed(logs, GCLOUD_FILTER + ' AND resource.labels.task_name="workerpool1-0"')
    too_new = listed(logs, GCLOUD_FILTER.replace("2999-01-01", "2020-01-01"))
    page = list_entries(logs, {"resourceNames": [f"projects/{PROJECT}"], "filter": GCLOUD_FILTER, "pageSize": 2})
    rest = list_entries(
        logs, {"resourceNames": [f"projects/{PROJECT}"], "filter": GCLOUD_FILTER, "pageToken": page["nextPageToken"]}
    )

    assert [entry["textPayload"] for entry in only_worker] == ["d"]
    assert too_new == []
    assert [entry["textPayload"] for entry in page["entries"] + rest["entries"]] == ["a", "b", "c", "d"]
    assert "nextPageToken" not in rest


def test_an_unreadable_filter_is_invalid_argument(store: JobStore):
    """Guards issue 13 item 2: a filter the stand-in cannot read is refused, never read as "everything"."""
    with pytest.raises(RestAbort, match="filter"):
        listed(JobLogs(store), 'timestamp>="yesterday"')
