"""The admission data check's cost is bounded (issue 40, point 4): one CSV value of 60,000 digits cost the old double
pattern ~75 s of intake CPU (it backtracked), and ten such requests held every intake instance. Each sampled value is
now read in one pass, none longer than MAX_VALUE_CHARS is classified at all, and the check yields to the handler's
deadline instead of being stopped mid-way by the function's timeout."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.cloud import deadline
from functions.data import header
from functions.data.header import MAX_VALUE_CHARS, Column, column_type, csv_columns, is_real
from local.memory_gcs import MemoryGcs
from tests.unit.test_data_contract import _check, _with_schema

# The pattern is_real replaced, kept here as the definition it must still agree with.
BACKTRACKING_REAL = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)", re.IGNORECASE
)


@settings(max_examples=1000, deadline=None)
@given(value=st.text(alphabet="0123456789+-.eEinfatyINFATY x٣²", max_size=12))
def test_the_one_pass_reading_of_a_double_agrees_with_the_pattern_it_replaced(value):
    assert is_real(value) == bool(BACKTRACKING_REAL.fullmatch(value))


@pytest.mark.parametrize("value", ["1" * 60_000 + "x", "1" * 60_000, "." + "1" * 60_000 + "e", "+" + "9" * 5000 + "e+"])
def test_no_classifier_is_given_a_value_longer_than_the_cap(value, monkeypatch):
    """A value longer than MAX_VALUE_CHARS leaves its column untyped (not compared, as dates are): no int64,
    boolean or date is that long, and whether pyarrow would read it as a double or a string is not worth the CPU."""
    seen: list[int] = []
    real, int64 = header.is_real, header._is_int64
    monkeypatch.setattr(header, "is_real", lambda v: seen.append(len(v)) or real(v))
    monkeypatch.setattr(header, "_is_int64", lambda v: seen.append(len(v)) or int64(v))
    head = f"age,long,churned\n30,{value},0\n31,2.5,1\n".encode()
    assert csv_columns(head, whole=True) == [Column("age", "number"), Column("long", None), Column("churned", "number")]
    assert seen and max(seen) <= MAX_VALUE_CHARS


def test_a_value_at_the_cap_is_still_typed():
    assert column_type(["1" * MAX_VALUE_CHARS]) == "number"
    assert column_type(["x" * MAX_VALUE_CHARS]) == "string"
    assert column_type(["x" * (MAX_VALUE_CHARS + 1)]) is None


def test_the_60000_digit_value_of_the_report_leaves_the_check_to_the_other_columns():
    """Issue 40, point 4, as reported: the dataset is still checked (a dropped feature is named) and the column of
    the long value is not compared."""
    data = b"id,age,city,member,churned\n1," + b"1" * 60_000 + b"x,Oslo,true,0\n"
    check = _check(_with_schema(MemoryGcs()), {"part-0.csv": data.replace(b",city", b",town")})
    assert check.checked and check.errors == ["dataset: column 'city' is missing (a feature of the champion)"]


class _SlowRead(MemoryGcs):
    """Storage whose data read uses up all but `left` seconds of the handler's deadline on the test's clock."""

    def __init__(self, clock: list[float], left: float):
        super().__init__()
        self.clock, self.left = clock, left

    def read_range(self, bucket: str, name: str, start: int, length: int) -> bytes | None:
        remaining = deadline.remaining()
        assert remaining is not None
        self.clock[0] += remaining - self.left
        return super().read_range(bucket, name, start, length)


def parquet(columns: dict) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table(columns), out)
    return out.getvalue()


@pytest.mark.parametrize("left", [0.5, -1.0])
@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_the_check_yields_to_the_handlers_deadline_before_typing_the_columns(left, file_format):
    """The redelivery does the check (DeadlineReached is Transient, raised before any claim) rather than the
    function being stopped by its timeout mid-way while a second delivery races it."""
    clock = [0.0]
    gcs = _with_schema(_SlowRead(clock, left))
    data = {
        "csv": b"id,age,city,member,churned\n1,30,Oslo,true,0\n",
        "parquet": parquet({"id": [1], "age": [30], "city": ["Oslo"], "member": [True], "churned": [0]}),
    }[file_format]
    with deadline.handler_deadline(60.0, clock=lambda: clock[0]), pytest.raises(deadline.DeadlineReached):
        _check(gcs, {f"part-0.{file_format}": data})


def test_with_time_left_the_check_goes_on():
    clock = [0.0]
    gcs = _with_schema(_SlowRead(clock, 5.0))
    with deadline.handler_deadline(60.0, clock=lambda: clock[0]):
        check = _check(gcs, {"part-0.csv": b"id,age,city,member,churned\n1,30,Oslo,true,0\n"})
    assert check.checked and check.errors == []


def test_typing_stops_between_columns_when_told_to():
    typed: list[int] = []

    def pace() -> None:
        typed.append(1)
        if len(typed) > 2:
            raise deadline.DeadlineReached("no time left")

    with pytest.raises(deadline.DeadlineReached):
        csv_columns(b"a,b,c,d\n1,2,3,4\n", whole=True, pace=pace)
    assert len(typed) == 3
