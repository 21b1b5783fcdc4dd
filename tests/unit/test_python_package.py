"""trainer.python_package: the request, its refusals and the pythonPackageSpec the plan sends (issue 31)."""

from __future__ import annotations

import dataclasses

import pytest

from functions.jobs.admission import admission_problems
from functions.jobs.planning import plan_custom_job
from schemas.errors import RequestInvalid
from schemas.executors import EXECUTORS
from schemas.request import code_digest
from tests.unit.conftest import make_request

DIGEST = "ab" * 32
PACKAGE = {
    "uris": [f"gs://data-bucket/packages/sha256-{DIGEST}/ddp_pkg-0.1.tar.gz"],
    "module": "ddp_pkg.train",
    "executor": "pytorch-2.4",
}


def package_trainer(**changes) -> dict:
    return {"python_package": PACKAGE | changes}


def admission(settings, **sections) -> list[str]:
    request = make_request(**sections)
    plan = plan_custom_job(request, settings, "request:x")
    return [str(p) for p in admission_problems(request, settings, plan.output_dir)]


def refusal(**sections) -> str:
    with pytest.raises(RequestInvalid) as caught:
        make_request(**sections)
    return "; ".join(str(error) for error in caught.value.errors)


def allowing(settings, **changes):
    return dataclasses.replace(settings, allow_python_packages=True, allowed_data_buckets=("data-bucket",), **changes)


def test_an_unknown_executor_is_refused_naming_the_known_ones(settings):
    """Issue 31, point 1 (acceptance: unknown executor): only the deployment's prebuilt PyTorch containers run packages
    (since issue 40 the operator's list, checked at admission; Google's list by default)."""
    [found] = admission(allowing(settings), trainer=package_trainer(executor="pytorch-9.9"))
    assert found.startswith("trainer.python_package.executor: unknown executor 'pytorch-9.9'")
    assert all(name in found for name in EXECUTORS)


@pytest.mark.parametrize(
    ("machine_type", "gpu"), [("a4-highgpu-8g", "NVIDIA_B200"), ("g4-standard-96", "NVIDIA_RTX_PRO_6000")]
)
def test_a_gpu_the_executor_cannot_drive_is_refused_with_the_rule(settings, machine_type, gpu):
    """Issue 31, point 1 (acceptance: a GPU the executor cannot drive): PyTorch 2.4's CUDA 12 builds stop at sm_90,
    so Blackwell GPUs are refused, on every rung of the ladder, naming the executor, its limit and the GPU's."""
    rich = allowing(settings, max_cost_usd=1e6, max_gpus_per_job=1000)  # only the executor's rule is in question
    found = admission(rich, trainer=package_trainer(), resources={"machine_type": machine_type})
    assert found[0].startswith(f"resources.accelerator_type: executor pytorch-2.4 (PyTorch 2.4, CUDA 12.x) has "
                               f"kernels up to sm_90; {gpu} is sm_")  # fmt: skip
    ladder = admission(
        rich,
        trainer=package_trainer(),
        fallbacks=[{"resources": {"machine_type": machine_type}}],
        scheduling={"max_attempts": 2},
    )
    assert ladder[0].startswith("fallbacks[0].resources.accelerator_type: executor pytorch-2.4"), ladder
    for machine in ("a2-highgpu-2g", "g2-standard-24", "a3-highgpu-2g"):
        assert admission(allowing(settings), trainer=package_trainer(), resources={"machine_type": machine}) == []


def test_packages_are_refused_unless_the_operator_turned_them_on(settings):
    """Issue 31, point 4 (acceptance: custom code turned off): off by default, named guardrail; on, the package runs
    as the custom account into custom-runs/, and must come from a data bucket jobs may read."""
    [found] = admission(settings, trainer=package_trainer())
    assert found.startswith("trainer.python_package: guardrail allow_python_packages:")
    allowed = allowing(settings)
    assert admission(allowed, trainer=package_trainer()) == []
    elsewhere = package_trainer(uris=["gs://someone-else/pkg-1.tar.gz"])
    assert admission(allowed, trainer=elsewhere) == [
        "trainer.python_package.uris[0]: guardrail allowed_data_buckets: bucket someone-else is not one jobs may "
        "read; packages live in a data bucket: data-bucket"
    ]
    no_account = dataclasses.replace(allowed, custom_service_account="")
    assert [p.split(":")[1].strip() for p in admission(no_account, trainer=package_trainer())] == [
        "guardrail custom_service_account"
    ]


def test_the_plan_sends_a_python_package_spec_on_the_executor_as_the_custom_account(settings):
    """Issue 31, point 1: pythonPackageSpec (executor image in the nearest multi-region, package URIs, module, args,
    env) in every worker pool; custom code's account and folder, as for a custom image."""
    request = make_request(
        trainer=package_trainer() | {"args": ["--epochs", "2"], "env": {"MY_FLAG": "1"}},
        resources={"machine_type": "a2-highgpu-2g", "replica_count": 2},
        reduction_server={"mode": "off"},
    )
    job_spec = plan_custom_job(request, settings, "request:x").custom_job["job_spec"]
    pools = job_spec["worker_pool_specs"]
    assert len(pools) == 2
    for pool in pools:
        assert "container_spec" not in pool
        assert pool["python_package_spec"] == {
            "executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
            "package_uris": PACKAGE["uris"],
            "python_module": "ddp_pkg.train",
            "args": ["--epochs", "2"],
            "env": [{"name": "MY_FLAG", "value": "1"}],
        }
    assert job_spec["service_account"] == settings.custom_service_account
    assert job_spec["base_output_directory"]["output_uri_prefix"] == "gs://proj-trainctl-control/custom-runs/churn-1/"
    europe = dataclasses.replace(settings, region="europe-west4")
    europe_pool = plan_custom_job(request, europe, "request:x").custom_job["job_spec"]["worker_pool_specs"][0]
    assert europe_pool["python_package_spec"]["executor_image_uri"].startswith("europe-docker.pkg.dev/vertex-ai/")


def test_a_package_is_custom_code_with_the_custom_codes_rules():
    """Issue 31, point 4: one kind of trainer only; `command` belongs to images; a model block needs metric and
    goal, as with a custom image."""
    both = refusal(trainer=package_trainer() | {"builtin": "tabular"})
    assert "set exactly one of" in both
    assert "trainer.command: only with a custom `image`" in refusal(trainer=package_trainer() | {"command": ["sh"]})
    assert "model.metric: required with your own code" in refusal(trainer=package_trainer(), model={"name": "m"})
    assert "folder" in refusal(trainer=package_trainer(uris=["gs://data-bucket/packages/"]))


def test_the_code_digest_is_read_from_content_addressed_uris_only():
    """Issue 31, point 2: `submit --source` names each archive by its sha256; that name is the code's digest."""
    request = make_request(trainer=package_trainer()).model_dump(mode="json")
    assert code_digest(request) == f"sha256:{DIGEST}"
    other = make_request(trainer=package_trainer(uris=["gs://data-bucket/pkg-1.0.tar.gz"])).model_dump(mode="json")
    assert code_digest(other) is None
    assert code_digest(make_request().model_dump(mode="json")) is None
