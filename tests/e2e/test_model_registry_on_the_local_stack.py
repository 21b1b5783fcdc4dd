"""Vertex's Model Registry on the local stack, read and written by clients nobody here wrote, from a shell that
ran `eval "$(trainctl local env)"`: the Vertex SDK example of examples/vertex_sdk/model_registry.py
(`Model.upload`, `parent_model`, version aliases added and removed, `Model(…, version=…)`, `M@1`), then the
stock `gcloud ai models list`, `describe` (plain, `@version`, `@alias`) and `list-version` on what it made."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import REPO_ROOT
from tests.docs import doc
from tests.e2e.running_stack import RunningStack

pytestmark = pytest.mark.integration

SDK_EXAMPLE = REPO_ROOT / "examples" / "vertex_sdk" / "model_registry.py"
REGION = '--region="$TRAINCTL_REGION"'


@pytest.fixture(scope="module")
def sdk_model(stack: RunningStack) -> tuple[str, list[str]]:
    """(model id, lines printed) of one run of the SDK example on a model of its own."""
    model_id = f"sdk-{uuid.uuid4().hex[:8]}"
    ran = stack.shell(f"python {SDK_EXAMPLE} {model_id}", timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return model_id, ran.stdout.splitlines()


def test_the_vertex_sdk_example_versions_a_model_and_moves_its_aliases(stack: RunningStack, sdk_model):
    """Issue 26, the local stack: the SDK's `Model.upload(parent_model=…)`, `add_version_aliases`,
    `remove_version_aliases`, `list_versions` and `Model(…, version=…)` run unchanged against the local
    ModelService, and docs/local.md shows the code that ran."""
    model_id, printed = sdk_model
    control_bucket = stack.state.names["control_bucket"]

    assert printed[-4:] == [
        "version 1 -",  # the upload's champion and default both moved to version 2
        "version 2 champion,default",
        "champion 2",
        f"default 2 gs://{control_bucket}/models/{model_id}/1",
    ]
    page = doc("local.md")  # "The Model Registry"
    source = SDK_EXAMPLE.read_text()
    assert source[source.index("import os") :] in page


def test_gcloud_lists_describes_and_lists_the_versions_of_the_models(stack: RunningStack, sdk_model):
    """Issue 26, the local stack: the stock `gcloud ai models list / describe / list-version` read the local
        registry through the endpoint override `trainctl local env` exports, which answers with the project's number as
    Vertex does (issue 38); an unknown model is NOT_FOUND."""
    model_id, _ = sdk_model

    commands = [
        f"gcloud ai models list {REGION} --format='value(name.basename(),versionId)'",
        f"gcloud ai models describe {model_id} {REGION} --format=json",
        f"gcloud ai models describe {model_id}@1 {REGION} --format=json",
        f"gcloud ai models describe {model_id}@champion {REGION} --format=json",
        f"gcloud ai models list-version {model_id} {REGION}",
        f"gcloud ai models describe no-such-model {REGION}",
    ]
    # Each only reads, so they run side by side: a gcloud command spends most of its second starting up.
    with ThreadPoolExecutor(max_workers=3) as pool:
        listed, default, first, champion, versions, unknown = pool.map(stack.shell, commands)

    for shell in (listed, default, first, champion, versions):
        assert shell.returncode == 0, shell.stderr
    assert f"{model_id}\t2" in listed.stdout.splitlines()  # a model is listed as its default version
    assert (json.loads(default.stdout)["versionId"], json.loads(champion.stdout)["versionId"]) == ("2", "2")
    described = json.loads(first.stdout)
    assert described["name"].endswith(f"/models/{model_id}") and described["versionId"] == "1"
    assert described["name"].split("/")[1].isdigit()  # issue 38: the project by its number, as Vertex answers
    assert described["containerSpec"]["imageUri"] == "localhost/trainctl/trainer:latest"
    rows = [line.split() for line in versions.stdout.splitlines()]
    assert rows == [
        ["MODEL_ID", "VERSION_ID", "DISPLAY_NAME"],
        [f"{model_id}@1", "1", model_id],
        [f"{model_id}@2", "2", model_id],
    ]
    assert unknown.returncode != 0 and "NOT_FOUND" in unknown.stderr
