"""Container image references: their grammar, the repository an image is in, and whether an allow-list prefix
covers an image. An allow-list prefix matches at a path boundary only (issue 24, point 2), so that
`us-docker.pkg.dev/partner/repo` covers `…/partner/repo/trainer:1` and never `…/partner/repo-evil/miner:1`.

The grammar is distribution/reference's (github.com/distribution/reference, reference.go: "reference := name
[':' tag] ['@' digest]", path components of lowercase letters and digits joined by `.`, `_`, `__` or dashes),
with the registry host required and written in lowercase. It refuses `..`, `//` and upper case in a path, so no
two spellings name one image and a prefix cannot be stepped out of. The patterns avoid backslashes (`[.]`, not
an escaped dot) so that Terraform's validation of `extra_allowed_image_prefixes` carries the very same text
(tests/terraform/test_terraform_image_prefixes.py compares them).
"""

from __future__ import annotations

import re

_DOMAIN_COMPONENT = "([a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9])"
_DOMAIN = f"{_DOMAIN_COMPONENT}([.]{_DOMAIN_COMPONENT})*(:[0-9]+)?"
_PATH_COMPONENT = "[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*"
_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

# A whole image reference as a request names it: registry host, at least one path component, tag and/or digest;
# IMAGE_RULE is what schemas/errors.py says when `trainer.image` does not match it.
IMAGE_PATTERN = f"^{_DOMAIN}(/{_PATH_COMPONENT})+(:{_TAG})?(@{_DIGEST})?$"
IMAGE_RULE = (
    "must be a container image URI such as us-docker.pkg.dev/my-project/repo/trainer:1.0 (a registry host, then "
    "lowercase path components, then an optional :tag and @digest)"
)
# An allow-list entry: a registry host with any number of path components (a trailing '/' optional), or a full
# image reference with a tag or a digest, which then allows that image alone.
PREFIX_PATTERN = f"^{_DOMAIN}((/{_PATH_COMPONENT})*/?|(/{_PATH_COMPONENT})+((:{_TAG})?@{_DIGEST}|:{_TAG}))$"
_PREFIX_RE = re.compile(PREFIX_PATTERN)


def prefix_problem(prefix: str) -> str | None:
    """Why an allow-list entry can never match as the operator meant, or None."""
    if _PREFIX_RE.fullmatch(prefix):
        return None
    return (
        f"{prefix!r} is not an image prefix: write a registry host and path such as us-docker.pkg.dev/my-project/repo/ "
        "(no scheme, no wildcards, no spaces, lowercase path components), or one full image with its :tag or @digest"
    )


def image_name(image: str) -> str:
    """The image without its tag and digest: `…/repo/trainer` for `…/repo/trainer:1@sha256:…`."""
    name = image.split("@", 1)[0]
    last_slash, last_colon = name.rfind("/"), name.rfind(":")
    return name[:last_colon] if last_colon > last_slash else name  # a colon before the last '/' is a port


def is_full_image(prefix: str) -> bool:
    """Whether an allow-list entry names one image (a tag or digest after its last '/') rather than a folder."""
    return "/" in prefix and image_name(prefix) != prefix


def normalize_prefix(prefix: str) -> str:
    """An allow-list entry as it is matched: a trailing '/' unless the operator wrote a full image, so that
    `…/partner/repo` means the folder `…/partner/repo/` and nothing that merely starts with the same letters."""
    return prefix if is_full_image(prefix) or prefix.endswith("/") else prefix + "/"


def prefix_covers(prefix: str, image: str) -> bool:
    """Whether `image` is allowed by the entry `prefix`: a full image only itself; a folder the images below it,
    and the image that the folder's path names itself (any tag or digest of it: `docker.io/library/python`
    covers `docker.io/library/python:3.11`)."""
    prefix = normalize_prefix(prefix)
    if is_full_image(prefix):
        return image == prefix
    return image.startswith(prefix) or image_name(image) == prefix[:-1]


def repository_of(image: str) -> str | None:
    """The repository an image is in: its path without the last component, with a trailing '/'
    (`us-central1-docker.pkg.dev/p/trainctl/` for `…/trainctl/trainer:latest` and `…/trainctl/trainer@sha256:…`);
    None for an image with no path."""
    name = image_name(image)
    return name.rsplit("/", 1)[0] + "/" if "/" in name else None
