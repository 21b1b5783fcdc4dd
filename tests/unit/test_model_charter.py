"""A model's charter (issue 38): the rule is the model's, fixed when it is created; a request may leave it out or
repeat it, never change it; the owner and the teams it grants may feed the model, no one else."""

from __future__ import annotations

from datetime import UTC, datetime

from functions.ledger.model_charter import disagreements, judged_by, rule_of
from schemas.request import ModelBlock
from tests.unit.conftest import make_charter

RULE = rule_of(ModelBlock(name="churn", min_improvement=0.02))


def test_a_block_that_leaves_the_rule_out_or_repeats_it_agrees():
    assert disagreements(ModelBlock(name="churn"), RULE) == []
    assert disagreements(ModelBlock(name="churn", min_improvement=0.02, alias="champion"), RULE) == []


def test_a_block_that_names_another_value_disagrees_field_by_field():
    """Attacks 1 and 2: `min_improvement: 0`, a fresh alias, `default` kept still, another confidence."""
    block = ModelBlock(name="churn", min_improvement=0.0, alias="pwn", moves_default=False, confidence=0.6)
    assert disagreements(block, RULE) == [
        "model.min_improvement: 0.0 is not the model's rule (min_improvement: 0.02)",
        "model.alias: 'pwn' is not the model's rule (alias: 'champion')",
        "model.moves_default: False is not the model's rule (moves_default: True)",
        "model.confidence: 0.6 is not the model's rule (confidence: 0.95)",
    ]


def test_a_built_in_metric_names_its_known_goal():
    rule = rule_of(ModelBlock(name="churn", metric="val_rmse"))
    assert (rule.metric, rule.goal) == ("val_rmse", "minimize")
    assert disagreements(ModelBlock(name="churn", metric="val_rmse", goal="minimize"), rule) == []
    assert disagreements(ModelBlock(name="churn", metric="val_loss"), rule) == [
        "model.metric: 'val_loss' is not the model's rule (metric: 'val_rmse')"
    ]


def test_the_owner_and_its_grants_feed_the_model_and_the_operators_word_outranks_the_record():
    charter = make_charter(owner="blue", grants=["red"])
    assert charter.may_feed("blue") and charter.may_feed("red") and not charter.may_feed("green")
    assert charter.may_feed("green", owner="green", grants=[]) and not charter.may_feed("red", "green", [])


def test_a_run_admitted_before_the_first_decision_fixed_the_metric_is_still_judged_by_its_rule():
    """The first decision of a model whose rule named no metric fixes the built-in trainer's (val_accuracy); a run
    admitted before it is judged by the same rule, and by no other."""
    unnamed = rule_of(ModelBlock(name="churn"))
    fixed = make_charter(rule=unnamed).with_metric("val_accuracy", "maximize", datetime.now(UTC))
    assert fixed.rule.metric == "val_accuracy" and fixed.changes[-1].action == "metric_fixed"
    assert judged_by(unnamed, fixed.rule)
    assert not judged_by(unnamed, fixed.rule.model_copy(update={"min_improvement": 0.5}))
