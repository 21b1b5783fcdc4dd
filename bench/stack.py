"""The stack the benchmarks run on: the Pub/Sub emulator, fake-gcs-server and the local JobService, started
as the test fixtures start them (tests/conftest.py), and a controller deployment on them
(tests/integration/deployment.py). Everything started here is stopped on the way out, and a scan checks that
nothing outlived the run.

`trainctl local up` (local/stack.py) will start the same things; when it lands, this file is what to swap.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.report import Figure, load_average, record
from local.fake_gcs import FakeGcs, start_fake_gcs
from local.jobservice.standalone import JobServiceProcess, start_jobservice_process
from local.names import LOCAL_PROJECT
from local.processes import BENCH_MARKER_VAR, leftover_processes
from local.pubsub_emulator import PubSubEmulator, start_pubsub_emulator
from tests.integration.deployment import FAKE_NODE_IMAGE, Deployment

REPO_ROOT = Path(__file__).resolve().parent.parent
# Every process a benchmark starts inherits this variable, so a scan of /proc finds any left behind.
RUN_MARKER_VAR = BENCH_MARKER_VAR
# The deployment's template runs the test image; the JobService maps it to the fake node program.
IMAGE_MAP = f'{{"{FAKE_NODE_IMAGE}": ["python", "tests/local/programs/fake_node.py"]}}'


@dataclass
class Stack:
    work_dir: Path
    pubsub: PubSubEmulator
    gcs: FakeGcs
    jobservice: JobServiceProcess

    def deployment(self) -> Deployment:
        """A fresh deployment (own buckets and topic) on this stack; provisioning and serving are up to the caller."""
        return Deployment(uuid.uuid4().hex[:8], self.jobservice.rest_url)


class Ticker:
    """Reconcile every `every` seconds in a thread, as Cloud Scheduler calls the function."""

    def __init__(self, deployment: Deployment, every: float):
        self.deployment, self.every = deployment, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.deployment.reconcile()

    def __enter__(self) -> Ticker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@contextmanager
def bench_stack(keep_dir: Path | None = None) -> Iterator[Stack]:
    """Start the emulators and the JobService on free ports; stop them all on exit, whatever happened."""
    marker = uuid.uuid4().hex
    os.environ[RUN_MARKER_VAR] = marker
    with ExitStack() as stack:
        work_dir = keep_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trainctl-bench-")))
        stack.callback(_check_leftovers, marker)
        pubsub = start_pubsub_emulator(LOCAL_PROJECT, work_dir / "pubsub")
        stack.callback(pubsub.stop)
        os.environ.update(pubsub.env)
        gcs = start_fake_gcs(work_dir / "fake-gcs", pubsub=pubsub)
        stack.callback(gcs.stop)
        os.environ.update(gcs.env)
        args = ["--cancel-grace", "1", "--image-map", IMAGE_MAP, "--workdir", str(REPO_ROOT)]
        jobservice = start_jobservice_process(work_dir / "jobservice", env=dict(os.environ), extra_args=args)
        stack.callback(jobservice.stop)
        yield Stack(work_dir, pubsub, gcs, jobservice)


def _check_leftovers(marker: str) -> None:
    leftovers = leftover_processes(marker, var=RUN_MARKER_VAR)
    for leftover in leftovers:
        os.kill(leftover.pid, 9)
    if leftovers:
        lines = "\n".join(f"  pid {leftover.pid}: {leftover.command[:200]}" for leftover in leftovers)
        raise RuntimeError(f"processes outlived the benchmark (now killed):\n{lines}")


def run_benchmark(
    title: str, args: argparse.Namespace, run: Callable[[Stack, argparse.Namespace], tuple[list[Figure], list[str]]]
) -> None:
    """A benchmark script's main: `run` on a stack of its own, then its figures printed and recorded."""
    load_before = load_average()
    with bench_stack() as stack:
        figures, notes = run(stack, args)
    record(title, figures, load_before, notes, args.results)
