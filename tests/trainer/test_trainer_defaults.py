"""One source for the built-in trainer's defaults: a request's (schemas/request.py), generated into the trainer's
own package (trainer/request_defaults.py, `make schemas`), which its command line takes as its defaults."""

from __future__ import annotations

from functions.jobs.planning import hyperparameter_args
from schemas.export import TRAINER_DEFAULTS, trainer_defaults
from schemas.request import Dataset, TabularHyperparameters
from trainer.flags import parse_args

REQUIRED = ["--data", "gs://bucket/data/", "--target", "y"]


def test_the_trainer_run_without_flags_trains_as_a_request_with_every_default_does():
    """Guards issue 28, point 7: `python -m trainer.train` with no training flags gets exactly the settings the
    planner passes for a request that sets none (60 epochs and patience 8, not 10 and 0)."""
    dataset = Dataset(uri="gs://bucket/data/", target="y")
    planned = [
        *REQUIRED,
        "--format", dataset.format,
        "--validation-fraction", str(dataset.validation_fraction),
        *hyperparameter_args(TabularHyperparameters()),
    ]  # fmt: skip

    assert vars(parse_args(REQUIRED)) == vars(parse_args(planned))
    assert parse_args(REQUIRED).epochs == TabularHyperparameters().epochs
    assert parse_args(REQUIRED).early_stopping_patience == TabularHyperparameters().early_stopping_patience


def test_the_trainers_copy_of_the_request_defaults_is_current():
    """Guards issue 28, point 7: the generated file is what the request model gives today."""
    stale = "trainer/request_defaults.py is stale: run `make schemas`"
    assert TRAINER_DEFAULTS.read_text() == trainer_defaults(), stale
