"""A package's executor against the deployment's list (Settings.executors, schemas/executors.py): admission refuses a
name the list lacks, a GPU the executor has no kernels for on any rung, and an executor past its end of availability
(issue 40, point 8); `trainctl validate` and `plan` show the same refusals and warn of an executor near its end.

Pure: `today` is the caller's (the handler's clock, or the user's date).
"""

from __future__ import annotations

from datetime import date

from schemas.errors import FieldError
from schemas.executors import (
    Executor,
    Executors,
    end_of_availability_problem,
    end_of_availability_warning,
    executor_gpu_problem,
    unknown_executor,
)
from schemas.request import TrainingJobRequest, rung_prefix

FIELD = "trainer.python_package.executor"


def executor_of(request: TrainingJobRequest, executors: Executors) -> Executor | None:
    """The request's executor from the list; None without a package or for a name the list lacks."""
    package = request.trainer.python_package
    return executors.get(package.executor) if package is not None else None


def executor_problems(request: TrainingJobRequest, executors: Executors, today: date | None) -> list[FieldError]:
    """What makes the request's executor unusable here: unknown, no kernels for a rung's GPU, or (with `today`) past
    its end of availability. Nothing for a request without a package."""
    package = request.trainer.python_package
    if package is None:
        return []
    executor = executors.get(package.executor)
    if executor is None:
        return [FieldError(FIELD, unknown_executor(package.executor, executors))]
    problems = [
        FieldError(f"{rung_prefix(rung.index)}resources.accelerator_type", problem)
        for rung in request.rungs()
        if (problem := executor_gpu_problem(executor, rung.resources.accelerator_type))
    ]
    if today is not None and (ended := end_of_availability_problem(executor, executors, today)):
        problems.append(FieldError(FIELD, ended))
    return problems


def executor_warnings(request: TrainingJobRequest, executors: Executors, today: date) -> list[str]:
    """`validate` and `plan`: the executor's end of availability when it is near (schemas/executors.py NEAR_END) or
    past, as `trainer.python_package.executor: …` lines."""
    executor = executor_of(request, executors)
    warning = end_of_availability_warning(executor, executors, today) if executor is not None else None
    return [f"{FIELD}: {warning}"] if warning else []
