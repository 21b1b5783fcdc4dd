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
_REAL = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)", re.IGNORECASE)
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


def csv_columns(head: bytes, whole: bool) -> list[Column]:
    """The columns of a CSV file from its first bytes; `whole`: `head` is the whole file (else its last line may
    be cut short and is left out). The header line must be complete within `head`."""
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
    return [
        Column(name, column_type([row[index] for row in sample if index < len(row)]))
        for index, name in enumerate(header)
    ]


def column_type(values: list[str]) -> ColumnType | None:
    """The class of a CSV column holding `values` (as pyarrow would type it); None for nulls only or dates."""
    present = [value for value in values if value not in NULL_VALUES]
    if not present:
        return None
    trimmed = [value.strip(_BLANKS) for value in present]
    if all(_is_int64(value) for value in trimmed):
        return "number"
    if all(value in BOOLEAN_VALUES for value in present):
        return "boolean"
    if all(_DATES.fullmatch(value) for value in present) or all(_TIMES.fullmatch(value) for value in present):
        return None
    if all(_REAL.fullmatch(value) for value in trimmed):  # a double is never written in hexadecimal
        return "number"
    return "string"


def _is_int64(value: str) -> bool:
    """Whether pyarrow reads `value` as an int64 (a decimal one out of range falls through to double)."""
    if _HEX_INTEGER.fullmatch(value):
        return True
    if not _DECIMAL_INTEGER.fullmatch(value) or len(value.lstrip("-").lstrip("0")) > 19:
        return False  # (and no int() of thousands of digits, which Python refuses)
    return INT64_MIN <= int(value) <= INT64_MAX
