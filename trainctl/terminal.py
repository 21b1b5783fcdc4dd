"""What trainctl prints is safe for a terminal: text a requester or a job wrote — request ids, display names,
messages, errors, metric names, object names, job logs — reaches other people's terminals (`watch` shows every
team's events), and an escape sequence in it could clear the screen, retitle the window, rewrite earlier lines or
hide text (issue 40, point 6).

`printable` is the one function: every character that moves the cursor, starts an escape sequence or reorders text
is written as a visible `\\uXXXX` (valid inside a JSON string too, so `--json` output stays JSON). The command line
puts every printer behind it (`cli.main` wraps stdout and stderr in `EscapedStream`); a formatter also passes each
field a requester wrote through `printable` itself, so a newline in it cannot forge a line of its own.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

# C0 controls (ESC among them), DEL, C1 controls (U+009B is CSI, as ESC [ is), the Unicode line and paragraph
# separators, and the bidirectional marks, embeddings, overrides and isolates ("Trojan Source", CVE-2021-42574).
_UNSAFE_BEYOND_C0 = r"\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE_IN_FIELD = re.compile(rf"[\x00-\x1f{_UNSAFE_BEYOND_C0}]")
_UNSAFE_IN_LINES = re.compile(rf"[\x00-\x08\x0b-\x1f{_UNSAFE_BEYOND_C0}]")  # keeps tab (\x09) and newline (\x0a)


def _visible(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: object, lines: bool = False) -> str:
    """`text` (str() of anything) with every unsafe character written as `\\uXXXX`; `lines`: newlines and tabs
    are kept (a whole printout, whose lines trainctl itself made), else they are escaped too (one field)."""
    return (_UNSAFE_IN_LINES if lines else _UNSAFE_IN_FIELD).sub(_visible, str(text))


class EscapedStream:
    """A text stream whose writes pass through `printable(..., lines=True)`; everything else is the stream's own."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(text, lines=True))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer …
        return getattr(self.stream, name)


@contextmanager
def escaped_output() -> Iterator[None]:
    """sys.stdout and sys.stderr behind `printable` for the length of the block (one command)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _escaped(saved[0]), _escaped(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _escaped(stream: TextIO) -> TextIO:
    return stream if isinstance(stream, EscapedStream) else EscapedStream(stream)  # type: ignore[return-value]
