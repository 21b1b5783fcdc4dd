"""The local stack with clients nobody here wrote: a shell that ran `eval "$(trainctl local env)"` reaches it
with the stock `gcloud`, uploads (one file per `gcloud storage cp`, as fake-gcs-server lacks what a recursive
copy needs) start exactly one job per marker, and a request published with `gcloud pubsub topics publish`
starts a job. (`trainctl local down` is checked where the shared stack is stopped: tests/e2e/conftest.py.)"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from pathlib import Path

import pytest

from local.names import LOCAL_PROJECT, Names
from local.processes import wait_until
from tests.e2e.running_stack import RunningStack
from tests.integration.deployment import fake_node_request

pytestmark = pytest.mark.integration

NAMES = Names(LOCAL_PROJECT)


def exported(env_output: str) -> dict[str, str]:
    pairs = [shlex.split(line.removeprefix("export "))[0] for line in env_output.splitlines()]
    return dict(pair.split("=", 1) for pair in pairs)


def test_local_env_prints_what_another_shell_and_gcloud_need(stack: RunningStack):
    printed = stack.trainctl("local", "env")

    assert printed.returncode == 0, printed.stderr
    variables = exported(printed.stdout)
    state = stack.state
    assert variables["PUBSUB_EMULATOR_HOST"] == state.pubsub_host
    assert variables["STORAGE_EMULATOR_HOST"] == state.storage_url
    assert variables["CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE"] == state.storage_url + "/"
    assert variables["CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB"] == f"http://{state.pubsub_host}/"
    assert variables["CLOUDSDK_AUTH_ACCESS_TOKEN"] == "dummy"
    # Issue 13 item 1: gcloud ai and stream-logs reach the JobService's REST port (gcloud wants the slash).
    assert variables["CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM"] == state.jobservice_rest_url
    assert variables["CLOUDSDK_API_ENDPOINT_OVERRIDES_LOGGING"] == state.jobservice_rest_url
    assert re.fullmatch(r"http://127\.0\.0\.1:[0-9]+/", state.jobservice_rest_url)
    assert variables["TRAINCTL_LOCAL_VERTEX_REST_URL"] == state.jobservice_rest_url.rstrip("/")
    assert variables["CLOUDSDK_CORE_PROJECT"] == LOCAL_PROJECT
    assert variables["TRAINCTL_VERTEX_ENDPOINT"] == state.jobservice_rest_url.rstrip("/")
    assert variables["TRAINCTL_DATA_BUCKET"] == NAMES.data_bucket
    assert variables["TRAINCTL_REQUESTS_TOPIC"] == NAMES.requests_topic
    assert variables["TRAINCTL_LOCAL_ON_JOB_REQUEST_URL"] == state.function_urls["on_job_request"]
    assert {name: variables[name] for name in state.settings_env} == state.settings_env


def test_a_shell_that_evaluated_local_env_reaches_the_stack_with_gcloud_and_trainctl(stack: RunningStack):
    shell = stack.shell(
        "gcloud storage ls\n"
        'gcloud pubsub topics list --format="value(name)"\n'
        'gcloud pubsub subscriptions list --format="value(name)"\n'
        "trainctl list --all\n"
    )

    assert shell.returncode == 0, shell.stdout + shell.stderr
    lines = set(shell.stdout.splitlines())
    assert {f"gs://{NAMES.data_bucket}/", f"gs://{NAMES.control_bucket}/"} <= lines
    topics = (NAMES.requests_topic, NAMES.events_topic, NAMES.job_state_topic, NAMES.dead_letter_topic)
    assert {f"projects/{LOCAL_PROJECT}/topics/{topic}" for topic in topics} <= lines
    subscriptions = (NAMES.requests_subscription, NAMES.dead_letter_subscription)
    assert {f"projects/{LOCAL_PROJECT}/subscriptions/{name}" for name in subscriptions} <= lines
    # trainctl read the ledger through the exported settings: it lists every request in it (the stack is shared
    # by the e2e modules, so there may be requests of theirs, or none).
    in_ledger = {record["request_id"][:40] for record in json.loads(stack.trainctl("list", "--all", "--json").stdout)}
    first_words = {line.split()[0] for line in shell.stdout.splitlines() if line.strip()}
    assert in_ledger <= first_words and (in_ledger or "no requests" in shell.stdout), shell.stdout


def test_requests_are_pushed_to_on_job_request_with_a_dead_letter_topic_as_terraform_does(stack: RunningStack):
    described = stack.shell(f"gcloud pubsub subscriptions describe {NAMES.requests_subscription} --format=json")

    assert described.returncode == 0, described.stderr
    subscription = json.loads(described.stdout)
    endpoint = stack.state.function_urls["on_job_request"] + f"projects/{LOCAL_PROJECT}/topics/{NAMES.requests_topic}"
    assert subscription["pushConfig"]["pushEndpoint"] == endpoint
    assert subscription["deadLetterPolicy"] == {
        "deadLetterTopic": f"projects/{LOCAL_PROJECT}/topics/{NAMES.dead_letter_topic}",
        "maxDeliveryAttempts": 10,
    }


def test_data_files_then_a_marker_uploaded_with_gcloud_start_exactly_one_job(stack: RunningStack, tmp_path: Path):
    folder = f"fake/upload-{uuid.uuid4().hex[:8]}"
    shards = []
    for index in range(3):
        shards.append(tmp_path / f"part-{index:04d}.csv")
        shards[-1].write_text(f"x,y\n{index},1\n")
    marker = tmp_path / "_SUCCESS"
    marker.write_text("")
    # The data files side by side (each gcloud spends most of its second starting up), all of them before the marker.
    copies = ["pids=()"]
    copies += [
        f'gcloud storage cp {path} "gs://$TRAINCTL_DATA_BUCKET/{folder}/{path.name}" & pids+=($!)' for path in shards
    ]
    copies.append('for pid in "${pids[@]}"; do wait "$pid"; done')  # a failed copy fails the script (set -e)
    copies.append(f'gcloud storage cp {marker} "gs://$TRAINCTL_DATA_BUCKET/{folder}/_SUCCESS"')

    with stack.watch() as watch:
        uploaded = stack.shell("\n".join(copies))
        assert uploaded.returncode == 0, uploaded.stdout + uploaded.stderr
        derived = f"gcs.{folder.replace('/', '-')}-"  # a marker's request id: gcs.<folder>-<generation>
        succeeded = watch.wait_for(
            lambda event: event["request_id"].startswith(derived) and event["state"] == "succeeded"
        )

    request_id = succeeded["request_id"]
    assert watch.states(request_id) == ["accepted", "submitted", "running", "succeeded"]
    assert succeeded["trigger"]["object"] == f"{folder}/_SUCCESS"
    assert succeeded["metrics"] == {"rows": 3}
    started = [job.labels["trainctl_request"] for job in stack.jobs()]
    label = derived.replace(".", "-")  # label values take no '.'
    assert [started_id for started_id in started if started_id.startswith(label)] == [request_id.replace(".", "-")]

    def shards_set_aside() -> set[str]:
        entries = stack.log_entries("on_dataset_upload")
        return {entry.get("object") for entry in entries if entry["message"] == "not a marker; ignored"}

    # Each shard reached on_dataset_upload through the bridge and started nothing.
    expected = {f"{folder}/{path.name}" for path in shards}
    assert wait_until(lambda: expected <= shards_set_aside(), timeout=30), shards_set_aside()


def test_a_request_published_with_gcloud_starts_a_job(stack: RunningStack, tmp_path: Path):
    request_id = f"gcloud-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "request.json"
    path.write_text(json.dumps(fake_node_request(request_id, "--sleep", "0.2")))

    with stack.watch() as watch:
        published = stack.shell(f'gcloud pubsub topics publish "$TRAINCTL_REQUESTS_TOPIC" --message "$(cat {path})"')
        assert published.returncode == 0, published.stdout + published.stderr
        watch.wait_for(lambda event: event["request_id"] == request_id and event["state"] == "succeeded")

    assert watch.states(request_id) == ["accepted", "submitted", "running", "succeeded"]
    (job,) = stack.jobs_of(request_id)
    assert job.state.name == "JOB_STATE_SUCCEEDED"


def test_a_second_local_up_is_refused_while_the_stack_runs(stack: RunningStack):
    again = stack.trainctl("local", "up", "--detach")

    assert again.returncode == 1
    assert f"a local stack is already running (pid {stack.state.pid})" in again.stderr
    assert stack.state.running()
