"""Packages verified at intake (issue 38, point 5): a content-addressed package URI (`…/sha256-<hex>/<file>`, as
`trainctl submit --source` names them) promises its bytes, so the controller reads each such object before the
claim and compares its sha256 with its name; a request whose package is not what its name says is rejected before
`code_digest` is written anywhere. What was read (generation, CRC32C, size) goes into the `accepted` event and the
ledger record, naming exactly the object verified. A URI that is not content-addressed is not read, and its
request's code_digest stays None: unverified (README, "Your own code").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from functions.cloud.gcs import ObjectDigest, StorageError, TooLarge
from functions.cloud.ports import Storage
from schemas.events import CodeObject
from schemas.request import TrainingJobRequest, package_digest
from schemas.rules import split_gs_uri

# What the controller reads of one request's packages, in all. `trainctl submit --source` packs at most 100 MiB of
# files (trainctl/source_package.py MAX_SOURCE_BYTES); an archive is that plus tar headers and gzip's framing.
MAX_PACKAGE_BYTES = 128 * 2**20


@dataclass(frozen=True)
class PackageCheck:
    errors: list[str] = field(default_factory=list)  # one `trainer.python_package.uris[i]: …` line per problem
    objects: list[CodeObject] = field(default_factory=list)  # the verified ones, in install order


def check_packages(gcs: Storage, request: TrainingJobRequest, max_bytes: int = MAX_PACKAGE_BYTES) -> PackageCheck:
    """Read every content-addressed package of the request (at most `max_bytes` in all) and compare. A missing,
    unreadable, oversized or mismatched one is an error naming its field; a transient failure raises Transient (the
    delivery is tried again)."""
    package = request.trainer.python_package
    if package is None:
        return PackageCheck()
    errors, objects, left = [], [], max_bytes
    for index, uri in enumerate(package.uris):
        expected = package_digest(uri)
        if expected is None:
            continue  # not content-addressed: nothing promised, nothing to compare (code_digest stays None)
        where = f"trainer.python_package.uris[{index}]"
        bucket, name = split_gs_uri(uri)
        try:
            found = gcs.digest(bucket, name, left)
        except TooLarge:
            errors.append(
                f"{where}: {uri} is larger than the {left:,} bytes left of the {max_bytes:,} the controller reads of "
                "one request's packages; `trainctl submit --source` packs at most 100 MiB: package the code only, "
                "and put data in the dataset's bucket"
            )
            continue
        except StorageError as exc:
            errors.append(
                f"{where}: {uri} cannot be read by trainctl's controller (Cloud Storage answered {exc.status}); its "
                f"service account needs storage.objects.get on gs://{bucket}"
            )
            continue
        if found is None:
            errors.append(
                f"{where}: {uri} does not exist; upload the package first (`trainctl submit --source DIR` does it and "
                "fills the URI)"
            )
            continue
        left -= found.size
        if (problem := digest_problem(where, uri, expected, found)) is not None:
            errors.append(problem)
        else:
            objects.append(code_object(uri, found))
    return PackageCheck(errors, objects)


def digest_problem(where: str, uri: str, expected: str, found: ObjectDigest) -> str | None:
    """Pure: the error for an object whose bytes are not the ones its name promises; None when they are."""
    if found.sha256 == expected:
        return None
    return (
        f"{where}: {uri} is not the package its name says: the name promises sha256:{expected}, the object "
        f"(generation {found.generation}, crc32c {found.crc32c or 'not stated'}, {found.size:,} bytes) is "
        f"sha256:{found.sha256}: someone else's upload or a damaged one, so it is not run. Ask the bucket's owner to "
        "inspect and delete it, then upload your code again with `trainctl submit --source DIR`"
    )


def code_object(uri: str, found: ObjectDigest) -> CodeObject:
    return CodeObject(uri=uri, generation=str(found.generation), crc32c=found.crc32c, size=found.size)
