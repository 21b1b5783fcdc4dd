"""Issue 41: `trainctl predict NAME FILE|-` reads the rows a person has at hand, and says what is wrong with them."""

from __future__ import annotations

import pytest

from trainctl.serving import MAX_INSTANCES, instances_of


def test_rows_come_from_csv_json_lines_or_an_instances_document():
    assert instances_of("x0,x1,city\n1,2.5,Oslo\n3,,Rome\n") == [
        {"x0": 1, "x1": 2.5, "city": "Oslo"},
        {"x0": 3, "x1": None, "city": "Rome"},
    ]
    assert instances_of('{"x0": 1}\n{"x0": 2}\n') == [{"x0": 1}, {"x0": 2}]
    assert instances_of('{"instances": [{"x0": 1}]}') == [{"x0": 1}]
    assert instances_of('[{"x0": 1}, {"x0": 2}]') == [{"x0": 1}, {"x0": 2}]


def test_bad_rows_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="empty"):
        instances_of("  \n")
    with pytest.raises(ValueError, match="object of the model's feature columns"):
        instances_of("[1, 2]")
    with pytest.raises(ValueError, match=f"at most {MAX_INSTANCES}"):
        instances_of("x\n" + "1\n" * (MAX_INSTANCES + 1))
