"""Shared rules: durations and label sanitising."""

import pytest

from schemas.rules import format_duration, parse_duration, sanitize_label_value


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("24h", 86400), ("1h30m", 5400), ("7d", 604800), ("90s", 90), ("3600", 3600), (45, 45)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("bad", ["", "soon", "1.5h", "h", True, 1.5])
def test_bad_durations_say_what_is_accepted(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_sanitized_label_values_fit_the_label_alphabet():
    assert sanitize_label_value("Churn.2026/11 Ü" + "x" * 80) == ("churn-2026-11--" + "x" * 80)[:63]
