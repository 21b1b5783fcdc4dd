"""`trainctl local up --secret` (issue 40, point 7): the local Secret Manager's secrets, who may read them, and the
same list told to the controller; values never on a command line."""

from __future__ import annotations

import json
import os
import stat
from argparse import Namespace
from pathlib import Path

import pytest

from functions.settings import Settings
from local.names import Names
from local.stack import StackOptions, controller_settings, job_secrets, secrets_document, write_secrets_file
from trainctl import local_stack


def test_every_teams_code_may_read_every_secret_unless_the_options_say_which():
    names = Names("trainctl-local")
    options = StackOptions(
        secrets={"wandb-key": "v1"}, teams={"default_team": "blue", "teams": {"blue": {}, "red": {}}}
    )
    assert job_secrets(options) == {
        "blue": ["projects/trainctl-local/secrets/wandb-key"],
        "red": ["projects/trainctl-local/secrets/wandb-key"],
    }
    document = secrets_document(options, names)
    assert document == {
        "secrets": {
            "projects/trainctl-local/secrets/wandb-key": {
                "versions": ["v1"],
                "accessors": ["trainctl-custom@trainctl-local.iam.gserviceaccount.com"],
            }
        }
    }
    settings = Settings.from_env(controller_settings(options, names, "http://127.0.0.1:1/"))
    assert settings.job_secrets == {team: tuple(secrets) for team, secrets in job_secrets(options).items()}
    narrow = StackOptions(secrets={"wandb-key": "v1"}, job_secrets={"default": []})
    assert secrets_document(narrow, names)["secrets"]["projects/trainctl-local/secrets/wandb-key"]["accessors"] == []


def test_the_secrets_file_is_the_jobservices_alone(tmp_path: Path):
    path = write_secrets_file(tmp_path / "run" / "secrets.json", {"secrets": {}})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_local_up_takes_a_value_or_a_file_and_hands_them_on_in_the_environment(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("from-a-file")
    assert local_stack._secrets(["a=1", f"b=@{tmp_path / 'token'}"]) == {"a": "1", "b": "from-a-file"}
    monkeypatch.setenv(local_stack.SECRETS_ENV, json.dumps({"c": "3"}))
    assert local_stack._secrets([]) == {"c": "3"}
    assert local_stack.SECRETS_ENV not in os.environ, "taken out of this process's environment"
    for wrong in ("novalue", "bad/name=1", "=1"):
        with pytest.raises(ValueError, match="--secret"):
            local_stack._secrets([wrong])


def test_detaching_passes_no_value_on_the_command_line(tmp_path, monkeypatch):
    seen = {}

    class Stop(Exception):
        pass

    def popen(command, env, **_):
        seen.update(command=command, env=env)
        raise Stop

    monkeypatch.setattr(local_stack.subprocess, "Popen", popen)
    monkeypatch.setattr(local_stack, "local_dir", lambda: tmp_path)
    args = Namespace(
        reconcile_every=10.0, lease=None, image_map="{}", trigger_rules="{}", allow_image_prefix=[],
        allow_python_packages=False, capacity=None, teams=None, executors=None, secret=["wandb-key=s3cr3t-on-no-argv"],
        fresh=False, ephemeral=False, regions=None,
        timeout=1.0,
    )  # fmt: skip
    with pytest.raises(Stop):
        local_stack._detach(args)
    assert "s3cr3t-on-no-argv" not in " ".join(seen["command"])
    assert json.loads(seen["env"][local_stack.SECRETS_ENV]) == {"wandb-key": "s3cr3t-on-no-argv"}
