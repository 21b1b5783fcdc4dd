"""The small rules shared by the request schema, the controller and the local JobService: GCP labels,
Cloud Storage bucket names and URIs, durations. Each `*_problem` function returns why a value breaks the
rule, in words a user can act on, or None when it is fine.
"""

from __future__ import annotations

import math
import re

MAX_LABELS = 64
LABEL_KEY_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE_RE = re.compile(r"[a-z0-9_-]{0,63}")

# C0, DEL and C1 (U+0080-U+009F: U+009B is a terminal's CSI, as ESC [ is): never in a name a person reads.
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]")
_IPV4_RE = re.compile(r"\d{1,3}(\.\d{1,3}){3}")

SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_RE = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
# Past any limit a field sets (its own le= says more), and few enough digits for int() to read at once.
MAX_DURATION_SECONDS = 10**10
_DURATION_DIGITS = 10


def label_key_problem(key: str) -> str | None:
    if not LABEL_KEY_RE.fullmatch(key):
        return (
            f"label key {key!r} must be 1-63 characters of lowercase letters, digits, '_' or '-', "
            "starting with a lowercase letter"
        )
    return None


def label_value_problem(key: str, value: str) -> str | None:
    if not LABEL_VALUE_RE.fullmatch(value):
        return f"label {key!r} value {value!r} must be 0-63 characters of lowercase letters, digits, '_' or '-'"
    return None


def labels_problems(labels: dict[str, str]) -> list[tuple[str, str]]:
    """(key, problem) for every bad label, plus ("", problem) when there are too many."""
    problems: list[tuple[str, str]] = []
    if len(labels) > MAX_LABELS:
        problems.append(("", f"at most {MAX_LABELS} labels, got {len(labels)}"))
    for key, value in labels.items():
        problem = label_key_problem(key) or label_value_problem(key, value)
        if problem:
            problems.append((key, problem))
    return problems


def sanitize_label_value(text: str) -> str:
    """Map free text (a request id, say) onto the label value alphabet, ≤ 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]


def bucket_problem(bucket: str) -> str | None:
    """Cloud Storage bucket naming rules (https://cloud.google.com/storage/docs/buckets#naming)."""
    if not bucket:
        return "the bucket name is empty"
    limit = 222 if "." in bucket else 63
    if len(bucket) < 3 or len(bucket) > limit:
        return f"bucket {bucket!r} must be 3-63 characters (up to 222 with dots, 63 per dot-separated part)"
    if not _BUCKET_RE.fullmatch(bucket):
        return (
            f"bucket {bucket!r} must use only lowercase letters, digits, '-', '_' and '.', "
            "and start and end with a letter or digit"
        )
    if any(len(part) > 63 or not part for part in bucket.split(".")):
        return f"bucket {bucket!r} has an empty or over-63-character dot-separated part"
    if bucket.startswith("goog") or "google" in bucket or "g00gle" in bucket:
        return f"bucket {bucket!r} may not start with 'goog' or contain 'google'"
    if _IPV4_RE.fullmatch(bucket):
        return f"bucket {bucket!r} may not look like an IP address"
    return None


def split_gs_uri(uri: str) -> tuple[str, str]:
    """'gs://bucket/a/b' → ('bucket', 'a/b'). Assumes gs_uri_problem(uri) is None."""
    bucket, _, path = uri.removeprefix("gs://").partition("/")
    return bucket, path


def gs_uri_problem(uri: str) -> str | None:
    if not uri.startswith("gs://"):
        return f"must be a gs://bucket/path URI, got {uri[:80]!r}"
    if _CONTROL_CHARS.search(uri):
        return "must not contain control characters (newline, NUL, …)"
    bucket, path = split_gs_uri(uri)
    problem = bucket_problem(bucket)
    if problem:
        return problem
    if any(part in (".", "..") for part in path.split("/")):
        return "must not contain '.' or '..' path segments"
    if len(path.encode()) > 1024:
        return "object path longer than 1024 bytes"
    return None


def parse_duration(value: int | float | str) -> int:
    """'30m', '24h', '1h30m', '7d', '90s', '3600' or a number of seconds → whole seconds.

    Raises ValueError with the accepted forms when the value is none of them.
    """
    if isinstance(value, bool):
        raise ValueError("a duration must be seconds or a string like '30m', '24h', '1h30m'")
    if isinstance(value, int | float):
        if not math.isfinite(value) or abs(value) > MAX_DURATION_SECONDS:
            raise ValueError(f"a duration may be at most {MAX_DURATION_SECONDS:,} seconds, got {value}")
        if value != int(value):
            raise ValueError(f"a duration in seconds must be whole, got {value}")
        return int(value)
    text = str(value).strip().lower()
    seconds_only = text.isascii() and text.isdigit()  # isdigit() alone takes '²' and '٣'
    match = _DURATION_RE.fullmatch(text) if text.isascii() and not seconds_only else None
    if not text or not (seconds_only or match):
        raise ValueError(f"{value!r:.80} is not a duration; use seconds or a string like '30m', '24h', '1h30m'")
    numbers = [text] if seconds_only or match is None else [number for number in match.groups() if number]
    if any(len(number) > _DURATION_DIGITS for number in numbers):  # and no int() of thousands of digits
        raise ValueError(f"a duration may be at most {MAX_DURATION_SECONDS:,} seconds, got {value!r:.80}")
    if seconds_only or match is None:
        return int(text)
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def format_duration(seconds: int) -> str:
    parts = []
    for unit in ("d", "h", "m", "s"):
        amount, seconds = divmod(seconds, SECONDS[unit])
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def control_char_problem(text: str) -> str | None:
    if _CONTROL_CHARS.search(text):
        return "must not contain control characters (newline, tab, NUL, …)"
    return None
