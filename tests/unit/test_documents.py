"""Request documents: JSON and YAML accepted, hostile documents refused with a plain reason."""

import pytest

from functions.untrusted.documents import DocumentInvalid, load_document, load_json


def test_json_and_yaml_give_the_same_value():
    assert load_document('{"a": [1, 2], "b": "x"}') == load_document("a: [1, 2]\nb: x\n") == {"a": [1, 2], "b": "x"}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("[" * 10_000 + "]" * 10_000, "nested more than"),
        ("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 60)), "nested more than"),
        ("a: [1, 2]\nb: *x\n", "aliases"),
        ("a: &x [1, 2]\n", "anchors"),
        ("a: !!python/object/apply:os.system [true]", "constructor"),
        (b"\xff\xfe\x00", "not UTF-8"),
        ("a: 1\x00", "NUL"),
        ("x" * 70_000, "limit is 65536"),
        ("a: [1, 2", "not valid JSON or YAML"),
    ],
)
def test_hostile_documents_are_refused_with_a_reason(raw, reason):
    with pytest.raises(DocumentInvalid, match=reason):
        load_document(raw)


def test_the_size_limit_is_configurable():
    with pytest.raises(DocumentInvalid, match="limit is 10"):
        load_document('{"a": "0123456789"}', max_bytes=10)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("[" * 10_000 + "]" * 10_000, "nested more than"),  # RecursionError inside json, before: uncaught
        ("[" * 40 + "]" * 40, "nested more than"),
        ("a: 1\n", "not valid JSON"),
        ("1" * 5000, "not valid JSON"),  # more digits than Python converts to an int
        ("x" * 70_000, "limit is 65536"),
        ("[1]\x00", "NUL"),
    ],
)
def test_json_only_documents_are_refused_with_a_reason(raw, reason):
    """Issue 24, point 5: what a job writes is JSON only, under the same size and nesting rules."""
    with pytest.raises(DocumentInvalid, match=reason):
        load_json(raw)


def test_json_only_documents_parse_python_s_constants_for_the_schema_to_judge():
    assert load_json('{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    assert load_json("[NaN]")[0] != load_json("[NaN]")[0]  # NaN: the caller's schema refuses it
