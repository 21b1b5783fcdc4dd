"""Pure: a CSV file's column names and coarse types from its first bytes — its header line and the first rows
after it — for admission to compare with the champion's schema (issue 27, point 2).

The classes are the schema contract's (trainer/ writes them in schema.json): `number`, `string`, `boolean`. They
follow the type pyarrow's CSV reader would give the column with its default options, which is how the trainer reads
it (trainer/data/tables.py): a column holds the first type, in the order int64 → boolean → … → double → string, that all
its values convert to, values in `null_values` being nulls for every type but string (pyarrow.csv.ConvertOptions;
arrow/cpp/src/arrow/csv/inference_internal.h). Integers (decimal, or hexadecimal with 0x) and doubles are numbers;
the true and false values are booleans; anything else is a string, except that a column of dates or times alone
(pyarrow reads it as date32, time32 or timestamp, or as strings when they mix time zones) and a column of nulls
alone get no class here: they are not compared. tests/unit/test_dataset_header.py holds this against pyarrow itself.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

ColumnType = Literal["number", "string", "boolean"]
# How many rows after the header are looked at to see each column's type: a few, within the bytes read.
SAMPLE_ROWS = 100

# pyarrow.csv.ConvertOptions' defaults (pyarrow 26: ConvertOptions().null_values, .true_values, .false_values).
NULL_VALUES = frozenset(
    {
        "",
        "#N/A",
        "#N/A N/A",
        "#NA",
        "-1.#IND",
        "-1.#QNAN",
        "-NaN",
        "-nan",
        "1.#IND",
        "1.#QNAN",
        "N/A",
        "NA",
        "NULL",
        "NaN",
        "n/a",
        "nan",
        "null",
    }
)
BOOLEAN_VALUES = frozenset({"1", "True", "TRUE", "true", "0", "False", "FALSE", "false"})
_DECIMAL_INTEGER = re.compile(r"-?[0-9]+")
_HEX_INTEGER = re.compile(r"0[xX][0-9a-fA-F]{1,16}")  # 64 bits at most (pyarrow reads 0xFFFFFFFFFFFFFFFF as -1)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The longest sampled value that is classified (issue 40, point 4): a longer one leaves its column untyped, not
# compared, as a column of dates is. No int64 (20 characters), boolean or date is that long; whether pyarrow reads it
# as a double or a string is not worth an intake instance's CPU, and an untyped column never stops good data.
MAX_VALUE_CHARS = 1024
_INFINITIES = frozenset({"inf", "infinity", "nan"})
# What pyarrow infers as date32 or timestamp (an ISO date, a time after it or not), and as time32 (a time of day).
_DATES = re.compile(r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])(?:[T ].*)?")
_TIMES = re.compile(r"(?:[01]?[0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9])?")
_BLANKS = " \t"


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType | None  # None: not known from what was read (nulls only, dates, nested …): not compared


class HeaderUnreadable(ValueError):
    """The bytes do not begin a CSV file with a header line; the message says why."""


def csv_columns(head: bytes, whole: bool, pace: Callable[[], None] = lambda: None) -> list[Column]:
    """The columns of a CSV file from its first bytes; `whole`: `head` is the whole file (else its last line may
    be cut short and is left out). The header line must be complete within `head`. `pace` is called before each
    column is typed: it raises to stop (the handler's deadline)."""
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    if not whole:
        end = text.rfind("\n")
        if end < 0:
            raise HeaderUnreadable(f"its header line is longer than the {len(head)} bytes read")
        text = text[: end + 1]
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    except csv.Error as exc:
        raise HeaderUnreadable(f"it is not CSV the trainer can read: {exc}") from None
    if not rows:
        raise HeaderUnreadable("it has no header line")
    header, sample = rows[0], rows[1 : 1 + SAMPLE_ROWS]
    columns = []
    for index, name in enumerate(header):
        pace()
        columns.append(Column(name, column_type([row[index] for row in sample if index < len(row)])))
    return columns


def column_type(values: list[str]) -> ColumnType | None:
    """The class of a CSV column holding `values` (as pyarrow would type it); None for nulls only, dates, or a value
    longer than MAX_VALUE_CHARS. Each value is read in one pass: no pattern here can backtrack (issue 40, point 4:
    one CSV value of 60,000 digits cost the old double pattern ~75 s of intake CPU)."""
    present = [value for value in values if value not in NULL_VALUES]
    if not present or any(len(value) > MAX_VALUE_CHARS for value in present):
        return None
    trimmed = [value.strip(_BLANKS) for value in present]
    if all(_is_int64(value) for value in trimmed):
        return "number"
    if all(value in BOOLEAN_VALUES for value in present):
        return "boolean"
    if all(_DATES.fullmatch(value) for value in present) or all(_TIMES.fullmatch(value) for value in present):
        return None
    if all(is_real(value) for value in trimmed):  # a double is never written in hexadecimal
        return "number"
    return "string"


def _is_int64(value: str) -> bool:
    """Whether pyarrow reads `value` as an int64 (a decimal one out of range falls through to double)."""
    if _HEX_INTEGER.fullmatch(value):
        return True
    if not _DECIMAL_INTEGER.fullmatch(value) or len(value.lstrip("-").lstrip("0")) > 19:
        return False  # (and no int() of thousands of digits, which Python refuses)
    return INT64_MIN <= int(value) <= INT64_MAX


def is_real(value: str) -> bool:
    """Whether pyarrow reads `value` as a double: [+-], then digits with at most one '.' among or around them (at
    least one digit), then an optional exponent e[+-]digits; or inf, infinity, nan in any case. Linear: each part is
    split off once and its characters checked once (the pattern this replaces backtracked on long digit runs)."""
    text = value[1:] if value.startswith(("+", "-")) else value
    if text.lower() in _INFINITIES:
        return True
    exponent_at = max(text.find("e"), text.find("E"))  # two exponents fail below: the mantissa holds the other
    mantissa = text if exponent_at < 0 else text[:exponent_at]
    if exponent_at >= 0:
        exponent = text[exponent_at + 1 :]
        exponent = exponent[1:] if exponent.startswith(("+", "-")) else exponent
        if not _ascii_digits(exponent):
            return False
    whole, _, fraction = mantissa.partition(".")
    return (whole or fraction) != "" and all(_ascii_digits(part) for part in (whole, fraction) if part)


def _ascii_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()
