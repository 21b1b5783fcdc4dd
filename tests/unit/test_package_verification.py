"""Packages verified (issue 38, point 5), the pure parts: when the CLI may reuse an object under its archive's name,
where it names its packages, the digest a URI promises, and the controller's comparison."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from functions.cloud.gcs import ObjectDigest, _stated_hashes
from functions.intake.package_check import digest_problem
from functions.settings import Settings
from functions.teams import parse_teams
from schemas.request import code_digest, package_digest
from trainctl.context import cli_team
from trainctl.source_package import SourceArchive, SourceError, build_source_archive

ARCHIVE = SourceArchive("victim-0.0.0.tar.gz", b"\x1f\x8b the victim's archive")
OTHER = SourceArchive("victim-0.0.0.tar.gz", b"\x1f\x8b someone else's archive")
URI = f"gs://data/{ARCHIVE.object_name()}"


@pytest.mark.parametrize(
    ("md5", "crc32c", "reused"),
    [
        (ARCHIVE.md5, ARCHIVE.crc32c, True),
        (ARCHIVE.md5, None, True),
        (None, ARCHIVE.crc32c, True),  # a composite object states crc32c alone
        (OTHER.md5, OTHER.crc32c, False),
        (OTHER.md5, ARCHIVE.crc32c, False),
        (ARCHIVE.md5, OTHER.crc32c, False),
        (None, OTHER.crc32c, False),
        (None, None, False),  # nothing to compare: never taken on trust
    ],
)
def test_an_object_under_the_archives_name_is_reused_only_when_every_stated_hash_is_the_archives(md5, crc32c, reused):
    assert (ARCHIVE.reuse_problem(URI, md5, crc32c, 10) is None) is reused


def test_the_refusal_says_what_is_there_what_was_expected_and_what_to_do():
    problem = ARCHIVE.reuse_problem(URI, OTHER.md5, OTHER.crc32c, len(OTHER.data))
    assert problem is not None
    assert problem.startswith(f"{URI} already exists and holds other bytes than this code: Cloud Storage states md5 "
                              f"{OTHER.md5}, crc32c {OTHER.crc32c} ({len(OTHER.data)} bytes), this archive is md5 "
                              f"{ARCHIVE.md5}, crc32c {ARCHIVE.crc32c} ({len(ARCHIVE.data)} bytes)")  # fmt: skip
    assert "neither reused nor overwritten" in problem and "--source-bucket" in problem


def test_packages_go_under_their_teams_folder_when_the_cli_knows_its_team_and_keep_their_digest():
    assert ARCHIVE.object_name() == f"packages/sha256-{ARCHIVE.sha256}/victim-0.0.0.tar.gz"
    assert ARCHIVE.object_name("red") == f"packages/red/sha256-{ARCHIVE.sha256}/victim-0.0.0.tar.gz"
    request = {"trainer": {"python_package": {"uris": [f"gs://data/{ARCHIVE.object_name('red')}"]}}}
    assert code_digest(request) == f"sha256:{ARCHIVE.sha256}"


@pytest.mark.parametrize(
    ("topic", "team"),
    [("it-requests-red", "red"), ("it-requests", "shared"), ("projects/p/topics/it-requests-red", "red")],
)
def test_the_cli_knows_its_team_from_the_topic_it_publishes_to(monkeypatch, topic, team):
    teams = parse_teams(
        json.dumps({"default_team": "shared", "teams": {"shared": {}, "red": {"topic": "it-requests-red"}}})
    )
    settings = Settings(project="p", control_bucket="c", events_topic="e", trainer_image="t", teams=teams)
    monkeypatch.setenv("TRAINCTL_REQUESTS_TOPIC", topic)
    assert cli_team(settings) == team
    assert cli_team(dataclasses.replace(settings, teams=None)) is None


def test_a_uri_promises_a_digest_only_when_it_is_content_addressed():
    digest = "ab" * 32
    assert package_digest(f"gs://b/packages/team/sha256-{digest}/p-1.tar.gz") == digest
    assert package_digest(f"gs://b/packages/sha256-{digest}/p-1.tar.gz") == digest
    assert package_digest(f"gs://b/packages/sha256-{digest}/") is None
    assert package_digest(f"gs://b/packages/sha256-{digest[:-1]}/p-1.tar.gz") is None
    assert package_digest("gs://b/my-packages/p-1.tar.gz") is None


def test_the_controller_rejects_bytes_other_than_the_name_promises_naming_both_digests_and_the_object():
    found = ObjectDigest(sha256=OTHER.sha256, size=42, generation=1712, crc32c="AAAAAA==", md5=None)
    where = "trainer.python_package.uris[1]"
    problem = digest_problem(where, URI, ARCHIVE.sha256, found)
    assert problem is not None and problem.startswith(f"{where}: {URI} is not the package its name says")
    assert f"promises sha256:{ARCHIVE.sha256}" in problem and f"is sha256:{OTHER.sha256}" in problem
    assert "generation 1712, crc32c AAAAAA==, 42 bytes" in problem
    assert digest_problem(where, URI, ARCHIVE.sha256, dataclasses.replace(found, sha256=ARCHIVE.sha256)) is None


def test_the_hashes_cloud_storage_states_are_read_from_x_goog_hash():
    assert _stated_hashes("crc32c=yZRlqg==,md5=XrY7u+Ae7tCTyyK7j1rNww==") == {
        "crc32c": "yZRlqg==",
        "md5": "XrY7u+Ae7tCTyyK7j1rNww==",
    }
    assert _stated_hashes("crc32c=yZRlqg==") == {"crc32c": "yZRlqg=="}
    assert _stated_hashes("") == {}


def test_an_archive_larger_than_the_controller_reads_is_refused_before_any_upload(tmp_path: Path, monkeypatch):
    (tmp_path / "pkg" / "pkg").mkdir(parents=True)
    (tmp_path / "pkg" / "pkg" / "__init__.py").write_text("x = 1\n" * 1000)
    assert build_source_archive(tmp_path / "pkg").data
    monkeypatch.setattr("trainctl.source_package.MAX_PACKAGE_BYTES", 100)
    with pytest.raises(SourceError, match="which the controller does not read"):
        build_source_archive(tmp_path / "pkg")
