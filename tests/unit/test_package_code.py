"""What a package holds, read without running it (issue 40, points 9 and 10): its requirements from a source
distribution's pyproject.toml, setup.cfg, a literal setup.py list or PKG-INFO, or a wheel's METADATA; what of the
executor's torch and CUDA they would replace; and code or wheels the executor's Python 3.10 cannot run, named by
file and line."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from functions.untrusted.package_code import PackageCode, executor_warnings, torch_verdict
from functions.untrusted.python_fit import wheel_problem

PY310 = (3, 10)


def sdist(files: dict[str, str], root: str = "my_pkg-0.1") -> PackageCode:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return PackageCode.from_archive(f"{root}.tar.gz", buffer.getvalue())


def wheel(filename: str, files: dict[str, str]) -> PackageCode:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return PackageCode.from_archive(filename, buffer.getvalue())


CODE = {"my_pkg/__init__.py": "", "my_pkg/train.py": "print('hi')\n"}


@pytest.mark.parametrize(
    ("files", "found", "where"),
    [
        (
            {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["numpy>=1.26", "requests"]\n'},
            ("numpy>=1.26", "requests"),
            "pyproject.toml [project] dependencies",
        ),
        (
            {
                "pyproject.toml": '[project]\nname = "p"\ndynamic = ["dependencies"]\n'
                '[tool.setuptools.dynamic]\ndependencies = {file = ["requirements.txt"]}\n',
                "requirements.txt": "# pinned\nnumpy==2.0  # comment\n-r other.txt\n\nscipy\n",
            },
            ("numpy==2.0", "scipy"),
            "pyproject.toml [tool.setuptools.dynamic] dependencies (requirements.txt)",
        ),
        (
            {"setup.cfg": "[options]\ninstall_requires =\n    pandas>=2\n    pyarrow\n", "setup.py": "setup()\n"},
            ("pandas>=2", "pyarrow"),
            "setup.cfg [options] install_requires",
        ),
        (
            {"setup.py": "from setuptools import setup\nsetup(name='p', install_requires=['einops', 'torch>=2.6'])\n"},
            ("einops", "torch>=2.6"),
            "setup.py install_requires (a literal list, read without running it)",
        ),
        (
            {"PKG-INFO": "Metadata-Version: 2.2\nName: p\nVersion: 1\nRequires-Dist: six\n"},
            ("six",),
            "PKG-INFO Requires-Dist",
        ),
        ({"pyproject.toml": '[project]\nname = "p"\n'}, (), "pyproject.toml [project] declares none"),
    ],
)
def test_a_source_distributions_requirements_are_read_as_a_build_would_declare_them(files, found, where):
    requirements = sdist(CODE | files).requirements()
    assert (requirements.found, requirements.where, requirements.unknown) == (found, where, None)


def test_requirements_setup_py_computes_are_unknown_and_it_is_never_run(tmp_path):
    """Reading setup.py never runs it: a computed list is said to be unknown, and how to declare it instead."""
    witness = tmp_path / "ran"
    setup = f"import pathlib\npathlib.Path({str(witness)!r}).touch()\n"
    setup += "setup(install_requires=open('r.txt').read().split())\n"
    requirements = sdist(CODE | {"setup.py": setup}).requirements()
    assert requirements.found == () and "setup.py computes install_requires" in str(requirements.unknown)
    assert not witness.exists()


def test_a_wheels_requirements_are_its_metadatas():
    metadata = "Metadata-Version: 2.1\nName: w\nVersion: 1\nRequires-Dist: numpy\nRequires-Dist: rich; extra == 'cli'\n"
    requirements = wheel("w-1-py3-none-any.whl", {"w/__init__.py": "", "w-1.dist-info/METADATA": metadata})
    assert requirements.requirements().found == ("numpy", "rich; extra == 'cli'")


@pytest.mark.parametrize(
    ("requirement", "verdict"),
    [
        ("torch", "keeps"),
        ("torch>=2.0", "keeps"),
        ("torch>=2.4,<2.5", "keeps"),
        ("torch==2.4.*", "keeps"),
        ("torch~=2.4.0", "keeps"),
        ("torch>=2.6", "replaces"),
        ("torch<2.4", "replaces"),
        ("torch==2.4.1", "may replace"),
        ("torch @ https://example.com/torch.whl", "may replace"),
        ("torch>=2.5.0rc1", "may replace"),
    ],
)
def test_whether_pip_keeps_the_executors_torch(requirement, verdict):
    """pip keeps an installed torch that satisfies the requirement: the executor's 2.4 is some 2.4.x."""
    assert torch_verdict(requirement, "2.4") == verdict


def test_requirements_that_would_replace_the_executors_torch_or_cuda_are_named():
    found = executor_warnings(
        ["torch>=2.6", "numpy", "torchvision==0.21", "torchaudio", "nvidia-cudnn-cu12", "torch; extra == 'gpu'"],
        "2.4",
        "12.x",
        "pytorch-2.4",
    )
    assert [warning.split(":", 1)[0] for warning in found] == ["torch>=2.6", "torchvision==0.21", "nvidia-cudnn-cu12"]
    assert found[0].startswith(
        "torch>=2.6: the executor pytorch-2.4 holds PyTorch 2.4 (CUDA 12.x); pip on every node replaces it with "
        "PyPI's torch"
    )


def test_code_the_executors_python_cannot_parse_is_named_by_file_and_line():
    """Issue 40, point 10: the executors run Python 3.10; syntax of later versions is refused with file and line."""
    code = sdist(
        CODE
        | {
            "my_pkg/groups.py": "try:\n    pass\nexcept* ValueError:\n    pass\n",
            "my_pkg/generic.py": "def first[T](items: list[T]) -> T:\n    return items[0]\n",
            "my_pkg/fine.py": "match x:\n    case 1:\n        pass\n",  # 3.10 has match
        }
    )
    assert code.python_problems(PY310) == [
        "my_pkg/generic.py, line 1: expected '(' (the executor runs Python 3.10)",
        "my_pkg/groups.py, line 4: Exception groups are only supported in Python 3.11 and greater (the executor runs "
        "Python 3.10)",
    ]
    assert sdist(CODE).python_problems(PY310) == []


def test_standard_library_names_newer_than_the_executors_python_are_warned_unless_guarded():
    code = sdist(
        CODE
        | {
            "my_pkg/config.py": "import tomllib\nfrom datetime import UTC, datetime\n",
            "my_pkg/guarded.py": "try:\n    import tomllib\nexcept ImportError:\n    import tomli as tomllib\n"
            "import sys\nif sys.version_info >= (3, 11):\n    from typing import Self\n",
        }
    )
    assert code.python_warnings(PY310) == [
        "my_pkg/config.py, line 1: tomllib is new in Python 3.11; the executor runs Python 3.10, where this import "
        "fails",
        "my_pkg/config.py, line 2: datetime.UTC is new in Python 3.11; the executor runs Python 3.10, where this "
        "import fails",
    ]


@pytest.mark.parametrize(
    ("filename", "fits"),
    [
        ("pkg-1.0-py3-none-any.whl", True),
        ("pkg-1.0-py2.py3-none-any.whl", True),
        ("pkg-1.0-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("pkg-1.0-cp38-abi3-manylinux_2_28_x86_64.whl", True),
        ("pkg-1.0-py310-none-any.whl", True),
        ("pkg-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", False),
        ("pkg-1.0-py312-none-any.whl", False),
        ("pkg-1.0-cp312-abi3-manylinux_2_28_x86_64.whl", False),
        ("pkg-1.0-cp310-cp310-macosx_11_0_arm64.whl", False),
        ("pkg-1.0-cp310-cp310-musllinux_1_2_x86_64.whl", False),
    ],
)
def test_a_wheel_fits_the_executor_by_its_tags(filename, fits):
    """PEP 425/427 tags: CPython 3.10 on glibc Linux x86-64 takes py3/py3x≤10, cp310, abi3 wheels of cp3x≤10."""
    problem = wheel_problem(filename, PY310)
    assert (problem is None) == fits, problem
    if not fits:
        assert problem.startswith(f"{filename}: built for ")
