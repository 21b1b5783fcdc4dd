"""A CSV dataset's header and column types from its first bytes (issue 27, point 2): the types must be the ones the
trainer's pyarrow gives the columns (the champion's schema.json records those), so the inference is held here
against pyarrow's own CSV reader, value by value and on random mixtures."""

from __future__ import annotations

import io
import itertools
import random

import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from functions.data.header import (
    BOOLEAN_VALUES,
    NULL_VALUES,
    SAMPLE_ROWS,
    Column,
    HeaderUnreadable,
    column_type,
    csv_columns,
)

VALUES = [
    *["1", "0", "-1", "+1", "12", "00012", "0x1F", "0XFF", "-0x10", "0xFFFFFFFFFFFFFFFF", "0x10000000000000000"],
    *["9223372036854775807", "9223372036854775808", "-9223372036854775809", "1" * 30, " 1", "1 ", "\t2"],
    *["1.5", ".5", "5.", "+.5", "1e5", "1E-3", "1e+5", "-.5e3", "1e500", "1e", "e5", " 1.5 ", "1_000", "1,5"],
    *["inf", "-Infinity", "INF", "+inf", "nan", "nAn", "NaN", "-nan", "", " ", "NA", "N/A", "null", "NULL"],
    *["true", "false", "True", "FALSE", " true", "true ", "t", "yes"],
    *["abc", "-", "0b101", "2020-01-01", "2020-13-45", "2020-01-01T10:00:00", "2020-01-01 10:00", "12:00"],
    *["12:00:00", "12:00:00.5", "1970-01-01T00:00:00Z", "٣"],
]


def pyarrow_type(values: list[str]) -> str | None:
    """The class pyarrow's CSV reader (default options, as trainer/data/tables.py reads) gives a column of `values`;
    `temporal` for dates, times and timestamps."""
    text = "x\n" + "".join('"' + v.replace('"', '""') + '"\n' for v in values)
    kind = pa_csv.read_csv(io.BytesIO(text.encode())).schema.field("x").type
    if pa.types.is_null(kind):
        return None
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return "number"
    if pa.types.is_boolean(kind):
        return "boolean"
    return "temporal" if pa.types.is_temporal(kind) else "string"


def agrees(values: list[str]) -> bool:
    """The inferred class is pyarrow's; or none at all for dates and times (not compared, which is safe), also where
    pyarrow reads them as strings (a column mixing dates with and without a time zone)."""
    expected, inferred = pyarrow_type(values), column_type(values)
    if inferred == expected:
        return True
    dates_or_times = all(v in NULL_VALUES or (v[:1].isdigit() and ("-" in v or ":" in v)) for v in values)
    return inferred is None and (expected == "temporal" or (expected == "string" and dates_or_times))


def test_pyarrows_defaults_are_the_ones_copied():
    options = pa_csv.ConvertOptions()
    assert set(options.null_values) == NULL_VALUES
    assert set(options.true_values) | set(options.false_values) == BOOLEAN_VALUES


@pytest.mark.parametrize("value", VALUES)
def test_each_value_is_typed_as_pyarrow_types_it(value):
    """Issue 27, point 2: one value, the type pyarrow infers (dates and times: not compared)."""
    assert agrees([value]), (value, pyarrow_type([value]), column_type([value]))


def test_columns_of_mixed_values_are_typed_as_pyarrow_types_them():
    """Issue 27, point 2: pyarrow tries int64, then boolean, …, then double, then string, for the whole column."""
    mixtures = [list(pair) for pair in itertools.combinations(VALUES, 2)]
    generator = random.Random(27)
    mixtures += [generator.sample(VALUES, generator.randint(3, 6)) for _ in range(1500)]
    disagreements = [(m, pyarrow_type(m), column_type(m)) for m in mixtures if not agrees(m)]
    assert disagreements == []


def test_a_header_and_its_first_rows_give_the_columns():
    head = b'\xef\xbb\xbfage,"city, country",member,score,note\n31,"Oslo, NO",true,1.5,\n42,Lima,false,2,x\n'
    assert csv_columns(head, whole=True) == [
        Column("age", "number"),
        Column("city, country", "string"),
        Column("member", "boolean"),
        Column("score", "number"),
        Column("note", "string"),
    ]


def test_a_line_cut_short_by_the_read_is_left_out():
    """Only the first bytes are read: the last line may end mid-value ("4" of "4.5", "tr" of "true")."""
    assert csv_columns(b"a,b\n1,true\n2,tr", whole=False) == [Column("a", "number"), Column("b", "boolean")]
    assert csv_columns(b"a,b\n1,true\n2,tr", whole=True) == [Column("a", "number"), Column("b", "string")]


def test_only_the_first_rows_are_sampled():
    rows = "".join(f"{i}\n" for i in range(SAMPLE_ROWS)) + "text\n"
    assert csv_columns(("n\n" + rows).encode(), whole=True) == [Column("n", "number")]


def test_a_column_of_nulls_has_no_type():
    assert csv_columns(b"a,b\n,1\nNA,2\n", whole=True) == [Column("a", None), Column("b", "number")]


def test_a_header_longer_than_the_read_is_unreadable():
    with pytest.raises(HeaderUnreadable, match="longer than the 16 bytes read"):
        csv_columns(b"a_very_long_name", whole=False)
    with pytest.raises(HeaderUnreadable, match="no header line"):
        csv_columns(b"\n\n", whole=True)
