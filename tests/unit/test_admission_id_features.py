"""Admission warns too (issue 44, point 2): a request whose chosen features include one named like an ID is accepted,
and its `accepted` event says so — a name being all admission knows of a feature without reading the data."""

from __future__ import annotations

from functions.data.admission import ID_NAME
from tests.unit.controller_harness import harness
from trainer.data.column_flags import ID_NAME as TRAINER_ID_NAME

DATASET = {"uri": "gs://data-bucket/churn/", "target": "churned"}


def test_a_feature_named_like_an_id_is_accepted_with_a_warning():
    h = harness()
    assert h.submit("r1", dataset={**DATASET, "features": ["age", "customer_id", "plan"]}) == "submitted"
    [accepted] = h.events_of("accepted")
    assert accepted.message.endswith(
        "; warning: dataset.features 'customer_id' named like an ID: an ID is no feature, leave it out if it is one"
    )


def test_no_warning_without_such_a_feature_or_without_a_list():
    h = harness()
    assert h.submit("r1", dataset={**DATASET, "features": ["age", "paid", "valid"]}) == "submitted"
    assert h.submit("r2", dataset=DATASET) == "submitted"
    assert all("warning" not in e.message for e in h.events_of("accepted"))


def test_admission_and_the_trainer_know_the_same_names():
    """The controller's copy of the pattern (functions/ may not import trainer/, nor trainer/ schemas/)."""
    assert ID_NAME.pattern == TRAINER_ID_NAME.pattern
