"""Decode a document someone else wrote safely: a request (JSON or YAML, `load_document`) or what a job left for the
controller to read (JSON only, `load_json`); bounded size and nesting, no YAML aliases or tags.

Everything that can go wrong raises DocumentInvalid with a message a user can act on; nothing else escapes,
so a handler can treat the error as permanent and never retry it.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

DEFAULT_MAX_BYTES = 64 * 1024
MAX_DEPTH = 32


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


def _depth(value: Any, limit: int) -> int:
    """Nesting depth, stopping once past the limit (iterative: deep input must not hit the recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def load_document(raw: bytes | str, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """JSON first (the common case, and a subset of YAML), then YAML."""
    text = _text(raw, max_bytes)
    # Both parsers recurse once per nesting level; absurd nesting ends in RecursionError, caught below.
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = yaml.load(text, Loader=_NoAliasLoader)
        except yaml.YAMLError as exc:
            raise DocumentInvalid(f"not valid JSON or YAML: {_yaml_problem(exc)}") from None
        except RecursionError:
            raise _too_deep() from None
    except RecursionError:
        raise _too_deep() from None
    return _within_depth(value)


def load_json(raw: bytes | str, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """A JSON document, under the same size and nesting rules; no YAML: for what programs write (a job's
    metrics.json, say). NaN and Infinity parse into floats, as Python's json has it: a caller that needs finite
    numbers says so in its schema."""
    text = _text(raw, max_bytes)
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:  # JSONDecodeError, and an integer of more digits than Python converts
        raise DocumentInvalid(f"not valid JSON: {_first_line(exc)}") from None
    return _within_depth(value)


def _text(raw: bytes | str, max_bytes: int) -> str:
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        raise DocumentInvalid(f"document is {len(data)} bytes; the limit is {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentInvalid(f"document is not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise DocumentInvalid("document contains a NUL character")
    return text


def _within_depth(value: Any) -> Any:
    if _depth(value, MAX_DEPTH) > MAX_DEPTH:
        raise _too_deep()
    return value


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
