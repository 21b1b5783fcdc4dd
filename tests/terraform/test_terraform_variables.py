"""The configuration's inputs and outputs explain themselves."""

from __future__ import annotations


def test_every_variable_has_a_type_and_a_description(tf):
    undocumented = [name for name, v in tf.variables.items() if not v.get("description") or "type" not in v]
    assert undocumented == []


def test_only_the_project_is_required(tf):
    assert [name for name, v in tf.variables.items() if "default" not in v] == ["project"]


def test_every_output_has_a_description(tf):
    assert [name for name, o in tf.outputs.items() if not o.get("description")] == []


def test_outputs_name_the_buckets_topics_functions_and_accounts(tf):
    assert {"buckets", "topics", "subscriptions", "function_uris", "service_accounts"} <= set(tf.outputs)
