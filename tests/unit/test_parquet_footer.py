"""The Parquet footer parser (issue 27, point 2): the controller reads a Parquet dataset's columns from its footer
in pure Python (no pyarrow on the cold path). Held here against files pyarrow writes, and against footers that are
cut short or corrupted: it answers with the columns or FooterUnreadable, never anything else."""

from __future__ import annotations

import datetime
import decimal
import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from functions.data.header import Column
from functions.data.parquet_footer import TAIL_BYTES, FooterUnreadable, footer_columns, footer_length


def parquet_bytes(table: pa.Table, **options) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, **options)
    return out.getvalue()


def footer_of(data: bytes) -> bytes:
    length = footer_length(data[-TAIL_BYTES:])
    return data[-TAIL_BYTES - length : -TAIL_BYTES]


def columns_of(data: bytes) -> list[tuple[str, str | None]]:
    return [(c.name, c.type) for c in footer_columns(footer_of(data))]


EVERY_KIND = pa.table(
    {
        "age": pa.array([31, 42], pa.int64()),
        "small": pa.array([1, 2], pa.int8()),
        "unsigned": pa.array([1, 2], pa.uint32()),
        "income": [1.5, 2.0],
        "half": pa.array([1.0, 2.0], pa.float16()),
        "city": ["Oslo", "Lima"],
        "member": [True, False],
        "joined": [datetime.date(2020, 1, 1)] * 2,
        "seen": [datetime.datetime(2020, 1, 1, 10)] * 2,
        "price": [decimal.Decimal("1.50")] * 2,
        "tags": [[1, 2], [3]],
        "address": [{"street": "a", "number": 1}, {"street": "b", "number": 2}],
        "blob": [b"x", b"y"],
        "plan": pa.array(["basic", "pro"]).dictionary_encode(),
        "nothing": pa.array([None, None]),
        "héllo wörld": [1, 2],
        "churned": [0, 1],
    }
)
EXPECTED = [
    ("age", "number"),
    ("small", "number"),
    ("unsigned", "number"),
    ("income", "number"),
    ("half", "number"),
    ("city", "string"),
    ("member", "boolean"),
    ("joined", None),  # dates, timestamps and decimals are not compared
    ("seen", None),
    ("price", None),
    ("tags", None),  # nested: a list, then a struct, each with its children skipped
    ("address", None),
    ("blob", "string"),
    ("plan", "string"),
    ("nothing", None),
    ("héllo wörld", "number"),
    ("churned", "number"),
]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"use_dictionary": False},
        {"version": "1.0"},  # ConvertedType annotations only, no LogicalType
        {"compression": "zstd", "write_statistics": False},
        {"store_schema": False},  # no ARROW:schema key in the metadata
        {"row_group_size": 1},  # two row groups: more after the schema, never read
    ],
)
def test_the_columns_of_files_pyarrow_writes_are_read_from_their_footer(options):
    """Issue 27, point 2: names in order, each with the class the contract gives its arrow type."""
    assert columns_of(parquet_bytes(EVERY_KIND, **options)) == EXPECTED


def test_a_wide_file_with_long_names_is_read():
    """Lists longer than 14 elements and field ids past 15 take the compact protocol's long forms."""
    table = pa.table({f"feature_{i:04d}_{'x' * (i % 50)}": [float(i)] for i in range(1500)})
    columns = footer_columns(footer_of(parquet_bytes(table)))
    assert [c.name for c in columns] == table.column_names
    assert {c.type for c in columns} == {"number"}


def test_the_beginning_of_a_long_footer_is_enough():
    """The schema is FileMetaData's second field: a footer too long to read whole is read from its start."""
    table = pa.table({f"c{i}": list(range(50)) for i in range(40)})
    footer = footer_of(parquet_bytes(table, row_group_size=1))  # 50 row groups after the schema
    schema_end = len(footer) // 4
    assert footer_columns(footer[:schema_end]) == footer_columns(footer)
    assert footer_columns(footer)[0] == Column("c0", "number")


def test_what_does_not_end_a_parquet_file_is_refused():
    with pytest.raises(FooterUnreadable, match="not a Parquet file"):
        footer_length(b"a,b\n1,2\n")
    with pytest.raises(FooterUnreadable, match="encrypted"):
        footer_length(b"\x10\x00\x00\x00PARE")
    with pytest.raises(FooterUnreadable, match="shorter than any Parquet file"):
        footer_length(b"PAR1")


def test_a_footer_cut_short_is_unreadable():
    footer = footer_of(parquet_bytes(EVERY_KIND))
    for end in (0, 1, 5, 20, 60):
        with pytest.raises(FooterUnreadable):
            footer_columns(footer[:end])


def test_corrupted_footers_raise_only_footer_unreadable():
    """Whatever the bytes, the parser answers with columns or FooterUnreadable: a hostile file cannot raise
    anything the handler does not expect, nor loop (every list's size is held to the bytes left)."""
    footer = footer_of(parquet_bytes(EVERY_KIND))
    generator = random.Random(27)
    for _ in range(2000):
        corrupted = bytearray(footer)
        for _ in range(generator.randint(1, 4)):
            corrupted[generator.randrange(len(corrupted))] = generator.randrange(256)
        try:
            footer_columns(bytes(corrupted))
        except FooterUnreadable:
            pass
    for _ in range(500):
        noise = bytes(generator.randrange(256) for _ in range(generator.randint(0, 200)))
        try:
            footer_columns(noise)
        except FooterUnreadable:
            pass


def test_deep_nesting_is_refused():
    """A struct of structs thousands deep (one byte each) ends in FooterUnreadable, not a RecursionError."""
    deep = bytes([0x1C]) * 5000  # field 1, type struct, again and again
    with pytest.raises(FooterUnreadable, match="nests deeper"):
        footer_columns(deep)
