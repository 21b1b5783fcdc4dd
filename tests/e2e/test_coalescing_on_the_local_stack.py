"""Issue 42's acceptance on the local stack: ten partitions landing within 30 s under a rule with a 20 s quiet window
make one run. The markers go through the data bucket's notifications and the Eventarc bridge to on_dataset_upload, and
the stack's own reconcile ticks start the window once it has been quiet."""

from __future__ import annotations

import urllib.parse
import urllib.request
import uuid

import pytest

from local.names import LOCAL_PROJECT, Names
from tests.e2e.running_stack import RunningStack
from tests.integration.deployment import DATA_SHARD

pytestmark = pytest.mark.integration


def upload(stack: RunningStack, name: str, data: str) -> None:
    bucket = Names(LOCAL_PROJECT).data_bucket
    url = f"{stack.state.storage_url.rstrip('/')}/upload/storage/v1/b/{bucket}/o"
    query = urllib.parse.urlencode({"uploadType": "media", "name": name})
    urllib.request.urlopen(urllib.request.Request(f"{url}?{query}", data=data.encode(), method="POST"), timeout=30)


def test_ten_partitions_in_30s_under_a_20s_quiet_window_make_one_run(stack: RunningStack):
    folder = f"burst/day-{uuid.uuid4().hex[:8]}"
    with stack.watch() as watch:
        for index in range(10):
            upload(stack, f"{folder}/p{index}/part-0.csv", DATA_SHARD)
            upload(stack, f"{folder}/p{index}/_SUCCESS", "")
        coalesced = watch.wait_for(
            lambda e: e["state"] == "coalesced" and f"/{folder}/" in e["markers"][0], timeout=180
        )
        request_id = coalesced["request_id"]
        watch.wait_for(lambda e: e["request_id"] == request_id and e["state"] == "succeeded", timeout=180)

    partitions = [m.split("#")[0].rsplit("/", 2)[-2] for m in coalesced["markers"]]
    assert sorted(partitions) == [f"p{i}" for i in range(10)]
    # The newest (the bridge's event times have whole seconds: then the latest generation) names the dataset.
    assert coalesced["markers"][-1] == max(coalesced["markers"], key=lambda m: int(m.split("#")[1]))
    assert coalesced["dataset_uri"].endswith(f"{folder}/{partitions[-1]}/")
    assert watch.states(request_id) == ["accepted", "coalesced", "submitted", "running", "succeeded"]
    label = f"gcs-{folder.replace('/', '-')}-"  # label values take no '.'
    started = [job.labels["trainctl_request"] for job in stack.jobs()]
    assert [s for s in started if s.startswith(label)] == [request_id.replace(".", "-")]
