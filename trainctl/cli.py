"""The `trainctl` command line: one subcommand per verb, each in its own module. A failure the user can act on (a
service that is absent or refuses, a file that cannot be read) ends the command with one line saying what to do,
never a traceback (trainctl/problems.py)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

from trainctl.problems import EXIT_INTERRUPTED, Problem, explain
from trainctl.terminal import escaped_output

# A reader that stopped reading (`trainctl status ID | head`): what a program killed by SIGPIPE reports.
EXIT_BROKEN_PIPE = 141


def _empty_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(
        prog="trainctl",
        description="Event-driven multi-GPU training on Vertex AI: validate, plan and submit training jobs.",
    )
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser (help, completion, and any command the table below does not name)."""
    from trainctl import demo, jobs, local_stack, plan, replay, report, serving, submit, validate
    from trainctl.completion import register as register_completion
    from trainctl.console import register as register_console
    from trainctl.curve import register as register_curve
    from trainctl.init_request import register as register_init

    parser, commands = _empty_parser()
    validate.register(commands)
    register_init(commands)
    plan.register(commands)
    submit.register(commands)
    jobs.register(commands)
    report.register(commands)
    register_curve(commands)
    _register_models(commands)
    serving.register_predict(commands)
    replay.register(commands)
    demo.register(commands)
    local_stack.register(commands)
    register_console(commands)
    register_completion(commands)
    return parser


def _register_models(commands: argparse._SubParsersAction) -> None:
    from trainctl import model_rules, models, serving

    verbs = models.register(commands)
    model_rules.register(verbs)
    serving.register(verbs)


def _module_register(module: str, function: str = "register") -> Callable[[argparse._SubParsersAction], object]:
    return lambda commands: getattr(importlib.import_module(module), function)(commands)


# The module that registers (and runs) each command. A command named here imports that module alone: every
# command's dependencies (pydantic schemas, Cloud clients, the controller) cost ~1.2 CPU-s at each start, and a
# `trainctl local env` in a shell's start-up or a `trainctl status` in a loop needs few of them.
_COMMANDS: dict[str, Callable[[argparse._SubParsersAction], object]] = {
    "validate": _module_register("trainctl.validate"),
    "schema": _module_register("trainctl.validate"),
    "init": _module_register("trainctl.init_request"),
    "plan": _module_register("trainctl.plan"),
    "submit": _module_register("trainctl.submit"),
    **dict.fromkeys(("status", "list", "cancel", "watch"), _module_register("trainctl.jobs")),
    "report": _module_register("trainctl.report"),
    "curve": _module_register("trainctl.curve"),
    "models": _register_models,
    "predict": _module_register("trainctl.serving", "register_predict"),
    "replay": _module_register("trainctl.replay"),
    "demo": _module_register("trainctl.demo"),
    "local": _module_register("trainctl.local_stack"),
    "console": _module_register("trainctl.console"),
}


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the command `argv` names, with that command alone; the whole parser otherwise."""
    if not argv or argv[0] not in _COMMANDS:
        return build_parser()
    parser, commands = _empty_parser()
    _COMMANDS[argv[0]](commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Every printer of every command, argparse's too, writes through terminal.printable: what requesters and jobs
    # wrote reaches other people's terminals (issue 40, point 6).
    with escaped_output():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser_for(argv).parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit: point stdout at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        problem = explain(exc)
        if problem is None:
            raise
        sys.stdout.flush()
        verb = getattr(args, "verb", None) or getattr(args, "local_command", None)
        print(f"trainctl {args.command}{f' {verb}' if verb else ''}: {problem}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, Problem) else 1


if __name__ == "__main__":
    sys.exit(main())
