"""Decode a document someone else wrote safely: a request (JSON or YAML, `load_document`) or what a job left for the
controller to read (JSON only, `load_json`); bounded size and nesting, no YAML aliases or tags.

Everything that can go wrong raises DocumentInvalid with a message a user can act on; nothing else escapes,
so a handler can treat the error as permanent and never retry it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any

import yaml

DEFAULT_MAX_BYTES = 64 * 1024
MAX_DEPTH = 32
_BRACKETS = re.compile(r"[\[\]{}]")
# Python's recursion limit, which both parsers reach at about this nesting.
_NO_PARSER_RECURSES = 1000
# UTF-32's byte order marks begin with UTF-16's.
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
# Fewer bits than this always print within the default int conversion limit (4,300 digits is over 14,000 bits).
_PRINTABLE_BITS = 14_000
_SURROGATE = re.compile("[\ud800-\udfff]")


class DocumentInvalid(ValueError):
    """The bytes are not a usable JSON or YAML document."""


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader without anchors/aliases: a few bytes of aliases can expand into gigabytes ("billion laughs")."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not allowed", event.start_mark)
        if getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(None, None, "YAML anchors (&name) are not allowed", event.start_mark)
        return super().compose_node(parent, index)


def load_document(raw: bytes | str, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """JSON first (the common case, and a subset of YAML), then YAML."""
    text = _text(raw, max_bytes)
    try:
        value = json.loads(text)  # its scanner stops at Python's recursion limit at once
    except Exception as json_exc:  # see _parsed
        if isinstance(json_exc, RecursionError) or _beyond_conversion(json_exc):
            raise _unparsable(json_exc, text, "not valid JSON") from None
        if _open_brackets(text) > _NO_PARSER_RECURSES:
            # PyYAML's scanner reads a flow collection well ahead of its parser: 64 KiB of `[` took a second of
            # CPU before the RecursionError. Past this depth no parser would return anyway (and no document needs
            # it). Counted only before YAML: brackets inside a JSON document's strings are text.
            raise _too_deep() from None
        value = _parsed(lambda: yaml.load(text, Loader=_NoAliasLoader), text, "not valid JSON or YAML")
    return _checked(value)


def load_json(raw: bytes | str, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """A JSON document, under the same size and nesting rules; no YAML: for what programs write (a job's
    metrics.json, say). NaN and Infinity parse into floats, as Python's json has it: a caller that needs finite
    numbers says so in its schema."""
    text = _text(raw, max_bytes)
    return _checked(_parsed(lambda: json.loads(text), text, "not valid JSON"))


def _parsed(parse: Callable[[], Any], text: str, what: str) -> Any:
    """What `parse` (a parser over text in memory, no I/O) makes of the document. Every exception it raises is the
    document's fault — a syntax error, more nesting than the parser recurses (RecursionError), an integer of more
    digits than Python converts (ValueError, 4,300 by default), a YAML date that is no day (ValueError), a
    sexagesimal number past float range (OverflowError) — so every one becomes DocumentInvalid: one that escaped
    would be a 500, and the trigger would redeliver the same bytes for a day (issue 40, point 3)."""
    try:
        return parse()
    except Exception as exc:  # nothing a parser of bytes in memory raises is worth a retry
        raise _unparsable(exc, text, what) from None


def _unparsable(exc: Exception, text: str, what: str) -> DocumentInvalid:
    if isinstance(exc, RecursionError):
        return _too_deep()
    if _beyond_conversion(exc):
        limit = sys.get_int_max_str_digits()
        found = re.search(f"[0-9]{{{limit + 1},}}", text)
        where = f"line {text.count(chr(10), 0, found.start()) + 1}: " if found else ""
        digits = f"one of {len(found.group()):,} digits" if found else "a longer one"
        return DocumentInvalid(f"{what}: {where}an integer may have at most {limit:,} digits; it holds {digits}")
    if isinstance(exc, yaml.YAMLError):
        return DocumentInvalid(f"{what}: {_yaml_problem(exc)}")
    return DocumentInvalid(f"{what}: {_first_line(exc)}")


def _open_brackets(text: str) -> int:
    """The most `[` and `{` ever open at once, counting those inside strings too (an overestimate, used only
    against a bound no real document nears)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(text):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _beyond_conversion(exc: Exception) -> bool:
    """Python's refusal to convert an integer of more digits than sys.get_int_max_str_digits() (a ValueError whose
    text is the only way to tell it from a syntax error)."""
    return isinstance(exc, ValueError) and "integer string conversion" in str(exc)


def _text(raw: bytes | str, max_bytes: int) -> str:
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        raise DocumentInvalid(f"document is {len(data)} bytes; the limit is {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if data.startswith(_UTF16_BOMS):
            bom = "document is not UTF-8 text: it starts with a UTF-16 or UTF-32 byte order mark"
            raise DocumentInvalid(bom) from None
        raise DocumentInvalid(f"document is not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise DocumentInvalid("document contains a NUL character")
    return text


def _checked(value: Any) -> Any:
    """`value` if it is nested at most MAX_DEPTH deep and all of it can be written out again: JSON's `\\ud800`
    escape decodes to half a UTF-16 pair, which no UTF-8 encoder writes (the `rejected` event naming it could not
    be published: a 500), and YAML reads 0x… and sexagesimal integers of any length, which str() refuses past the
    conversion limit. A NUL from `\\u0000` is text: the schema judges it where it matters."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:  # iterative: deep input must not hit the recursion limit
        item, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep()
        if isinstance(item, dict):
            for key, child in item.items():
                _check_scalar(key, path, key=True)  # before formatting it: str() of a huge int key raises
                stack.append((child, depth + 1, f"{path}.{key}"[:200]))
        elif isinstance(item, list):
            stack.extend((child, depth + 1, f"{path}[{index}]"[:200]) for index, child in enumerate(item))
        else:
            _check_scalar(item, path)
    return value


def _check_scalar(item: Any, path: str, key: bool = False) -> None:
    where = f"at {path.removeprefix('.')[:200] or 'the top'}{' (a key)' if key else ''}"
    if isinstance(item, int) and item.bit_length() > _PRINTABLE_BITS:
        try:
            str(item)
        except ValueError:
            limit = sys.get_int_max_str_digits()
            raise DocumentInvalid(f"{where}: an integer may have at most {limit:,} digits; it has more") from None
    elif isinstance(item, str) and _SURROGATE.search(item):
        raise DocumentInvalid(f"{where}: half a UTF-16 surrogate pair (an escape such as \\ud800 alone) is not text")


def _too_deep() -> DocumentInvalid:
    return DocumentInvalid(f"document is nested more than {MAX_DEPTH} levels deep")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where the YAML went wrong and what was expected there, as an editor counts (line and column from 1)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return _first_line(exc)
    mark = exc.problem_mark
    text = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if exc.context and exc.context_mark is not None:
        text += (
            f" ({exc.context} that starts at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1})"
        )
    return text[:300]


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
