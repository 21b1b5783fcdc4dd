"""The rough edges a new user hit (issue 44, points 3 and 4): examples that validate and plan as typed, an empty
file and a misspelt field said plainly, Ctrl-C on `submit --wait` saying the request goes on, packages refused before
the upload naming how to turn them on here and in Terraform, and `python -m trainer.predict` without credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import RequestInvalid, parse_request
from tests.conftest import REPO_ROOT
from tests.unit.test_cli_sweep import stopped_stack as stopped_stack  # the fixtures
from tests.unit.test_cli_without_a_stack import nowhere as nowhere
from trainctl import submit
from trainctl.cli import main

PACKAGE = REPO_ROOT / "examples" / "ddp-package"
PACKAGE_REQUEST = str(PACKAGE / "request.yaml")


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_the_package_example_validates_and_plans_as_typed_with_source(nowhere, capsys, command):
    """Before, `plan` had no --source, and the request was invalid: trainer.python_package.uris missing."""
    assert main([command, PACKAGE_REQUEST, "--source", str(PACKAGE)]) == 0, capsys.readouterr()
    if command == "plan":
        assert "package           gs://trainctl-local-trainctl-data/packages/sha256-" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_without_source_the_missing_uris_say_that_source_fills_them(nowhere, capsys, command):
    assert main([command, PACKAGE_REQUEST]) == 2
    assert "trainer.python_package.uris: required field is missing; `--source DIR` fills it" in capsys.readouterr().out


def test_an_empty_request_file_is_said_to_be_empty(nowhere, tmp_path: Path, capsys):
    """Before: "a request must be a mapping of fields, got NoneType"."""
    empty = tmp_path / "request.yaml"
    empty.write_text("\n")
    assert main(["validate", str(empty)]) == 2
    out = capsys.readouterr().out
    assert "the file is empty" in out and "NoneType" not in out


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"datset": {}}, "datset: unknown field (not part of trainctl/v1); did you mean dataset?"),
        ({"resources": {"machine_typ": "n1"}}, "resources.machine_typ: unknown field (not part of trainctl/v1); did "
         "you mean machine_type?"),
        ({"fallbacks": [{"regon": "x"}]}, "fallbacks[0].regon: unknown field (not part of trainctl/v1); did you "
         "mean region?"),
        ({"zzzz": 1}, "zzzz: unknown field (not part of trainctl/v1)"),
    ],
)  # fmt: skip
def test_an_unknown_field_gets_the_closest_field_names_of_its_object(document, said):
    with pytest.raises(RequestInvalid) as refused:
        parse_request({"api_version": "trainctl/v1", "request_id": "x", **document})
    assert said in [str(error) for error in refused.value.errors]


def test_parse_request_says_an_empty_document_is_empty():
    with pytest.raises(RequestInvalid, match="the request is empty"):
        parse_request(None)


def test_ctrl_c_on_submit_wait_says_the_request_goes_on_and_how_to_follow_or_cancel_it(
    stopped_stack, monkeypatch, capsys
):
    """Before: exit 130 and nothing said."""

    class Stream:
        def __init__(self, *args: object) -> None: ...

        def follow(self, until: object):  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt

        def close(self) -> None: ...

    monkeypatch.setattr("trainctl.context.dead_local_endpoint", lambda: None)
    monkeypatch.setattr(submit, "EventStream", Stream)
    monkeypatch.setattr(submit, "publish_request", lambda project, topic, payload: "m-1")
    request = str(REPO_ROOT / "examples" / "tabular-2xa100.yaml")

    assert main(["submit", request, "--wait"]) == 130
    err = capsys.readouterr().err
    assert "stopped following; request churn-tabular-2xa100 goes on" in err
    assert "watch --request churn-tabular-2xa100`" in err and "status churn-tabular-2xa100`" in err
    assert "cancel churn-tabular-2xa100`" in err


def test_submit_source_where_packages_are_off_names_local_up_and_terraform_before_uploading(
    stopped_stack, monkeypatch, capsys
):
    """Before, the refusal came from admission after the upload and named only Terraform's setting."""
    monkeypatch.setattr("trainctl.context.dead_local_endpoint", lambda: None)
    monkeypatch.setattr(submit, "build_source_archive", lambda folder: pytest.fail("packed before refusing"))

    assert main(["submit", PACKAGE_REQUEST, "--source", str(PACKAGE)]) == 2
    out = capsys.readouterr().out
    assert "trainctl local up --allow-python-packages" in out and "Terraform's allow_python_packages" in out


def test_predict_without_credentials_says_what_to_set(nowhere, tmp_path: Path, capsys):
    """Before: a 43-line DefaultCredentialsError traceback."""
    from trainer import predict
    from trainer.storage import folders

    # The process's storage client is made once: one an earlier test made for the emulator would answer here.
    folders.gcs_client.cache_clear()

    status = predict.main(["--model-dir", "gs://b/m/", "--data", "gs://b/d.csv", "--out", str(tmp_path / "p.csv")])

    folders.gcs_client.cache_clear()  # this test's credential-less client is no later test's
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err
    assert 'eval "$(trainctl local env)"' in err and "gcloud auth application-default login" in err


@pytest.fixture
def with_teams(stopped_stack, monkeypatch):
    """A stack started with --teams (ml, the default, and vision), whose shell's exports name each team's topic."""
    import json

    from functions.teams import with_topics
    from local.names import Names

    names = Names("trainctl-local")
    teams = {"default_team": "ml", "teams": {"ml": {}, "vision": {}}}
    monkeypatch.setenv("TRAINCTL_TEAMS", json.dumps(with_topics(teams, names.team_requests_topic, names.data_bucket)))
    monkeypatch.setattr("trainctl.context.dead_local_endpoint", lambda: None)
    published: list[str] = []
    monkeypatch.setattr(submit, "publish_request", lambda project, topic, payload: published.append(topic) or "m-1")
    return published


def test_submit_team_publishes_on_the_teams_own_topic(with_teams, capsys):
    request = str(REPO_ROOT / "examples" / "tabular-2xa100.yaml")
    assert main(["submit", request, "--team", "vision"]) == 0, capsys.readouterr()
    assert with_teams == ["trainctl-requests-vision"]


def test_submit_to_an_unknown_team_is_refused_listing_the_teams(with_teams, capsys):
    request = str(REPO_ROOT / "examples" / "tabular-2xa100.yaml")
    assert main(["submit", request, "--team", "visoin"]) != 0
    assert "--team visoin: not one of this deployment's teams (ml, vision)" in capsys.readouterr().err
    assert with_teams == []
