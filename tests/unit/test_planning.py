"""Planning: the CustomJob a request becomes, the Reduction Server decision and the cost estimate."""

from __future__ import annotations

import json

import pytest
from google.cloud.aiplatform_v1 import CustomJob

from functions.jobs.planning import REDUCTION_SERVER_BUCKET_CAP_MB, plan_custom_job
from functions.ledger.keys import key_hash
from schemas import catalog
from tests.unit.conftest import make_request

KEY = "request:churn-1"
# An MLP with about 160 MB of fp32 gradients per step: above one 64 MB bucket, where Reduction Server pays.
LARGE_MLP = {"builtin": "tabular", "hyperparameters": {"hidden_sizes": [8192, 4096, 2048]}}


def test_single_node_job_has_one_pool_and_the_trainer_arguments(settings):
    plan = plan_custom_job(make_request(), settings, KEY)
    spec = plan.custom_job["job_spec"]
    assert len(spec["worker_pool_specs"]) == 1
    pool = spec["worker_pool_specs"][0]
    assert pool["replica_count"] == "1"
    assert pool["machine_spec"] == {
        "machine_type": "a2-highgpu-2g",
        "accelerator_type": "NVIDIA_TESLA_A100",
        "accelerator_count": 2,
    }
    args = pool["container_spec"]["args"]
    assert pool["container_spec"]["image_uri"] == settings.trainer_image
    assert args[args.index("--data") + 1] == "gs://data-bucket/churn/"
    assert "--target=churned" in args
    assert "--bucket-cap-mb" not in args
    assert spec["base_output_directory"] == {"output_uri_prefix": "gs://proj-trainctl-control/runs/churn-1/"}
    assert spec["service_account"] == settings.trainer_service_account
    assert spec["scheduling"] == {"timeout": "86400s", "restart_job_on_worker_restart": True, "strategy": "STANDARD"}
    assert plan.reduction_server.enabled is False


def test_default_hyperparameters_plan_sixty_epochs_with_early_stopping_and_a_request_can_change_both(settings):
    """Guards issue 17 item 8: the built-in trainer's defaults are the ones that meet the model-quality goal (60
    epochs at most, early-stopping patience 8, bench/RESULTS.md model_quality), and both are request fields."""

    def flags(request) -> dict[str, str]:
        args = plan_custom_job(request, settings, KEY).custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"]
        return {a: b for a, b in zip(args["args"], args["args"][1:], strict=False) if a.startswith("--")}

    defaults = flags(make_request())
    assert (defaults["--epochs"], defaults["--early-stopping-patience"]) == ("60", "8")
    quick = make_request(trainer={"builtin": "tabular", "hyperparameters": {"epochs": 2, "early_stopping_patience": 0}})
    assert (flags(quick)["--epochs"], flags(quick)["--early-stopping-patience"]) == ("2", "0")


def test_the_plan_is_a_valid_vertex_custom_job(settings):
    request = make_request(resources={"machine_type": "a2-highgpu-8g", "replica_count": 4}, trainer=LARGE_MLP)
    plan = plan_custom_job(request, settings, KEY)
    job = CustomJob.from_json(json.dumps(plan.custom_job))
    assert [p.replica_count for p in job.job_spec.worker_pool_specs] == [1, 3, 13]
    assert job.labels["trainctl_key"] == key_hash(KEY)
    assert job.labels["trainctl_deployment"] == "proj-trainctl-control"


def test_four_a2_highgpu_8g_nodes_get_13_reducers(settings):
    request = make_request(resources={"machine_type": "a2-highgpu-8g", "replica_count": 4}, trainer=LARGE_MLP)
    plan = plan_custom_job(request, settings, KEY)
    pools = plan.custom_job["job_spec"]["worker_pool_specs"]
    assert [p["replica_count"] for p in pools] == ["1", "3", "13"]
    assert pools[2]["machine_spec"] == {"machine_type": "n1-highcpu-16"}
    assert pools[2]["container_spec"]["image_uri"].endswith("/vertex-ai-restricted/training/reductionserver:latest")
    assert "accelerator_type" not in pools[2]["machine_spec"]
    for pool in pools[:2]:
        args = pool["container_spec"]["args"]
        assert args[args.index("--bucket-cap-mb") + 1] == str(REDUCTION_SERVER_BUCKET_CAP_MB)
    assert plan.reduction_server.enabled
    assert "ceil(4 nodes × 100 Gbps / 32 Gbps) = 13" in plan.reduction_server.reason


@pytest.mark.parametrize(
    ("sections", "reason"),
    [
        ({"resources": {"machine_type": "a2-highgpu-8g"}}, "single-node"),
        ({"resources": {"machine_type": "a3-highgpu-8g", "replica_count": 2}}, "GPUDirect"),
        (
            {
                "resources": {"machine_type": "a2-highgpu-8g", "replica_count": 2},
                "scheduling": {"strategy": "flex_start"},
            },
            "FLEX_START",
        ),
        (
            {"resources": {"machine_type": "a2-highgpu-8g", "replica_count": 2}, "reduction_server": {"mode": "off"}},
            "mode is off",
        ),
    ],
)
def test_no_reducers_and_the_reason_in_words(settings, sections, reason):
    plan = plan_custom_job(make_request(**sections), settings, KEY)
    assert not plan.reduction_server.enabled
    assert reason in plan.reduction_server.reason
    assert len(plan.custom_job["job_spec"]["worker_pool_specs"]) == sections["resources"].get("replica_count", 1) and (
        len(plan.custom_job["job_spec"]["worker_pool_specs"]) <= 2
    )


def test_the_built_in_trainers_small_gradient_gets_no_reducers_and_says_why(settings):
    """Guards issue 17 item 7: `auto` no longer adds reducers to a few-MB MLP; the reason names the volume."""
    request = make_request(resources={"machine_type": "a2-highgpu-8g", "replica_count": 4})  # hidden 256, 128
    plan = plan_custom_job(request, settings, KEY)
    assert not plan.reduction_server.enabled
    assert "about 0.1 MB of gradients per step, less than one 64 MB bucket" in plan.reduction_server.reason
    assert len(plan.custom_job["job_spec"]["worker_pool_specs"]) == 2
    args = plan.custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"]["args"]
    assert "--bucket-cap-mb" not in args


def test_reducers_for_a_large_built_in_model_and_by_bandwidth_for_custom_images(settings):
    """Guards issue 17 item 7: above the threshold the bandwidth rule sizes the pool; a custom image, whose
    model the planner cannot see, keeps the bandwidth rule; `on` forces reducers for a small model."""
    resources = {"machine_type": "a2-highgpu-8g", "replica_count": 4}
    by_bandwidth = catalog.reducers_needed(4 * catalog.node_egress_gbps("a2-highgpu-8g"))  # test_catalog pins it
    large = plan_custom_job(make_request(resources=resources, trainer=LARGE_MLP), settings, KEY).reduction_server
    assert large.enabled and large.replicas == by_bandwidth and "about 160 MB per step" in large.reason
    custom = make_request(resources=resources, trainer={"image": "us-docker.pkg.dev/p/r/t:1"})
    assert plan_custom_job(custom, settings, KEY).reduction_server.replicas == by_bandwidth
    forced = make_request(resources=resources, reduction_server={"mode": "on"})
    assert plan_custom_job(forced, settings, KEY).reduction_server.enabled


def test_reducer_overrides_are_used(settings):
    request = make_request(
        resources={"machine_type": "g2-standard-24", "replica_count": 2},
        reduction_server={"mode": "on", "replica_count": 3, "machine_type": "n2-highcpu-16"},
    )
    plan = plan_custom_job(request, settings, KEY)
    assert plan.custom_job["job_spec"]["worker_pool_specs"][2]["replica_count"] == "3"
    assert plan.reduction_server.machine_type == "n2-highcpu-16"


def test_flex_start_waits_at_most_max_pending(settings):
    request = make_request(scheduling={"strategy": "flex_start", "max_pending": "2h"})
    scheduling = plan_custom_job(request, settings, KEY).custom_job["job_spec"]["scheduling"]
    assert scheduling["strategy"] == "FLEX_START"
    assert scheduling["max_wait_duration"] == "7200s"


def test_cost_covers_nodes_reducers_and_the_timeout(settings):
    request = make_request(
        resources={"machine_type": "a2-highgpu-8g", "replica_count": 4}, scheduling={"timeout": "2h"}, trainer=LARGE_MLP
    )
    plan = plan_custom_job(request, settings, KEY)
    cost, reducers = plan.cost, plan.reduction_server.replicas  # how many: test_catalog's reducers_needed
    assert cost.hourly_usd == pytest.approx(4 * 35.26 + reducers * 0.6544, abs=0.01)
    assert cost.max_usd == pytest.approx(cost.hourly_usd * 2, abs=0.02)
    assert (cost.gpus, cost.nodes, cost.reducers) == (32, 4, reducers) and reducers > 0


def test_spot_is_priced_as_spot(settings):
    standard = plan_custom_job(make_request(), settings, KEY).cost
    spot = plan_custom_job(make_request(scheduling={"strategy": "spot"}), settings, KEY).cost
    assert spot.hourly_usd < standard.hourly_usd


def test_custom_image_keeps_its_command_args_and_env(settings):
    request = make_request(
        trainer={
            "image": "us-docker.pkg.dev/p/r/t:1",
            "command": ["python", "-m", "t"],
            "args": ["--x"],
            "env": {"A": "1"},
        }
    )
    container = plan_custom_job(request, settings, KEY).custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"]
    assert container == {
        "image_uri": "us-docker.pkg.dev/p/r/t:1",
        "command": ["python", "-m", "t"],
        "args": ["--x"],
        "env": [{"name": "A", "value": "1"}],
    }


def test_labels_carry_key_attempt_request_and_the_users(settings):
    request = make_request(labels={"team": "growth"})
    labels = plan_custom_job(request, settings, KEY, attempt=2).custom_job["labels"]
    assert labels == {
        "team": "growth",
        "trainctl_key": key_hash(KEY),
        "trainctl_attempt": "2",
        "trainctl_request": "churn-1",
        "trainctl_deployment": "proj-trainctl-control",
    }
    assert plan_custom_job(request, settings, KEY, attempt=2).custom_job["display_name"] == "churn-1 (attempt 2)"


TEAMED = {
    "default_team": "shared",
    "teams": {"shared": {}, "red": {"custom_service_account": "red-code@p.iam.gserviceaccount.com"}, "blue": {}},
}


def test_a_teams_own_code_runs_as_its_account_into_its_teams_folder_whatever_its_key(settings):
    """Issue 38, point 4 (attack 3): one account ran every team's own code, so one team's job could rewrite another's
    metrics.json, model and schema.json. A team's image or package runs as the team's account (Terraform names one
    for each team but the default) into custom-runs/_teams/<team>/ — a marker's key has no team namespace, so the
    folder follows the team it arrived as; the default team keeps the custom images' account and folder."""
    import dataclasses

    from functions.teams import parse_teams

    teamed = dataclasses.replace(settings, custom_service_account="custom@p.iam.gserviceaccount.com",
                                 teams=parse_teams(TEAMED))  # fmt: skip
    custom = make_request(trainer={"image": "us-docker.pkg.dev/p/r/img:1"})
    for key in ("request:red/churn-1", "gcs:data/red/day/_SUCCESS#7"):
        spec = plan_custom_job(custom, teamed, key, team="red").custom_job["job_spec"]
        assert spec["service_account"] == "red-code@p.iam.gserviceaccount.com"
        assert spec["base_output_directory"]["output_uri_prefix"].startswith(
            f"gs://{teamed.control_bucket}/custom-runs/_teams/red/"
        )
    shared = plan_custom_job(custom, teamed, KEY, team="shared").custom_job["job_spec"]
    assert shared["service_account"] == "custom@p.iam.gserviceaccount.com"
    assert shared["base_output_directory"]["output_uri_prefix"] == f"gs://{teamed.control_bucket}/custom-runs/churn-1/"
    blue = plan_custom_job(custom, teamed, "request:blue/churn-1", team="blue").custom_job["job_spec"]
    assert blue["service_account"] == "custom@p.iam.gserviceaccount.com", "a team without its own account: the shared"


def test_a_team_cannot_run_its_code_as_another_teams_account(settings):
    """Issue 38, point 4: naming another team's account would write that team's outputs."""
    import dataclasses

    from functions.jobs.admission import admission_problems
    from functions.teams import parse_teams

    teamed = dataclasses.replace(settings, custom_service_account="custom@p.iam.gserviceaccount.com",
                                 teams=parse_teams(TEAMED))  # fmt: skip
    stolen = make_request(trainer={"image": "us-docker.pkg.dev/p/r/img:1"}, service_account=TEAMED_RED)
    plan = plan_custom_job(stolen, teamed, "request:blue/x", team="blue")
    found = [str(p) for p in admission_problems(stolen, teamed, plan.output_dir, "request:blue/x", "blue")]
    assert any(
        p.startswith(f"service_account: guardrail custom_service_account: {TEAMED_RED} is another team's")
        for p in found
    )
    mine = plan_custom_job(stolen, teamed, "request:red/x", team="red")
    assert not [
        p
        for p in admission_problems(stolen, teamed, mine.output_dir, "request:red/x", "red")
        if "service_account" in str(p)
    ]


TEAMED_RED = "red-code@p.iam.gserviceaccount.com"
