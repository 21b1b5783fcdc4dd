"""A command imports its own module alone (trainctl/cli.py's table), and its parser there is the one the whole
parser has: the same arguments, so `trainctl X ...` parses as it always did."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from trainctl.cli import _COMMANDS, build_parser, parser_for


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def shape(parser: argparse.ArgumentParser) -> list:
    """Every argument of `parser` and of its verbs, as option strings, destination and choices."""
    found = [(tuple(a.option_strings), a.dest, tuple(a.choices or ())) for a in parser._actions]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += [(verb, shape(sub)) for verb, sub in action.choices.items()]
    return found


@pytest.mark.parametrize("command", sorted(_COMMANDS))
def test_a_commands_own_parser_is_the_whole_parsers_for_that_command(command):
    assert shape(subparsers(parser_for([command, "--help"]))[command]) == shape(subparsers(build_parser())[command])


def test_every_command_but_completion_is_in_the_table():
    # completion prints the whole parser, so it needs every module anyway.
    assert set(subparsers(build_parser())) - set(_COMMANDS) == {"completion"}


def test_help_a_mistyped_command_and_none_get_the_whole_parser():
    whole = set(subparsers(build_parser()))
    for argv in ([], ["--help"], ["stauts"]):
        assert set(subparsers(parser_for(argv))) == whole


def test_local_env_imports_neither_the_controller_nor_the_request_schemas():
    """What a shell's `eval "$(trainctl local env)"` costs: the local stack's module, not every command's."""
    probe = (
        "import sys; from trainctl.cli import parser_for; parser_for(['local', 'env'])\n"
        "print(sorted(m for m in ('trainctl.jobs', 'functions.ledger.record', 'schemas.request') if m in sys.modules))"
    )
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert imported.stdout.strip() == "[]"
