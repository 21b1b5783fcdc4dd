"""A Python package on the local JobService, as Vertex runs a pythonPackageSpec (issue 40, points 9 and 10): the
package is installed with its requirements (fetched from the package index the JobService is given, here a folder of
wheels, as Vertex's pip fetches them from PyPI), and code the executor's Python 3.10 cannot run fails the job before
any node starts, naming the file and the line."""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.aiplatform_v1 import JobState
from job_specs import PARENT

from local.fake_gcs import FakeGcs, create_bucket
from local.jobservice.client import job_service_client, wait_for_state
from local.jobservice.standalone import JobServiceProcess
from local.names import LOCAL_PROJECT
from tests.unit.test_executor_packages import make_wheel

pytestmark = pytest.mark.integration

EXECUTOR = "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
BUCKET = "package-requirements-tests"


def sdist(name: str, files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-0.1/{path}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def package(module_code: str, requires: list[str]) -> dict[str, str]:
    """A setuptools project `uses_dep` whose module `uses_dep.train` runs `module_code`."""
    dependencies = ", ".join(f'"{r}"' for r in requires)
    return {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "uses_dep"\nversion = "0.1"\ndependencies = [{dependencies}]\n\n'
        '[tool.setuptools]\npackages = ["uses_dep"]\n',
        "uses_dep/__init__.py": "",
        "uses_dep/train.py": module_code,
    }


def upload(fake_gcs: FakeGcs, data: bytes) -> str:
    create_bucket(fake_gcs.url, LOCAL_PROJECT, BUCKET)
    client = storage.Client(project=LOCAL_PROJECT, credentials=AnonymousCredentials())
    name = f"packages/{uuid.uuid4().hex}/uses_dep-0.1.tar.gz"
    client.bucket(BUCKET).blob(name).upload_from_string(data)
    return f"gs://{BUCKET}/{name}"


def run_package(service: JobServiceProcess, uri: str, *args: str):
    pool = {
        "machine_spec": {
            "machine_type": "n1-standard-8",
            "accelerator_type": "NVIDIA_TESLA_T4",
            "accelerator_count": 1,
        },
        "replica_count": 1,
        "python_package_spec": {
            "executor_image_uri": EXECUTOR,
            "package_uris": [uri],
            "python_module": "uses_dep.train",
            "args": list(args),
        },
    }
    client = job_service_client(service.address)
    job = {"display_name": "package-requirements", "job_spec": {"worker_pool_specs": [pool]}}
    created = client.create_custom_job(parent=PARENT, custom_job=job)
    return wait_for_state(client, created.name, timeout=120)


@pytest.fixture
def service(
    fake_gcs: FakeGcs, private_jobservice: Callable[..., JobServiceProcess], tmp_path: Path
) -> JobServiceProcess:
    """A JobService whose package index is a folder of two wheels: tinydep, which requires tinydep2."""
    index = tmp_path / "index"
    make_wheel(index, "tinydep", requires=("tinydep2>=2",))
    make_wheel(index, "tinydep2", "2.1")
    return private_jobservice("--storage-emulator-host", fake_gcs.url, "--package-index", str(index))


def test_a_package_runs_with_its_requirements_fetched_as_vertexs_pip_fetches_them(
    service: JobServiceProcess, fake_gcs: FakeGcs, tmp_path: Path
):
    """Issue 40, point 9: the package's requirement and that one's own requirement come from the index into the
    package's folder; the module imports both. (Installed with --no-deps, as before, the import failed.)"""
    witness = tmp_path / "imported.txt"
    code = "import sys\nimport tinydep, tinydep2\nopen(sys.argv[1], 'w').write(tinydep.NAME + ' ' + tinydep2.NAME)\n"
    uri = upload(fake_gcs, sdist("uses_dep", package(code, ["tinydep"])))

    done = run_package(service, uri, str(witness))

    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error.message
    assert witness.read_text() == "tinydep tinydep2"


def test_code_the_executors_python_cannot_run_fails_the_job_naming_the_file_and_line(
    service: JobServiceProcess, fake_gcs: FakeGcs
):
    """Issue 40, point 10: the JobService's Python (3.11 or later) would run `except*`; the executor's 3.10 would
    not, so the job fails before any node starts."""
    code = "try:\n    pass\nexcept* ValueError:\n    pass\n"
    uri = upload(fake_gcs, sdist("uses_dep", package(code, [])))

    done = run_package(service, uri)

    assert done.state == JobState.JOB_STATE_FAILED
    assert f"{uri} cannot run on the executor's Python 3.10: uses_dep/train.py, line 4: Exception groups" in (
        done.error.message
    )
