"""Where the local stack keeps its state (issue 44, point 6 follow-up): an installed trainctl's code sits in
site-packages, so its stack's folder cannot be derived from the code's place as a clone's is."""

from __future__ import annotations

from pathlib import Path

import pytest

from local.stack_state import HOME_VAR, LOCAL_DIR_VAR, REPO_ROOT, local_dir, trainctl_home


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No trainctl or XDG variable set, and a home folder of the test's own."""
    for name in (LOCAL_DIR_VAR, HOME_VAR, "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_a_clone_keeps_its_stack_in_its_own_trainctl_folder(bare_env):
    assert trainctl_home() == REPO_ROOT / ".trainctl"
    assert local_dir() == (REPO_ROOT / ".trainctl" / "local").resolve()


def test_an_installed_trainctl_keeps_its_stack_in_the_users_state_folder(bare_env, monkeypatch):
    site_packages = bare_env / "site-packages"  # the code's folder, without a checkout's pyproject.toml
    site_packages.mkdir()
    assert trainctl_home(site_packages) == bare_env / "home" / ".local" / "state" / "trainctl"
    monkeypatch.setenv("XDG_STATE_HOME", str(bare_env / "state"))
    assert trainctl_home(site_packages) == bare_env / "state" / "trainctl"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # the XDG spec: a relative path is ignored
    assert trainctl_home(site_packages) == bare_env / "home" / ".local" / "state" / "trainctl"


def test_trainctl_home_and_the_local_dir_variable_come_first(bare_env, monkeypatch):
    monkeypatch.setenv(HOME_VAR, str(bare_env / "mine"))
    assert trainctl_home(bare_env) == bare_env / "mine" and trainctl_home() == bare_env / "mine"
    assert local_dir() == bare_env / "mine" / "local"
    monkeypatch.setenv(LOCAL_DIR_VAR, str(bare_env / "stack"))
    assert local_dir() == bare_env / "stack"


def test_local_down_without_a_stack_names_the_folder_it_looked_in(bare_env, monkeypatch, capsys):
    from trainctl.cli import main

    monkeypatch.setenv(HOME_VAR, str(bare_env / "mine"))
    assert main(["local", "down"]) == 0
    assert capsys.readouterr().out == f"no local stack is running (its folder: {Path(bare_env / 'mine' / 'local')})\n"
