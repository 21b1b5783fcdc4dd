"""The local executor installs a package's requirements as pip on Vertex's nodes would (issue 40, point 9; issue 31,
point 5 before it): what the executor holds at a fitting version is kept, the rest is fetched from the package index
(here a folder of wheels), round by round; the JobService's own packages are not the executor's; a requirement that
would replace the executor's torch is refused."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from local.jobservice.packages import (
    PackageError,
    executor_distributions,
    executor_python,
    executor_pytorch,
    install_requirements,
    unmet_requirements,
)

HELD = {"torch": "2.13.0", "numpy": "2.4.6", "filelock": "3.0"}  # an executor, as executor_distributions gives one


def installed(target: Path, name: str, requires: list[str], version: str = "1.0") -> None:
    """A distribution as pip leaves it in a --target folder: its dist-info METADATA."""
    info = target / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def make_wheel(folder: Path, name: str, version: str = "1.0", requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel, as a package index serves one: its module, METADATA, WHEEL and RECORD."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    metadata = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    )
    files = {
        f"{name}/__init__.py": f"NAME = {name!r}\n",
        f"{info}/METADATA": metadata + "\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{member},,\n" for member in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def test_what_the_executor_holds_at_a_fitting_version_is_kept_and_the_rest_is_wanted(tmp_path: Path):
    installed(
        tmp_path,
        "my_pkg",
        ["torch>=2", "numpy>=2", "numpy-extras", "filelock>=9", "helper-lib", "docs-only; extra == 'docs'"],
    )
    installed(tmp_path, "helper_lib", [])  # shipped beside it in python_package.uris

    assert unmet_requirements(tmp_path, HELD, "2.4") == ["numpy-extras", "filelock>=9"]


def test_markers_are_read_for_the_executors_python(tmp_path: Path):
    """tomli is wanted on Python 3.10 (the executor's), whatever Python runs the JobService."""
    installed(tmp_path, "my_pkg", ['tomli; python_version < "3.11"', 'exceptiongroup; python_version >= "3.11"'])
    assert unmet_requirements(tmp_path, HELD, "2.4", (3, 10)) == ["tomli"]


def test_a_requirement_that_would_replace_the_executors_torch_is_refused(tmp_path: Path):
    """Vertex's pip would install PyPI's torch over the executor's 2.4; the CPU stand-in cannot imitate that."""
    installed(tmp_path, "my_pkg", ["torch>=2.6", "nvidia-cublas-cu12"])
    with pytest.raises(PackageError, match=r"my_pkg requires torch>=2.6: the executor holds PyTorch 2.4"):
        unmet_requirements(tmp_path, HELD, "2.4")
    other = tmp_path / "other"
    installed(other, "my_pkg", ["torch>=2.4,<2.5", "nvidia-cublas-cu12", "triton"])
    assert unmet_requirements(other, HELD, "2.4") == []  # the executor's torch stands in; CUDA is not needed here


def test_the_jobservices_own_packages_are_not_the_executors():
    """The executor is torch and its companions with what they require; grpcio, pydantic and the Google clients
    that the JobService itself runs on are not."""
    held = executor_distributions()
    assert "torch" in held and "numpy" in held and "scikit-learn" in held
    assert not {"grpcio", "pydantic", "google-cloud-storage", "google-cloud-aiplatform", "pyyaml"} & set(held)


def test_requirements_are_fetched_from_the_index_round_by_round(tmp_path: Path):
    """The package's requirement and that requirement's own are fetched into the package folder, wheels only."""
    index = tmp_path / "index"
    make_wheel(index, "tinydep", requires=("tinydep2>=2",))
    make_wheel(index, "tinydep2", "2.1")
    target = tmp_path / "target"
    installed(target, "my_pkg", ["tinydep", "numpy"])

    install_requirements(target, "2.4", (3, 10), str(index), held=HELD)

    assert (target / "tinydep" / "__init__.py").exists() and (target / "tinydep2" / "__init__.py").exists()
    assert unmet_requirements(target, HELD, "2.4") == []
    assert not (target / "numpy").exists(), "the executor's numpy was fetched again"


def test_a_requirement_the_index_lacks_fails_naming_it(tmp_path: Path):
    target, empty = tmp_path / "target", tmp_path / "empty-index"
    installed(target, "my_pkg", ["no-such-distribution-anywhere>=3"])
    empty.mkdir()
    with pytest.raises(PackageError, match=r"requires no-such-distribution-anywhere>=3, which the executor does not"):
        install_requirements(target, "2.4", (3, 10), str(empty), held=HELD)


def test_the_executor_image_names_its_python_and_pytorch():
    image = "europe-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
    assert (executor_python(image), executor_pytorch(image)) == ((3, 10), "2.4")
