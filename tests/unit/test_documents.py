"""Request documents: JSON and YAML accepted, hostile documents refused with a plain reason."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"a": ' + "9" * 4301 + "}", "not valid JSON: line 1: an integer may have at most 4,300 digits"),
        ("a:\n  b: " + "9" * 4301, "line 2: an integer may have at most 4,300 digits"),
        ("a: 0x" + "f" * 4000, "an integer may have at most 4,300 digits"),
        ("a: 1" + ":59" * 3000, "an integer may have at most 4,300 digits"),
        ("a: 2026-02-30", "day is out of range for month"),
        ('{"a": ["x", "\\ud800"]}', "at a\\[1\\]: half a UTF-16 surrogate pair"),
        ('{"a": {"\\udc00": 1}}', "at a \\(a key\\): half a UTF-16 surrogate pair"),
        ('a: "\\ud800"', "at a: half a UTF-16 surrogate pair"),
        ('{"a": 1}'.encode("utf-16"), "UTF-16 or UTF-32 byte order mark"),
        ('{"a": 1}'.encode("utf-32"), "UTF-16 or UTF-32 byte order mark"),
        (b'{"a": "\xc0\x80"}', "not UTF-8"),  # an overlong NUL
        (b'{"a": "\xed\xa0\x80"}', "not UTF-8"),  # a surrogate encoded as UTF-8
    ],
)
def test_what_a_parser_raises_is_refused_with_a_reason(raw, reason):
    """Issue 40, point 3: an integer past Python's conversion limit (ValueError), a YAML date that is no day
    (ValueError) escaped load_document; a string holding half a UTF-16 pair decoded, then could not be written out."""
    with pytest.raises(DocumentInvalid, match=reason):
        load_document(raw)


def test_a_utf8_byte_order_mark_is_read_past():
    assert load_document(b'\xef\xbb\xbf{"a": [1, 2]}') == {"a": [1, 2]}


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_are_a_value_or_document_invalid(raw):
    """Nothing but DocumentInvalid leaves the parser, whatever the bytes (issue 40, point 3)."""
    try:
        load_document(raw)
    except DocumentInvalid:
        pass


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.sampled_from(["a: ", '{"a": ', "[", "- ", "a: [", "a: {b: ", "? "]),
    body=st.sampled_from(["9" * 4400, "-" + "9" * 4400, "0x" + "f" * 4000, "0o" + "7" * 5000, "1" + ":59" * 2600,
                          "9" * 4400 + ".5", "1e99999", "-.inf", "2026-13-01", "2026-02-29 25:00:00", "!!int x",
                          "!!float x", "!!timestamp x", "!!binary ===", "[" * 5000, "{" * 5000, "&a [*a]"]),
    suffix=st.sampled_from(["", "}", "]", "\n", "]}"]),
)  # fmt: skip
def test_hostile_scalars_in_any_position_are_a_value_or_document_invalid(prefix, body, suffix):
    try:
        value = load_document(prefix + body + suffix)
    except DocumentInvalid:
        return
    str(value)  # whatever is let through can be written out again


def test_nesting_past_what_any_parser_recurses_is_refused_before_yaml_reads_it(monkeypatch):
    """PyYAML's scanner reads a flow collection far ahead of its parser: 64 KiB of `[` cost a second of CPU before
    the RecursionError. Past Python's recursion limit no parser would return: refused without calling YAML's (JSON's
    scanner stops at the limit at once)."""

    def never(*args, **kwargs):
        raise AssertionError("parsed")

    monkeypatch.setattr("functions.untrusted.documents.yaml.load", never)
    with pytest.raises(DocumentInvalid, match="nested more than 32"):
        load_document("a: " + "[" * 60_000)
    with pytest.raises(DocumentInvalid, match="nested more than 32"):
        load_document("{" * 1001)
    with pytest.raises(DocumentInvalid, match="nested more than 32"):
        load_document("[" * 60_000)


def test_brackets_inside_a_json_string_are_text_not_nesting():
    """A request whose argument holds a deeply bracketed string (a job's own JSON, say) is a document of depth 3."""
    deep = "[" * 2000 + "]" * 2000
    assert load_document(f'{{"args": ["--metrics", "{deep}"]}}') == {"args": ["--metrics", deep]}


def test_a_nul_escaped_in_a_string_is_text_for_the_schema_to_judge():
    """A raw NUL byte is refused (it is no text document); JSON's \\u0000 is a character the schema refuses where a
    name must be plain text, naming the field."""
    assert load_document('{"a": "b\\u0000"}') == {"a": "b\x00"}
