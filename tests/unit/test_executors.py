"""Executors past their date (issue 40, point 8): Google's list as the catalog records it, the operator's own list
(TRAINCTL_EXECUTORS, Terraform's `executors`), admission refusing an executor past its end of availability (pure, and
through the controller with its clock), and `validate` / `plan` warning of one near or past it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from functions.jobs.admission import admission_problems
from functions.jobs.executors import executor_problems, executor_warnings
from functions.jobs.planning import plan_custom_job
from functions.settings import Settings, SettingsError
from schemas.executors import (
    EXECUTORS,
    EXECUTORS_AS_OF,
    NEAR_END,
    ExecutorsError,
    executors_json,
    parse_executors,
)
from tests.unit.conftest import make_request
from tests.unit.controller_harness import NOW, harness

ROOT = Path(__file__).parents[2]
DIGEST = "cd" * 32
PACKAGE = {
    "uris": [f"gs://data-bucket/packages/sha256-{DIGEST}/pkg-0.1.tar.gz"],
    "module": "pkg.train",
    "executor": "pytorch-2.4",
}
NEWER = {
    "image": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-6.py310:latest",
    "pytorch": "2.6",
    "cuda": "12.x",
    "max_compute_capability": "9.0",
    "available_until": "2027-06-30",
}


def package_request(executor: str = "pytorch-2.4"):
    return make_request(trainer={"python_package": PACKAGE | {"executor": executor}})


def with_newer() -> dict:
    """Google's list and a newer executor, as an operator would list it once Google publishes one."""
    return {**EXECUTORS, **parse_executors(json.dumps({"pytorch-2.6": NEWER}))}


def test_the_catalog_is_googles_list_as_the_stored_page_dates_it():
    """Google's "Prebuilt containers for custom training", PyTorch rows (schemas/executors.py; local/FIDELITY.md): the
    images, their end of availability, and that by the date the figures were taken every one of them is past it."""
    assert {name: (e.image, e.available_until.isoformat()) for name, e in EXECUTORS.items()} == {
        "pytorch-2.4": ("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest", "2026-07-24"),
        "pytorch-2.3": ("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-3.py310:latest", "2026-04-24"),
        "pytorch-2.2": ("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-2.py310:latest", "2026-01-30"),
        "pytorch-2.1": ("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1.py310:latest", "2025-10-04"),
    }
    assert all(e.python == "3.10" and e.cuda == "12.x" for e in EXECUTORS.values())
    assert all(e.available_until < date.fromisoformat(EXECUTORS_AS_OF) for e in EXECUTORS.values())


def test_admission_refuses_an_executor_past_its_end_of_availability_naming_the_date_and_what_instead(settings):
    """The day after Google's date the executor is refused, naming the field, the date, the image and the newest one
    still available; on the date itself it is not."""
    allowed = dataclasses.replace(settings, allow_python_packages=True, executors=with_newer())
    request = package_request()
    plan = plan_custom_job(request, allowed, "request:x")
    until = EXECUTORS["pytorch-2.4"].available_until

    assert admission_problems(request, allowed, plan.output_dir, today=until) == []
    [refused] = [str(p) for p in admission_problems(request, allowed, plan.output_dir, today=until + timedelta(1))]
    assert refused == (
        "trainer.python_package.executor: executor pytorch-2.4 is past its end of availability, 2026-07-24 in "
        "Google's list of prebuilt training containers: Vertex no longer serves "
        "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest. Use pytorch-2.6 (available until "
        "2027-06-30)"
    )
    newer = package_request("pytorch-2.6")
    assert admission_problems(newer, allowed, plan.output_dir, today=until + timedelta(1)) == []


def test_with_no_executor_left_the_refusal_says_to_run_an_image_or_ask_the_operator():
    """Google's own list today: nothing newer to name, so the way out is an image, or the operator's list."""
    [refused] = executor_problems(package_request(), EXECUTORS, date(2026, 11, 27))
    assert refused.path == "trainer.python_package.executor"
    assert "past its end of availability, 2026-07-24" in refused.message
    assert refused.message.endswith(
        "No executor on this deployment's list is available longer: run your own image built on a current PyTorch "
        "(trainer.image), or ask the operator to list a current prebuilt container (Terraform's executors, "
        "TRAINCTL_EXECUTORS) once Google publishes one"
    )


def test_the_controller_refuses_an_executor_past_its_date_by_its_own_clock():
    """Through the controller: the handler's clock is what admission judges by (a request the day before the date
    is accepted, the same request after it rejected, naming the field)."""
    executors = parse_executors(json.dumps({"pytorch-2.4": {**NEWER, "available_until": NOW.date().isoformat()}}))
    h = harness(allow_python_packages=True, executors=executors)
    assert h.submit("on-the-day", trainer={"python_package": PACKAGE}) == "submitted"
    h.clock.advance(days=1)
    assert h.submit("the-day-after", trainer={"python_package": PACKAGE}) == "rejected"
    [rejected] = h.events_of("rejected")
    assert any(e.startswith("trainer.python_package.executor: executor pytorch-2.4 is past") for e in rejected.errors)


def test_validate_and_plan_warn_of_an_executor_near_or_past_its_end():
    """Warnings, not refusals: within NEAR_END of the date, and after it (saying that admission refuses it)."""
    today = date(2026, 5, 1)
    near = executor_warnings(package_request(), EXECUTORS, today)
    assert near == [
        "trainer.python_package.executor: executor pytorch-2.4 reaches its end of availability on 2026-07-24 (84 "
        "days from now), after which admission refuses it. No executor on this deployment's list is available "
        "longer: run your own image built on a current PyTorch (trainer.image), or ask the operator to list a "
        "current prebuilt container (Terraform's executors, TRAINCTL_EXECUTORS) once Google publishes one"
    ]
    assert executor_warnings(package_request(), EXECUTORS, date(2026, 7, 24) - NEAR_END - timedelta(1)) == []
    [past] = executor_warnings(package_request("pytorch-2.3"), with_newer(), today)
    assert "past its end of availability, 2026-04-24" in past and "Use pytorch-2.6" in past
    assert past.endswith("; admission refuses it")
    assert executor_warnings(make_request(), EXECUTORS, today) == []  # no package, nothing to say


def test_the_operators_list_is_read_from_trainctl_executors_and_refused_with_the_key_named():
    """TRAINCTL_EXECUTORS replaces the catalog's list; a malformed one stops the settings with the executor and key
    named (the function refuses to start rather than admit against a wrong list)."""
    base = {"TRAINCTL_PROJECT": "p", "TRAINCTL_CONTROL_BUCKET": "c", "TRAINCTL_EVENTS_TOPIC": "e",
            "TRAINCTL_TRAINER_IMAGE": "i"}  # fmt: skip
    assert Settings.from_env(base).executors == EXECUTORS
    listed = Settings.from_env(base | {"TRAINCTL_EXECUTORS": json.dumps({"pytorch-2.6": NEWER})}).executors
    assert list(listed) == ["pytorch-2.6"] and listed["pytorch-2.6"].available_until == date(2027, 6, 30)
    assert parse_executors(executors_json(EXECUTORS)) == EXECUTORS
    bad = {
        "gcr.io/x:latest": "executor 'pytorch-2.6'.image: 'gcr.io/x:latest' is not one of Vertex's prebuilt",
        "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-6.py310:2.6": "only the latest tag is supported",
    }
    for image, message in bad.items():
        with pytest.raises(SettingsError, match="TRAINCTL_EXECUTORS: ") as caught:
            Settings.from_env(base | {"TRAINCTL_EXECUTORS": json.dumps({"pytorch-2.6": NEWER | {"image": image}})})
        assert message in str(caught.value)
    for broken, message in [
        ({"pytorch-2.6": NEWER | {"available_until": "June 2027"}}, "available_until: a date, YYYY-MM-DD"),
        ({"pytorch-2.6": {k: v for k, v in NEWER.items() if k != "cuda"}}, "executor 'pytorch-2.6': cuda required"),
        ({"PyTorch 2.6": NEWER}, "a name is 1-63 characters"),
        ({"pytorch-2.6": NEWER | {"gpus": "all"}}, "unknown key(s) gpus"),
        ({}, "at least one executor"),
    ]:
        with pytest.raises(ExecutorsError) as caught:
            parse_executors(json.dumps(broken))
        assert message in str(caught.value)


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    """trainctl with the given settings (a deployment's, as TRAINCTL_* variables) and no others."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCTL_")}
    deployment = {"TRAINCTL_PROJECT": "p", "TRAINCTL_CONTROL_BUCKET": "c", "TRAINCTL_EVENTS_TOPIC": "e",
                  "TRAINCTL_TRAINER_IMAGE": "us-docker.pkg.dev/p/t/trainer:1"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "trainctl", *args], capture_output=True, text=True, env=base | deployment | env, cwd=ROOT
    )


def test_the_commands_judge_the_executor_by_the_deployments_list(tmp_path):
    """`validate` and `plan` read the deployment's list: an executor it lacks is invalid; one it lists with a date
    within NEAR_END of today gets a warning naming the date (the list is built around today's date, so the test
    holds on any day)."""
    request = tmp_path / "r.yaml"
    document = {
        "api_version": "trainctl/v1",
        "request_id": "own-code",
        "dataset": {"uri": "gs://data-bucket/d/", "target": "y"},
        "trainer": {"python_package": PACKAGE | {"executor": "pytorch-2.6"}},
        "resources": {"machine_type": "g2-standard-24"},
    }
    request.write_text(json.dumps(document))
    unknown = cli("validate", str(request))
    assert unknown.returncode == 2, unknown.stdout
    assert "trainer.python_package.executor: unknown executor 'pytorch-2.6'" in unknown.stdout

    soon = (datetime.now(UTC).date() + timedelta(days=30)).isoformat()
    listed = {"TRAINCTL_EXECUTORS": json.dumps({"pytorch-2.6": NEWER | {"available_until": soon}})}
    validated = cli("validate", str(request), **listed)
    assert validated.returncode == 0, validated.stdout
    warning = f"trainer.python_package.executor: executor pytorch-2.6 reaches its end of availability on {soon}"
    assert f"  warning: {warning}" in validated.stdout
    planned = cli("plan", str(request), **listed)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "pytorch-gpu.2-6.py310:latest: python -m pkg.train" in planned.stdout
    assert f"warning           {warning}" in planned.stdout
    as_json = json.loads(cli("plan", str(request), "--json", **listed).stdout)
    assert as_json["warnings"][0].startswith("trainer.python_package.executor: executor pytorch-2.6 reaches")
