"""The `trainctl` command line: one subcommand per verb, each in its own module. A failure the user can act on (a
service that is absent or refuses, a file that cannot be read) ends the command with one line saying what to do,
never a traceback (trainctl/problems.py)."""

from __future__ import annotations

import argparse
import os
import sys

from trainctl import demo, jobs, local_stack, model_rules, models, plan, replay, report, serving, submit, validate
from trainctl.completion import register as register_completion
from trainctl.console import register as register_console
from trainctl.curve import register as register_curve
from trainctl.init_request import register as register_init
from trainctl.problems import EXIT_INTERRUPTED, Problem, explain
from trainctl.terminal import escaped_output

# A reader that stopped reading (`trainctl status ID | head`): what a program killed by SIGPIPE reports.
EXIT_BROKEN_PIPE = 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainctl",
        description="Event-driven multi-GPU training on Vertex AI: validate, plan and submit training jobs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate.register(commands)
    register_init(commands)
    plan.register(commands)
    submit.register(commands)
    jobs.register(commands)
    report.register(commands)
    register_curve(commands)
    verbs = models.register(commands)
    model_rules.register(verbs)
    serving.register(verbs)
    serving.register_predict(commands)
    replay.register(commands)
    demo.register(commands)
    local_stack.register(commands)
    register_console(commands)
    register_completion(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Every printer of every command, argparse's too, writes through terminal.printable: what requesters and jobs
    # wrote reaches other people's terminals (issue 40, point 6).
    with escaped_output():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
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
