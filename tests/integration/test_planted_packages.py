"""Packages verified (issue 38, attack 4), on fake-gcs-server, the Pub/Sub emulator and the local JobService: an
object planted under a victim's digest is refused by the victim's `trainctl submit --source` (neither reused nor
overwritten) and, named in a request, rejected at intake before any claim or job; a package that is what its name
says is accepted with the very object read (generation, CRC32C) in `accepted` and the ledger record."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.cloud.errors import Transient
from functions.cloud.gcs import Gcs, TooLarge
from local.names import LOCAL_PROJECT
from schemas.events import Accepted, Rejected
from tests.integration.deployment import LOCAL_EXECUTORS, SHARED_DATASET, Deployment, serving
from tests.integration.test_controller_intake import jobs_with_key
from trainctl.cli import main
from trainctl.source_package import SourceArchive, build_source_archive
from trainctl.submit import upload_source

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def packages(jobservice, tmp_path_factory) -> Iterator[Deployment]:
    log_dir = tmp_path_factory.mktemp("functions")
    with serving(
        jobservice, log_dir, TRAINCTL_ALLOW_PYTHON_PACKAGES="true", TRAINCTL_EXECUTORS=LOCAL_EXECUTORS
    ) as deployment:
        yield deployment


def code(folder: Path, said: str) -> Path:
    """A package folder (`victim/` with `victim/train.py`) whose module prints `said` and ends."""
    (folder / "victim").mkdir(parents=True)
    (folder / "victim" / "__init__.py").write_text("")
    (folder / "victim" / "train.py").write_text(f"print({said!r})\n")
    return folder


def victim_and_planted(tmp_path: Path) -> tuple[Path, SourceArchive, SourceArchive]:
    """The victim's folder and archive (its code this test's own, so its digest too), and an attacker's archive of
    the same file name made of other code."""
    victim = code(tmp_path / "mine" / "victim", f"the victim's code, {tmp_path.name}")
    planted = build_source_archive(code(tmp_path / "theirs" / "victim", "the attacker's code"))
    archive = build_source_archive(victim)
    assert archive.filename == planted.filename and archive.sha256 != planted.sha256
    return victim, archive, planted


def package_request(request_id: str, uri: str) -> dict[str, Any]:
    return {
        "api_version": "trainctl/v1",
        "request_id": request_id,
        "dataset": {"uri": SHARED_DATASET, "target": "y"},
        "trainer": {"python_package": {"uris": [uri], "module": "victim.train", "executor": "pytorch-2.4"}},
        "resources": {"machine_type": "g2-standard-24"},
    }


@pytest.fixture
def cli_env(packages, monkeypatch) -> Deployment:
    """The CLI pointed at the test deployment (STORAGE_EMULATOR_HOST is the session's already)."""
    settings = packages.settings_env(TRAINCTL_ALLOW_PYTHON_PACKAGES="true", TRAINCTL_EXECUTORS=LOCAL_EXECUTORS)
    for name, value in settings.items():  # as the functions got them: submit --source checks packages are on
        monkeypatch.setenv(name, value)
    return packages


# --- the storage adapter --------------------------------------------------------------------------------------------


def test_the_storage_adapter_hashes_an_object_as_stored_with_its_generation_and_stated_hashes(packages):
    """Issue 38, point 5: one streamed media download gives the sha256 of the bytes and, from the same response,
    the generation and the hashes Cloud Storage states (x-goog-hash); a missing object is None; the read is bounded."""
    data = b"\x1f\x8b" + bytes(range(256)) * 40
    blob = packages.upload("hashed/sample.tar.gz", data)
    gcs = Gcs(LOCAL_PROJECT)

    found = gcs.digest(packages.data_bucket, "hashed/sample.tar.gz", len(data))

    assert found is not None
    stated = (found.size, found.generation, found.crc32c, found.md5)
    assert stated == (len(data), blob.generation, blob.crc32c, blob.md5_hash)
    assert found.sha256 == hashlib.sha256(data).hexdigest()
    assert gcs.digest(packages.data_bucket, "hashed/missing.tar.gz", 10) is None
    with pytest.raises(TooLarge):
        gcs.digest(packages.data_bucket, "hashed/sample.tar.gz", len(data) - 1)


class _BreaksOff(http.server.BaseHTTPRequestHandler):
    """Answers a media download with 1,000 bytes promised and 10 sent, then hangs up."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "1000")
        self.send_header("x-goog-generation", "7")
        self.end_headers()
        self.wfile.write(b"0123456789")
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


def test_a_download_that_breaks_off_is_transient_so_the_delivery_is_tried_again(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BreaksOff)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(Transient, match=r"the download of gs://b/packages/x\.tar\.gz broke off"):
            Gcs(LOCAL_PROJECT).digest("b", "packages/x.tar.gz", 10_000)
    finally:
        server.shutdown()
        server.server_close()


# --- the controller at intake ---------------------------------------------------------------------------------------


def test_a_request_naming_a_planted_package_is_rejected_at_intake_and_no_job_is_created(packages, tmp_path, job_client):
    """Issue 38, attack 4: bytes planted under the victim's digest, named in a request, are rejected (reason invalid)
    before the claim, naming the field and both digests; nothing is claimed, no job starts."""
    _, archive, planted = victim_and_planted(tmp_path)
    name = archive.object_name()
    blob = packages.upload(name, planted.data)
    events = packages.events()

    assert packages.request(package_request("planted-package", f"gs://{packages.data_bucket}/{name}")) == 200

    rejected = events.wait_for("planted-package", "rejected")
    assert isinstance(rejected, Rejected) and rejected.reason == "invalid"
    [error] = rejected.errors
    assert error.startswith(f"trainer.python_package.uris[0]: gs://{packages.data_bucket}/{name} is not the package")
    assert f"promises sha256:{archive.sha256}" in error and f"is sha256:{planted.sha256}" in error
    assert f"generation {blob.generation}" in error
    assert events.states("planted-package") == ["rejected"]
    assert packages.record("request:planted-package") is None
    assert jobs_with_key(job_client, "request:planted-package") == []


def test_a_missing_content_addressed_package_is_rejected_naming_the_field(packages, job_client):
    events = packages.events()
    uri = f"gs://{packages.data_bucket}/packages/sha256-{'0' * 64}/victim-0.0.0.tar.gz"

    assert packages.request(package_request("missing-package", uri)) == 200

    rejected = events.wait_for("missing-package", "rejected")
    assert rejected.errors == [
        f"trainer.python_package.uris[0]: {uri} does not exist; upload the package first (`trainctl submit --source "
        "DIR` does it and fills the URI)"
    ]
    assert jobs_with_key(job_client, "request:missing-package") == []


def test_a_package_that_is_what_its_name_says_is_accepted_naming_the_object_read(packages, tmp_path):
    """Issue 38, point 5: the verified package's generation and CRC32C are in `accepted` and the ledger record."""
    _, archive, _ = victim_and_planted(tmp_path)
    blob = packages.upload(archive.object_name(), archive.data)
    uri = f"gs://{packages.data_bucket}/{archive.object_name()}"
    events = packages.events()

    assert packages.request(package_request("verified-package", uri)) == 200

    accepted = events.wait_for("verified-package", "accepted")
    assert isinstance(accepted, Accepted) and accepted.code_digest == f"sha256:{archive.sha256}"
    expected = {"uri": uri, "generation": str(blob.generation), "crc32c": blob.crc32c, "size": len(archive.data)}
    assert [o.model_dump() for o in accepted.code_objects or []] == [expected]
    assert packages.record("request:verified-package")["code_objects"] == [expected]
    assert events.wait_for("verified-package", "submitted").code_digest == f"sha256:{archive.sha256}"


def test_a_package_that_is_not_content_addressed_is_not_read_and_has_no_digest(packages, tmp_path):
    """README, "Your own code": a URI that names no digest promises nothing; it is not read, code_digest stays None."""
    _, archive, _ = victim_and_planted(tmp_path)
    packages.upload("my-packages/victim-0.0.0.tar.gz", archive.data)
    events = packages.events()
    uri = f"gs://{packages.data_bucket}/my-packages/victim-0.0.0.tar.gz"

    assert packages.request(package_request("plain-package", uri)) == 200

    accepted = events.wait_for("plain-package", "accepted")
    assert (accepted.code_digest, accepted.code_objects) == (None, None)


# --- the victim's command line --------------------------------------------------------------------------------------


def test_submit_source_refuses_an_object_planted_under_its_digest_and_leaves_it(cli_env, tmp_path, capsys):
    """Issue 38, attack 4: the victim's `submit --source` finds the planted object under its own digest, compares the
    hashes Cloud Storage states with its archive, and refuses (exit 2, not submitted) saying what is there, what it
    expected and what to do; the object is neither reused nor overwritten."""
    victim, archive, planted = victim_and_planted(tmp_path)
    name = archive.object_name()
    blob = cli_env.upload(name, planted.data)
    request = tmp_path / "request.yaml"
    request.write_text(yaml.safe_dump(package_request("victim-run", "gs://x/placeholder.tar.gz")))

    status = main(["submit", str(request), "--source", str(victim), "--source-bucket", cli_env.data_bucket])

    printed = capsys.readouterr().out
    assert status == 2, printed
    uri = f"gs://{cli_env.data_bucket}/{name}"
    assert f"{uri} already exists and holds other bytes than this code" in printed
    assert f"Cloud Storage states md5 {blob.md5_hash}, crc32c {blob.crc32c}" in printed
    assert f"this archive is md5 {archive.md5}, crc32c {archive.crc32c}" in printed
    assert "neither reused nor overwritten" in printed and printed.rstrip().endswith("not submitted")
    assert "reusing" not in printed
    after = cli_env.storage().bucket(cli_env.data_bucket).get_blob(name)
    assert (after.generation, after.download_as_bytes()) == (blob.generation, planted.data)


def test_submit_source_reuses_its_own_earlier_upload(cli_env, tmp_path, capsys):
    victim, archive, _ = victim_and_planted(tmp_path)
    first = upload_source(victim, cli_env.data_bucket)
    second = upload_source(victim, cli_env.data_bucket)

    printed = capsys.readouterr().out.splitlines()
    assert first == second == f"gs://{cli_env.data_bucket}/{archive.object_name()}"
    assert printed == [f"uploaded {victim} as {first}", f"{victim} is unchanged: reusing {first}"]


def test_with_teams_submit_source_uploads_under_its_teams_own_folder(cli_env, tmp_path, monkeypatch):
    """Issue 38, point 5: the CLI knows its team from the topic it publishes to, and names the package under
    packages/<team>/, where only that team's uploaders may create objects (terraform/teams.tf)."""
    teams = {"default_team": "shared", "teams": {"shared": {}, "red": {"topic": "it-requests-red"}}}
    monkeypatch.setenv("TRAINCTL_TEAMS", json.dumps(teams))
    victim, archive, _ = victim_and_planted(tmp_path)

    monkeypatch.setenv("TRAINCTL_REQUESTS_TOPIC", "it-requests-red")
    red = upload_source(victim, cli_env.data_bucket)
    monkeypatch.setenv("TRAINCTL_REQUESTS_TOPIC", "it-requests")
    shared = upload_source(victim, cli_env.data_bucket)

    assert red == f"gs://{cli_env.data_bucket}/packages/red/sha256-{archive.sha256}/{archive.filename}"
    assert shared == f"gs://{cli_env.data_bucket}/packages/shared/sha256-{archive.sha256}/{archive.filename}"


def test_with_teams_submit_source_refuses_the_closed_shared_topic_before_uploading_and_names_the_teams(
    cli_env, tmp_path, monkeypatch, capsys
):
    """Issue 40, points 5 and 11: with teams the shared topic is closed unless the operator opened it, so a shell
    publishing there is told to name its team before any code is uploaded; with --team the package goes under that
    team's own folder, which its uploaders may write (and replace)."""
    teams = {"default_team": "shared", "teams": {"shared": {}, "red": {"topic": "it-requests-red"}}}
    monkeypatch.setenv("TRAINCTL_TEAMS", json.dumps(teams))
    monkeypatch.setenv("TRAINCTL_REQUESTS_TOPIC", "it-requests")
    victim, archive, _ = victim_and_planted(tmp_path)
    request = tmp_path / "request.yaml"
    request.write_text(yaml.safe_dump(package_request("closed-topic", "gs://x/placeholder.tar.gz")))

    status = main(["submit", str(request), "--source", str(victim), "--source-bucket", cli_env.data_bucket])

    printed = capsys.readouterr().out
    assert status == 2, printed
    assert "not submitted: the shared requests topic is closed" in printed and "teams: shared, red" in printed
    assert not list(
        cli_env.storage().bucket(cli_env.data_bucket).list_blobs(prefix=f"packages/shared/sha256-{archive.sha256}")
    )
    red = upload_source(victim, cli_env.data_bucket, "red")
    assert red == f"gs://{cli_env.data_bucket}/packages/red/sha256-{archive.sha256}/{archive.filename}"
