"""Request text on the built-in trainer's command line is only ever a value (issue 40, point 6): a column named
`--nproc-per-node=64` was passed as `--target --nproc-per-node=64`, which the launcher read as its own option (64
processes a node) and trainer.train as a missing target. The controller joins each column name to its option, and
the launcher and the trainer each read it back as the value it was.

Column names starting with '-' stay allowed (a CSV may have one, and pyarrow reads it): the command line is made
safe for any name rather than the schema refusing some."""

from __future__ import annotations

import pytest

from functions.jobs.planning import trainer_args
from tests.unit.conftest import make_request
from trainer import flags, launch
from trainer.outputs import finished_watch

HOSTILE = [
    "--nproc-per-node=64",
    "--max-restarts",
    "--checkpoint-dir",
    "--checkpoint-dir=gs://elsewhere/",
    "-h",
    "---",
    "-x",
]


@pytest.mark.parametrize("target", HOSTILE)
def test_a_target_that_looks_like_an_option_reaches_the_trainer_as_the_target(target):
    request = make_request(dataset={"uri": "gs://data-bucket/churn/", "target": target, "features": ["-a", "--b"]})
    argv = trainer_args(request, reduction_server=False)
    own, passed_on = launch.parse_args(argv)
    assert (own.nproc_per_node, own.max_restarts, own.rendezvous_timeout_seconds) == (None, 1, 1800)
    assert passed_on == argv
    read = flags.parse_args(passed_on)
    assert read.target == target and read.features == ["-a", "--b"]
    assert finished_watch.checkpoint_dir(passed_on, {}) == "trainer_output/checkpoints"


def test_the_launchers_own_options_still_work_around_the_trainers():
    request = make_request(dataset={"uri": "gs://data-bucket/churn/", "target": "--nproc-per-node=64"})
    own, passed_on = launch.parse_args(["--nproc-per-node", "2", *trainer_args(request, False), "--max-restarts", "0"])
    assert (own.nproc_per_node, own.max_restarts) == (2, 0)
    assert flags.parse_args(passed_on).target == "--nproc-per-node=64"


def test_a_column_named_only_two_dashes_is_refused_by_the_schema():
    """argparse drops a value that is exactly '--', even joined (`--target=--`): the trainer would get no target."""
    from schemas.errors import RequestInvalid

    for dataset in ({"target": "--"}, {"target": "y", "features": ["a", "--"]}):
        with pytest.raises(RequestInvalid, match="a column may not be named '--'"):
            make_request(dataset={"uri": "gs://data-bucket/churn/", **dataset})
