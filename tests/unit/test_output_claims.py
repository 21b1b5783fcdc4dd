"""The output-folder index's pure parts: when two folders overlap, and entry names that split back exactly."""

from __future__ import annotations

import pytest

from functions.ledger.keys import key_hash
from functions.ledger.output_claims import _entry_name, _parse, max_output_path_bytes, overlap


@pytest.mark.parametrize(
    ("one", "other", "overlaps"),
    [
        ("team/churn/", "team/churn/", True),
        ("team/", "team/churn/", True),
        ("team/churn/tuned/", "team/churn/", True),
        ("", "team/churn/", True),  # the bucket's root holds every folder
        ("team/churn-2/", "team/churn/", False),  # a shared start of a name is no overlap
        ("team/churn/", "team/churnx/", False),
        ("team//churn/", "team/churn/", False),  # distinct object names in Cloud Storage
        ("a/", "b/", False),
    ],
)
def test_folders_overlap_when_one_is_the_other_or_inside_it(one, other, overlaps):
    """Guards issue 24, point 4: compared at "/" boundaries, both ways round."""
    assert overlap(one, other) is overlaps
    assert overlap(other, one) is overlaps


@pytest.mark.parametrize("path", ["", "team/", "team/churn/tuned/", "/x/", "a.b/c-d/"])
def test_an_entry_name_splits_back_into_its_bucket_folder_and_owner(path):
    """Guards issue 24, point 4: the owner's key hash is the name's last part and the folder all before it."""
    owner = key_hash("request:r1")
    name = _entry_name("models", path, owner)
    assert _parse(name) == ("models", path, owner)
    assert len(f"outputs/models/{'a/' * (max_output_path_bytes('models') // 2)}{owner}".encode()) <= 1024
