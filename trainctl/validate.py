"""`trainctl validate FILE...` and `trainctl schema [request|event]`: the contract, checked offline."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from functions.intake.triggers import explicit_id_problem
from functions.jobs.executors import executor_of, executor_problems, executor_warnings
from functions.settings import Settings
from functions.untrusted.documents import DocumentInvalid, load_document
from local.names import Names
from schemas.errors import FieldError, RequestInvalid, parse_request
from schemas.export import event_schema, render, request_schema
from schemas.request import TrainingJobRequest
from trainctl.context import cli_settings
from trainer.data.column_flags import named_features

if TYPE_CHECKING:
    from trainctl.source_package import SourceArchive

EXIT_INVALID = 2


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("validate", help="check job request files (YAML or JSON) against trainctl/v1")
    cmd.add_argument("files", nargs="+", type=Path, metavar="FILE")
    cmd.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="with one FILE: pack DIR as `submit --source` would (nothing is uploaded) and say what pip installs with "
        "it on every node, what of the executor's torch and CUDA that would replace, and whether the executor's "
        "Python (3.10) runs its code",
    )
    cmd.set_defaults(run=run_validate)

    cmd = commands.add_parser("schema", help="print the JSON Schema of a request or of an event")
    cmd.add_argument("kind", nargs="?", choices=("request", "event"), default="request")
    cmd.set_defaults(run=run_schema)


def load_request_file(path: Path, package_uris: list[str] | None = None) -> TrainingJobRequest:
    """Read and validate one request file; raises RequestInvalid naming every problem. A file names its own
    request id, so the ids reserved for marker uploads are refused here as the controller would. `package_uris`
    (from `submit --source`) fill the file's `trainer.python_package.uris`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RequestInvalid([FieldError("", f"cannot read the file: {exc.strerror}")]) from None
    try:
        document = load_document(raw, max_bytes=max(len(raw), 1))
    except DocumentInvalid as exc:
        raise RequestInvalid([FieldError("", str(exc))]) from None
    if document is None:
        raise RequestInvalid([FieldError("", "the file is empty: a request names api_version, request_id, dataset, …")])
    if package_uris is not None:
        package = (document.get("trainer") or {}).get("python_package") if isinstance(document, dict) else None
        if not isinstance(package, dict):
            where = "trainer.python_package"
            raise RequestInvalid([FieldError(where, "--source needs a python_package block with module and executor")])
        package["uris"] = package_uris
    try:
        request = parse_request(document)
    except RequestInvalid as exc:
        raise RequestInvalid([_with_source_hint(error) for error in exc.errors]) from None
    if reserved := explicit_id_problem(request.request_id):
        raise RequestInvalid([FieldError("request_id", reserved)])
    return request


def _with_source_hint(error: FieldError) -> FieldError:
    """A package request's missing uris are what `--source DIR` fills: say so where the file is checked."""
    if error.path == "trainer.python_package.uris" and error.message == "required field is missing":
        return FieldError(error.path, "required field is missing; `--source DIR` fills it from your code's folder")
    return error


def run_validate(args: argparse.Namespace) -> int:
    if args.source is not None:
        if len(args.files) != 1:
            print("--source checks one request file's package: name one FILE")
            return EXIT_INVALID
        return validate_source(args.files[0], args.source)
    status, checked = 0, 0
    # The deployment's executors (the local stack's defaults without one): a package's executor as admission judges it.
    settings = cli_settings(offline=True)
    today = datetime.now(UTC).date()
    for path in args.files:
        if path.is_dir():  # `validate examples/*` names the folders beside the files: skip them, say so
            print(f"{path}/: a folder, skipped")
            continue
        checked += 1
        try:
            request = load_request_file(path)
            if problems := executor_problems(request, settings.executors, today=None):
                raise RequestInvalid(problems)
        except RequestInvalid as exc:
            status = EXIT_INVALID
            print(f"{path}: invalid ({len(exc.errors)} error{'s' if len(exc.errors) != 1 else ''})")
            for error in exc.errors:
                print(f"  {error}")
        else:
            print(f"{path}: ok")
            warnings = executor_warnings(request, settings.executors, today) + named_features(request.dataset.features)
            for warning in warnings:
                print(f"  warning: {warning}")
    if not checked:
        print("no request file among the arguments: name YAML or JSON files")
        return EXIT_INVALID
    return status


def validate_source(path: Path, folder: Path) -> int:
    """`validate FILE --source DIR`: the request with DIR's package in it, and the package as the executor sees it."""
    from functions.untrusted.package_code import PackageCodeError
    from trainctl.source_package import SourceError, build_source_archive, inspect_source

    settings = cli_settings(offline=True)
    try:
        archive = build_source_archive(folder)
        request = load_request_file(path, [pending_package_uri(settings, archive)])
        if problems := executor_problems(request, settings.executors, today=None):
            raise RequestInvalid(problems)
        report = inspect_source(archive, executor_of(request, settings.executors))
    except (SourceError, PackageCodeError) as exc:
        print(f"{folder}: {exc}")
        return EXIT_INVALID
    except RequestInvalid as exc:
        print(f"{path}: invalid ({len(exc.errors)} error{'s' if len(exc.errors) != 1 else ''})")
        for error in exc.errors:
            print(f"  {error}")
        return EXIT_INVALID
    print("\n".join(report.lines))
    for problem in report.problems:
        print(f"{folder}: {problem}")
    if report.problems:
        print(f"{folder}: the executor cannot run this code")
        return EXIT_INVALID
    print(f"{path}: ok, with {folder} as its package")
    for warning in executor_warnings(request, settings.executors, datetime.now(UTC).date()):
        print(f"  warning: {warning}")
    return 0


def pending_package_uri(settings: Settings, archive: SourceArchive) -> str:
    """Where `submit --source` would upload the archive (its default bucket: the first allowed data bucket, else the
    deployment's data bucket); nothing is uploaded here."""
    bucket = next(iter(settings.allowed_data_buckets), None) or Names(settings.project).data_bucket
    return f"gs://{bucket}/{archive.object_name()}"


def run_schema(args: argparse.Namespace) -> int:
    print(render(request_schema() if args.kind == "request" else event_schema()), end="")
    return 0
