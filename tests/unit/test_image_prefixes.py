"""Allow-list prefixes match images at a path boundary; the settings read them normalised and refuse ones that
could never match as meant; the trainer's repository is its image's path without the last component."""

from __future__ import annotations

import pytest

from functions.settings import Settings, SettingsError
from schemas.images import normalize_prefix, prefix_covers, prefix_problem, repository_of

DIGEST = "sha256:" + "3f" * 32
OTHER_DIGEST = "sha256:" + "4e" * 32


@pytest.mark.parametrize(
    ("prefix", "image", "covered"),
    [
        # a folder, with or without its trailing '/': what is below it, never a sibling that shares letters
        ("us-docker.pkg.dev/partner/repo", "us-docker.pkg.dev/partner/repo/trainer:1", True),
        ("us-docker.pkg.dev/partner/repo", "us-docker.pkg.dev/partner/repo-evil/miner:1", False),
        ("us-docker.pkg.dev/partner/repo/", "us-docker.pkg.dev/partner/repo-evil/miner:1", False),
        ("us-docker.pkg.dev/partner/repo", "us-docker.pkg.dev/partner/repository/miner:1", False),
        ("us-docker.pkg.dev/partner/repo/", "us-docker.pkg.dev/partner/repo/team/trainer@" + DIGEST, True),
        # the image the folder's path names itself, under any tag or digest
        ("us-docker.pkg.dev/partner/repo", "us-docker.pkg.dev/partner/repo", True),
        ("docker.io/library/python", "docker.io/library/python:3.11", True),
        ("docker.io/library/python/", "docker.io/library/python@" + DIGEST, True),
        ("docker.io/library/python", "docker.io/library/python3:1", False),
        # a full image (a tag or a digest after its last '/'): that image only
        ("gcr.io/p/trainer:1", "gcr.io/p/trainer:1", True),
        ("gcr.io/p/trainer:1", "gcr.io/p/trainer:10", False),
        ("gcr.io/p/trainer:1", "gcr.io/p/trainer:1@" + DIGEST, False),
        ("gcr.io/p/trainer@" + DIGEST, "gcr.io/p/trainer@" + DIGEST, True),
        ("gcr.io/p/trainer@" + DIGEST, "gcr.io/p/trainer@" + OTHER_DIGEST, False),
        ("gcr.io/p/trainer@" + DIGEST, "gcr.io/p/trainer:latest", False),
        # a registry: its images, not another host or port that starts with the same letters
        ("us-docker.pkg.dev", "us-docker.pkg.dev/anyone/x:1", True),
        ("us-docker.pkg.dev/", "us-docker.pkg.dev.evil.example/x:1", False),
        ("us-docker.pkg.dev", "us-docker.pkg.dev.evil.example/x:1", False),
        ("localhost:5000", "localhost:5000/x:1", True),
        ("localhost:5000", "localhost:50001/x:1", False),
        ("localhost", "localhost:5000/x:1", False),
    ],
)
def test_a_prefix_covers_an_image_only_at_a_path_boundary(prefix, image, covered):
    """Guards issue 24, point 2: `…/partner/repo` admitted `…/partner/repo-evil/miner:1` by plain startswith."""
    assert prefix_covers(prefix, image) is covered


@pytest.mark.parametrize(
    ("prefix", "normalized"),
    [
        ("us-docker.pkg.dev/partner/repo", "us-docker.pkg.dev/partner/repo/"),
        ("us-docker.pkg.dev/partner/repo/", "us-docker.pkg.dev/partner/repo/"),
        ("us-docker.pkg.dev", "us-docker.pkg.dev/"),
        ("localhost:5000", "localhost:5000/"),
        ("gcr.io/p/trainer:1", "gcr.io/p/trainer:1"),
        ("gcr.io/p/trainer@" + DIGEST, "gcr.io/p/trainer@" + DIGEST),
    ],
)
def test_a_prefix_gets_a_trailing_slash_unless_it_is_a_full_image(prefix, normalized):
    """Guards issue 24, point 2."""
    assert normalize_prefix(prefix) == normalized
    assert prefix_problem(prefix) is None


@pytest.mark.parametrize(
    "prefix",
    [
        "https://us-docker.pkg.dev/p/",
        "us-docker.pkg.dev/p/*",
        "us-docker.pkg.dev/p/repo-*",
        "us-docker.pkg.dev/p/my repo/",
        "us-docker.pkg.dev/P/Repo/",
        "us-docker.pkg.dev/p/../q/",
        "us-docker.pkg.dev//p/",
        "us-docker.pkg.dev/p/repo-/",
        "/p/repo/",
    ],
)
def test_a_prefix_that_could_never_match_as_meant_is_refused(prefix):
    """Guards issue 24, point 2: a scheme, a wildcard, a space, upper case or `..` would silently match nothing
    (or, with `..`, step out of the folder); the operator hears why when the settings are read."""
    assert prefix_problem(prefix) is not None
    with pytest.raises(SettingsError, match=r"TRAINCTL_ALLOWED_IMAGE_PREFIXES: .*not an image prefix"):
        Settings.from_env(env(TRAINCTL_ALLOWED_IMAGE_PREFIXES=f"gcr.io/ok/,{prefix}"))


def env(**values: str) -> dict[str, str]:
    base = {
        "TRAINCTL_PROJECT": "p",
        "TRAINCTL_CONTROL_BUCKET": "p-control",
        "TRAINCTL_EVENTS_TOPIC": "events",
        "TRAINCTL_TRAINER_IMAGE": "us-central1-docker.pkg.dev/p/trainctl/trainer:latest",
    }
    return base | values


def test_settings_read_prefixes_normalised():
    """Guards issue 24, point 2: each entry is matched as the folder it names, once."""
    raw = " us-docker.pkg.dev/partner/repo , gcr.io/p/trainer:1,us-docker.pkg.dev/partner/repo/ "
    settings = Settings.from_env(env(TRAINCTL_ALLOWED_IMAGE_PREFIXES=raw))
    assert settings.allowed_image_prefixes == ("us-docker.pkg.dev/partner/repo/", "gcr.io/p/trainer:1")


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("us-central1-docker.pkg.dev/p/trainctl/trainer:latest", "us-central1-docker.pkg.dev/p/trainctl/"),
        ("us-central1-docker.pkg.dev/p/trainctl/trainer@" + DIGEST, "us-central1-docker.pkg.dev/p/trainctl/"),
        ("us-central1-docker.pkg.dev/p/trainctl/trainer:1@" + DIGEST, "us-central1-docker.pkg.dev/p/trainctl/"),
        ("localhost:5000/trainer:1", "localhost:5000/"),
        ("localhost/trainctl/trainer:latest", "localhost/trainctl/"),
        ("trainer:latest", None),  # no path, no repository: only the image itself is the built-in trainer's
    ],
)
def test_the_repository_of_an_image_is_its_path_without_the_last_component(image, repository):
    """Guards issue 24, point 1: everything in the trainer's repository runs only the built-in trainer."""
    assert repository_of(image) == repository
