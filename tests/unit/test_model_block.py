"""The request's `model` block (issue 26, the model block): Vertex's model id and alias rules, the metric and goal
checked against the trainer, field-named errors, and nothing changed for requests without it."""

from __future__ import annotations

import pytest

from functions.intake.delivery import spec_hash
from functions.intake.marker_policy import template_policy
from functions.jobs.planning import CHAMPION_ARG, REFERENCE_ARG, Evidence, plan_custom_job
from functions.models.versions import LEGACY_TRAINER_LABEL, kind_of_version, trainer_kind, version_labels
from schemas.errors import RequestInvalid
from tests.unit.conftest import make_record, make_request

CUSTOM = {"image": "us-docker.pkg.dev/proj/team/trainer:1", "args": ["--epochs", "3"]}


def problems(**sections) -> list[str]:
    with pytest.raises(RequestInvalid) as refused:
        make_request(**sections)
    return [str(error) for error in refused.value.errors]


def test_a_model_block_takes_its_defaults():
    """Issue 26, the model block: only the name is needed with the built-in trainer."""
    block = make_request(model={"name": "churn"}).model
    assert block is not None
    assert (block.metric, block.goal, block.min_improvement, block.alias) == (None, None, 0.0, "champion")


@pytest.mark.parametrize("name", ["churn", "c", "_churn", "churn-v2_eu", "a" * 63])
def test_model_ids_vertex_accepts_are_accepted(name):
    assert make_request(model={"name": name}).model.name == name


@pytest.mark.parametrize("name", ["2churn", "-churn", "Churn", "churn.v2", "a" * 64, ""])
def test_model_ids_vertex_refuses_are_refused_naming_the_rule(name):
    """Issue 26, the model block: UploadModelRequest.model_id "may be up to 63 characters, and valid characters are
    [a-z0-9_-]. The first character cannot be a number or hyphen" (model_service.proto)."""
    [problem] = problems(model={"name": name})
    assert problem.startswith("model.name: must be 1-63 lowercase letters, digits, '_' or '-', not starting with")


@pytest.mark.parametrize("alias", ["champion", "prod-eu", "a9", "a" * 128])
def test_aliases_vertex_accepts_are_accepted(alias):
    assert make_request(model={"name": "churn", "alias": alias}).model.alias == alias


@pytest.mark.parametrize("alias", ["a", "9prod", "Prod", "prod_eu", "prod!", "prod-", "pRod", "a" * 129])
def test_aliases_vertex_refuses_are_refused(alias):
    """Issue 26, the model block: an alias Vertex's three statements of the rule all accept (MergeVersionAliasesRequest
    and Model.version_aliases in model_service.proto and model.proto, and the model-alias page)."""
    [problem] = problems(model={"name": "churn", "alias": alias})
    assert problem.startswith("model.alias: must be 2-128 lowercase letters, digits or '-'")


def test_the_default_alias_is_refused_because_it_moves_with_the_alias():
    [problem] = problems(model={"name": "churn", "alias": "default"})
    assert problem.startswith("model.alias: `default` is moved by trainctl together with the model's alias")


def test_a_goal_that_contradicts_a_known_metric_is_refused():
    [problem] = problems(model={"name": "churn", "metric": "val_rmse", "goal": "maximize"})
    assert problem == "model.goal: val_rmse is better when lower: goal minimize, or omit it"


@pytest.mark.parametrize("metric", ["seed", "train_rows", "auc", "champion_val_accuracy"])
def test_the_built_in_trainers_models_decide_only_on_its_evaluation_metrics(metric):
    """Issue 38, attack 1: `metric: seed, goal: maximize` with seed 2147483647 promoted a model "better by 2.14748e+09";
    bookkeeping is never a figure of merit, whatever goal the request names."""
    [problem] = problems(model={"name": "churn", "metric": metric, "goal": "maximize"})
    assert problem.startswith("model.metric: the built-in trainer's models decide only on its evaluation metrics")
    assert f"never on {metric}" in problem


def test_a_metric_your_own_code_defines_needs_a_goal():
    found = problems(trainer=CUSTOM, model={"name": "churn", "metric": "auc"})
    assert any(p.startswith("model.goal: required for this metric: auc is not one the built") for p in found)
    custom = make_request(trainer=CUSTOM, model={"name": "churn", "metric": "auc", "goal": "maximize"})
    assert custom.model.goal == "maximize"


def test_a_custom_image_must_name_metric_and_goal():
    assert [p.split(":", 1)[0] for p in problems(trainer=CUSTOM, model={"name": "churn"})] == [
        "model.metric",
        "model.goal",
    ]
    request = make_request(trainer=CUSTOM, model={"name": "churn", "metric": "f1", "goal": "maximize"})
    assert request.model.metric == "f1"


def test_a_metric_of_the_other_task_is_refused_when_the_task_is_set():
    trainer = {"builtin": "tabular", "hyperparameters": {"task": "regression"}}
    [problem] = problems(trainer=trainer, model={"name": "churn", "metric": "val_accuracy"})
    assert problem == "model.metric: a regression run reports val_rmse, not val_accuracy; omit it to use val_rmse"


@pytest.mark.parametrize("value", [-0.1, float("inf"), float("nan"), "0.1"])
def test_min_improvement_is_a_finite_number_of_zero_or_more(value):
    [problem] = problems(model={"name": "churn", "min_improvement": value})
    assert problem.startswith("model.min_improvement: ")


# spec_hash(BASE_REQUEST) as trainctl computed it before fallbacks (commit 5118446~1) and the model block.
HASH_FROM_BEFORE_THE_LADDER = "2adb84648c1e7519abd42fe2c5c3b9b18ff0302bee07597dfcecdf290796a93d"


def test_the_hash_of_a_request_without_the_newer_fields_is_what_it_was_before_them():
    """Issue 26 (the model block) and 14 (fallbacks): a request redelivered across the deploy that added a field
    keeps its hash, else an explicit request_id would read as a conflict. The figure is the one the code before
    the ladder gave, not recomputed here the way the code does it now (issue 29)."""
    assert spec_hash(make_request()) == HASH_FROM_BEFORE_THE_LADDER
    assert spec_hash(make_request(model={"name": "churn"})) != HASH_FROM_BEFORE_THE_LADDER


def test_a_marker_may_not_set_the_model_block_unless_its_template_says_so():
    """Issue 26, the model block: which model a run promotes is the operator's template's, not an uploader's."""
    template = {"dataset": {"target": "y"}, "trainer": {"builtin": "tabular"}, "model": {"name": "churn"}}
    body, policy = template_policy(template, "gs://data/churn/")
    [problem] = policy.problems(body, {"model": {"name": "other", "min_improvement": 0.5}}, "gs://data/churn/d/")[:1]
    assert problem.startswith("model.name: may not be set by a marker under rule gs://data/churn/")
    body, policy = template_policy(template | {"marker_may_set": ["model.min_improvement"]}, "gs://data/churn/")
    assert policy.problems(body, {"model": {"min_improvement": 0.5}}, "gs://data/churn/d/") == []


def test_the_champion_is_passed_to_the_builtin_trainer_and_to_a_custom_image(settings):
    """Issue 26, step 2: the champion's artifacts travel as --champion-model-dir, after the trainer's own arguments;
    the built-in trainer also gets the rule's label check (issue 38), your own code only the champion."""
    uri = "gs://proj-trainctl-control/model-artifacts/churn/k/"
    evidence = Evidence(uri, None, 0.95, -0.1, 1.0)
    builtin = plan_custom_job(make_request(model={"name": "churn"}), settings, "request:churn-1", evidence=evidence)
    for pool in builtin.custom_job["job_spec"]["worker_pool_specs"][:2]:
        args = pool["container_spec"]["args"]
        assert args[-7:] == [
            CHAMPION_ARG, uri, "--write-reference-rows", "--min-champion-skill", "-0.1", "--max-target-drift", "1.0"
        ]  # fmt: skip
    custom = make_request(trainer=CUSTOM, model=_CUSTOM_MODEL)
    plan = plan_custom_job(custom, settings, "request:churn-1", evidence=evidence)
    for pool in plan.custom_job["job_spec"]["worker_pool_specs"][:2]:
        assert pool["container_spec"]["args"][-2:] == [CHAMPION_ARG, uri]
    for request in (make_request(model={"name": "churn"}), custom):
        without = plan_custom_job(request, settings, "request:churn-1").custom_job["job_spec"]["worker_pool_specs"]
        assert CHAMPION_ARG not in without[0]["container_spec"].get("args", [])


def test_the_reference_set_is_passed_with_the_rules_confidence(settings):
    """Issue 38, point 3: the model's reference set (the controller's copy) and the level of the interval reach the
    trainer; a model without one yet gets neither, and the built-in trainer then writes its own sample."""
    reference = "gs://proj-trainctl-control/model-references/churn/r/"
    request = make_request(model={"name": "churn"})
    plan = plan_custom_job(request, settings, "k", evidence=Evidence(None, reference, 0.9, -0.1, None))
    args = plan.custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"]["args"]
    assert args[args.index(REFERENCE_ARG) : args.index(REFERENCE_ARG) + 4] == [
        REFERENCE_ARG, reference, "--confidence", "0.9"
    ]  # fmt: skip
    assert "--min-champion-skill" not in args, "no champion: nothing to check the labels with"
    assert "--write-reference-rows" not in args, "the model has its reference set"
    plain = plan_custom_job(request, settings, "k", evidence=Evidence(None, None, 0.9, -0.1, None))
    args = plain.custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"]["args"]
    assert REFERENCE_ARG not in args and "--write-reference-rows" in args, "none yet: the first version's rows"
    custom = make_request(trainer=CUSTOM, model=_CUSTOM_MODEL)
    plan = plan_custom_job(custom, settings, "k", evidence=Evidence(None, None, 0.9, -0.1, None))
    assert "--write-reference-rows" not in plan.custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"].get(
        "args", []
    ), "your own code is asked for nothing it may not know"


_CUSTOM_MODEL = {"name": "churn", "metric": "f1", "goal": "maximize"}


# spec_hash of a model request as trainctl computed it before model.max_drift (commit 7c56da3).
MODEL_HASH_FROM_BEFORE_MAX_DRIFT = "f8765fc02fb69a97bbdf4a5c4654dea4784cf3b49b679705a401a8044d947976"


def test_the_hash_of_a_model_request_without_max_drift_is_unchanged():
    """Issue 27, point 3: model.max_drift came after the model block; a model request redelivered across the deploy
    that added it keeps its hash (the figure the code before it gave)."""
    assert spec_hash(make_request(model={"name": "churn"})) == MODEL_HASH_FROM_BEFORE_MAX_DRIFT
    assert spec_hash(make_request(model={"name": "churn", "max_drift": 0.2})) != MODEL_HASH_FROM_BEFORE_MAX_DRIFT


@pytest.mark.parametrize("value", [0, -0.1, float("inf"), float("nan"), "0.1"])
def test_max_drift_is_a_finite_number_above_zero(value):
    """Issue 27, point 3: a limit of zero would stop every run; it must be a finite positive figure."""
    [problem] = problems(model={"name": "churn", "max_drift": value})
    assert problem.startswith("model.max_drift: ")


def test_max_drift_is_the_built_in_trainers_and_reaches_it_as_an_argument(settings):
    """Issue 27, point 3: the built-in trainer gets --max-drift; a custom image, which measures no drift, may not
    set it."""
    plan = plan_custom_job(make_request(model={"name": "churn", "max_drift": 0.25}), settings, "request:k")
    args = plan.custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"]["args"]
    assert args[args.index("--max-drift") + 1] == "0.25"
    plain = plan_custom_job(make_request(model={"name": "churn"}), settings, "request:k")
    assert "--max-drift" not in plain.custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"]["args"]
    [problem] = problems(trainer=CUSTOM, model=_CUSTOM_MODEL | {"max_drift": 0.25})
    assert problem.startswith("model.max_drift: only the built-in trainer measures drift")


def test_version_labels_are_spelled_with_underscores_and_an_old_champions_trainer_label_still_counts():
    """Issue 25, point 3, for model versions: every key trainctl sets is found by the documented filter form (no
    hyphen), and a champion registered with the earlier `trainctl-trainer` label keeps issue 26's trust rule."""
    record = make_record(request=make_request(model={"name": "churn"}).model_dump(mode="json"))
    keys = [k for k in version_labels(record, "img") if k != "managed-by"]
    assert keys and all("-" not in key for key in keys)
    custom = make_request(trainer={"image": "us-docker.pkg.dev/p/r/img:1"}, model=_CUSTOM_MODEL)
    assert kind_of_version({"trainctl-trainer": "builtin"}) != trainer_kind(custom)
    assert kind_of_version({LEGACY_TRAINER_LABEL: trainer_kind(custom)}) == trainer_kind(custom)
    assert kind_of_version({}) == "builtin", "a version from before the label came from the built-in trainer"
