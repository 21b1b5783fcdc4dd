"""The `trainctl` command line: one subcommand per verb, each in its own module."""

from __future__ import annotations

import argparse
import sys

from trainctl import demo, jobs, local_stack, models, plan, replay, report, submit, validate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainctl",
        description="Event-driven multi-GPU training on Vertex AI: validate, plan and submit training jobs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate.register(commands)
    plan.register(commands)
    submit.register(commands)
    jobs.register(commands)
    report.register(commands)
    models.register(commands)
    replay.register(commands)
    demo.register(commands)
    local_stack.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
