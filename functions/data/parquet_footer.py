"""Pure: a Parquet file's top-level column names and coarse types from its footer alone, without pyarrow (the
controller stays light on its cold path) — what admission compares with the champion's schema (issue 27, point 2).

The file ends in the footer: the FileMetaData, Thrift compact-encoded, then its length as 4 little-endian bytes,
then the magic "PAR1" (apache/parquet-format README.md, "File Format"; an encrypted footer ends in "PARE"
instead). FileMetaData's field 2 is the schema: a depth-first list of SchemaElements whose first is the root,
each group followed by its `num_children` children (parquet.thrift, `struct FileMetaData`, `struct
SchemaElement`). The compact protocol's encoding is apache/thrift doc/specs/thrift-compact-protocol.md: a field
header byte (id delta in the high nibble, type in the low, a zigzag i16 id after a zero delta), zigzag varints for
i16/i32/i64, varint-prefixed binary, list headers with the size in the high nibble (15: a varint follows).

The bytes come from someone else's file: every length is checked against what is left, nesting is bounded, and
whatever does not parse raises FooterUnreadable, never anything else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from functions.data.header import Column, ColumnType

MAGIC = b"PAR1"
ENCRYPTED_MAGIC = b"PARE"
TAIL_BYTES = 8  # the footer's length (4 bytes, little-endian) and the magic
MAX_NESTING = 32

# Compact protocol field types (thrift-compact-protocol.md, "Struct encoding"); list element types are the same
# numbers, with 1 also read as a boolean element (older writers).
_BOOL_TRUE, _BOOL_FALSE, _I8, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT, _UUID = range(1, 14)

# parquet.thrift `enum Type`, `enum ConvertedType` and `union LogicalType` field ids, as far as the classes need.
_BOOLEAN, _INT32, _INT64, _INT96, _FLOAT, _DOUBLE_TYPE, _BYTE_ARRAY, _FIXED_LEN_BYTE_ARRAY = range(8)
_CONVERTED_STRING = {0, 4, 19, 20}  # UTF8, ENUM, JSON, BSON
_CONVERTED_INTEGER = set(range(11, 19))  # UINT_8 … INT_64
_CONVERTED_NOT_COMPARED = {1, 2, 3, 5, 6, 7, 8, 9, 10, 21}  # MAP, LIST, DECIMAL, dates, times, timestamps, INTERVAL
_LOGICAL_STRING = {1, 4, 12, 13, 14}  # STRING, ENUM, JSON, BSON, UUID
_LOGICAL_INTEGER = 10
_LOGICAL_FLOAT16 = 15


class FooterUnreadable(ValueError):
    """The bytes are not a Parquet footer the controller can read; the message says why."""


def footer_length(tail: bytes) -> int:
    """The FileMetaData's length, from the file's last 8 (or more) bytes; FooterUnreadable when they do not end a
    plain Parquet file."""
    if len(tail) < TAIL_BYTES:
        raise FooterUnreadable(f"it is {len(tail)} bytes, shorter than any Parquet file")
    magic = tail[-4:]
    if magic == ENCRYPTED_MAGIC:
        raise FooterUnreadable("its footer is encrypted (it ends in PARE)")
    if magic != MAGIC:
        raise FooterUnreadable("it is not a Parquet file (it does not end in PAR1)")
    (length,) = struct.unpack("<I", tail[-8:-4])
    if length == 0:
        raise FooterUnreadable("its footer is empty")
    return int(length)


@dataclass(frozen=True)
class _Element:
    name: str
    physical: int | None
    num_children: int
    converted: int | None
    logical: int | None  # the id of the LogicalType union's member that is set


def footer_columns(footer: bytes) -> list[Column]:
    """The top-level columns a FileMetaData describes, with their coarse types (None: not compared — nested,
    decimal or temporal columns). `footer` may be the whole FileMetaData or only its beginning: the schema
    is its second field and nothing after it is read."""
    reader = _Reader(footer)
    elements = reader.file_schema()
    if not elements:
        raise FooterUnreadable("its footer holds no schema")
    columns, index = [], 1
    for _ in range(elements[0].num_children):
        if index >= len(elements):
            raise FooterUnreadable("its schema ends before its root's children do")
        element = elements[index]
        columns.append(Column(element.name, _column_type(element)))
        index = _after_subtree(elements, index)
    return columns


def _after_subtree(elements: list[_Element], index: int) -> int:
    """The index just past the element at `index` and all its descendants (the list is depth-first)."""
    pending = 1
    while pending:
        if index >= len(elements):
            raise FooterUnreadable("its schema ends inside a group")
        pending += elements[index].num_children - 1
        index += 1
    return index


def _column_type(element: _Element) -> ColumnType | None:
    """The class the trainer's arrow type falls in: integers and floats are numbers, booleans booleans, text
    strings. Groups (lists, maps, structs), decimals, dates, times and timestamps are not compared."""
    if element.num_children or element.physical is None:
        return None
    if element.logical is not None:
        if element.logical in _LOGICAL_STRING:
            return "string"
        if element.logical in (_LOGICAL_INTEGER, _LOGICAL_FLOAT16):
            return "number"
        return None
    if element.converted is not None:
        if element.converted in _CONVERTED_STRING:
            return "string"
        if element.converted in _CONVERTED_INTEGER:
            return "number"
        if element.converted in _CONVERTED_NOT_COMPARED:
            return None
    if element.physical == _BOOLEAN:
        return "boolean"
    if element.physical in (_INT32, _INT64, _FLOAT, _DOUBLE_TYPE):
        return "number"
    if element.physical == _INT96:
        return None  # a legacy timestamp
    return "string"  # BYTE_ARRAY and FIXED_LEN_BYTE_ARRAY without annotation: binary, which is not a number


class _Reader:
    """Thrift compact protocol, read-only, over bytes that may be truncated or hostile."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def file_schema(self) -> list[_Element]:
        """FileMetaData's field 2, skipping any other field before it; reading stops there."""
        last = 0
        while True:
            field_type, field_id = self._field_header(last)
            if field_type == 0:
                raise FooterUnreadable("its footer has no schema field")
            if field_id == 2 and field_type == _LIST:
                return [self._schema_element() for _ in range(self._list_header(_STRUCT))]
            self._skip(field_type, 0)
            last = field_id

    def _schema_element(self) -> _Element:
        name: str | None = None
        physical = converted = logical = None
        num_children, last = 0, 0
        while True:
            field_type, field_id = self._field_header(last)
            if field_type == 0:
                break
            if field_id == 1 and field_type == _I32:
                physical = self._varint_signed()
            elif field_id == 4 and field_type == _BINARY:
                name = self._binary().decode("utf-8", errors="replace")
            elif field_id == 5 and field_type == _I32:
                num_children = self._varint_signed()
            elif field_id == 6 and field_type == _I32:
                converted = self._varint_signed()
            elif field_id == 10 and field_type == _STRUCT:
                logical = self._union_member()
            else:
                self._skip(field_type, 0)
            last = field_id
        if name is None:
            raise FooterUnreadable("a schema element has no name")
        if num_children < 0:
            raise FooterUnreadable(f"schema element {name!r} has {num_children} children")
        return _Element(name, physical, num_children, converted, logical)

    def _union_member(self) -> int | None:
        """The field id set in a union (LogicalType), its value skipped."""
        member, last = None, 0
        while True:
            field_type, field_id = self._field_header(last)
            if field_type == 0:
                return member
            member = field_id
            self._skip(field_type, 1)
            last = field_id

    # ---- the encoding ------------------------------------------------------------------------------

    def _byte(self) -> int:
        if self.at >= len(self.data):
            raise FooterUnreadable("its footer ends early")
        value = self.data[self.at]
        self.at += 1
        return value

    def _take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise FooterUnreadable("its footer ends early")
        value = self.data[self.at : self.at + count]
        self.at += count
        return value

    def _varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise FooterUnreadable("its footer holds a varint longer than 10 bytes")

    def _varint_signed(self) -> int:
        """A zigzag varint (i16, i32, i64)."""
        value = self._varint()
        return (value >> 1) ^ -(value & 1)

    def _binary(self) -> bytes:
        return self._take(self._varint())

    def _field_header(self, last: int) -> tuple[int, int]:
        """(type, id) of the next field; type 0 is the struct's end."""
        byte = self._byte()
        field_type, delta = byte & 0x0F, byte >> 4
        if field_type == 0:
            return 0, 0
        return field_type, last + delta if delta else self._varint_signed()

    def _list_header(self, expected: int | None = None) -> int:
        byte = self._byte()
        size, element_type = byte >> 4, byte & 0x0F
        if size == 15:
            size = self._varint()
        if expected is not None and element_type != expected:
            raise FooterUnreadable(f"a list holds type {element_type} where {expected} was expected")
        if size > len(self.data) - self.at:  # every element takes at least one byte
            raise FooterUnreadable("its footer ends early")
        return size

    def _skip(self, field_type: int, depth: int) -> None:
        if depth > MAX_NESTING:
            raise FooterUnreadable(f"its footer nests deeper than {MAX_NESTING} levels")
        if field_type in (_BOOL_TRUE, _BOOL_FALSE):
            return  # a boolean field's value is in its header
        if field_type == _I8:
            self._take(1)
        elif field_type in (_I16, _I32, _I64):
            self._varint()
        elif field_type == _DOUBLE:
            self._take(8)
        elif field_type == _BINARY:
            self._binary()
        elif field_type == _UUID:
            self._take(16)
        elif field_type in (_LIST, _SET):
            byte = self._byte()
            self.at -= 1
            element_type = byte & 0x0F
            for _ in range(self._list_header()):
                self._skip_element(element_type, depth + 1)
        elif field_type == _MAP:
            size = self._varint()
            if size:
                kinds = self._byte()
                if 2 * size > len(self.data) - self.at:
                    raise FooterUnreadable("its footer ends early")
                for _ in range(size):
                    self._skip_element(kinds >> 4, depth + 1)
                    self._skip_element(kinds & 0x0F, depth + 1)
        elif field_type == _STRUCT:
            last = 0
            while True:
                inner, last = self._field_header(last)
                if inner == 0:
                    return
                self._skip(inner, depth + 1)
        else:
            raise FooterUnreadable(f"its footer holds an unknown Thrift type {field_type}")

    def _skip_element(self, element_type: int, depth: int) -> None:
        """A list, set or map element: booleans take a byte each there, unlike in a field."""
        if element_type in (_BOOL_TRUE, _BOOL_FALSE):
            self._take(1)
        else:
            self._skip(element_type, depth)
