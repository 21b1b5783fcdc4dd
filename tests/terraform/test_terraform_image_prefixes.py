"""The image allow-list as Terraform sets it: the operator's prefixes only (the trainer's own repository is not
on it), each validated by the very pattern the controller reads them with."""

from __future__ import annotations

import re

from functions.settings import Settings
from local import stack
from local.names import LOCAL_TRAINER_IMAGE, Names
from schemas.images import PREFIX_PATTERN


def test_the_trainer_repository_is_not_on_the_image_allow_list(tf):
    """Guards issue 24, point 1: Terraform put `<trainer repository>/` on TRAINCTL_ALLOWED_IMAGE_PREFIXES, so the
    trainer's repository (the built-in image included) could run a request's own command."""
    settings = tf.locals["controller_settings"]
    assert settings["TRAINCTL_ALLOWED_IMAGE_PREFIXES"] == '${join(",", var.extra_allowed_image_prefixes)}'
    assert tf.variables["extra_allowed_image_prefixes"]["default"] == []


def test_the_local_stack_allows_only_the_prefixes_it_is_given():
    """Guards issue 24, point 1 (local side): the local stack put `localhost/trainctl/` on the allow-list too."""
    names = Names("p", "trainctl")
    plain = Settings.from_env(stack.controller_settings(stack.StackOptions(), names, "http://127.0.0.1:1"))
    assert plain.trainer_image == LOCAL_TRAINER_IMAGE and plain.allowed_image_prefixes == ()
    options = stack.StackOptions(allowed_image_prefixes=("localhost/tests",))
    given = Settings.from_env(stack.controller_settings(options, names, "http://127.0.0.1:1"))
    assert given.allowed_image_prefixes == ("localhost/tests/",)


def test_extra_allowed_image_prefixes_are_validated_with_the_controllers_pattern(tf):
    """Guards issue 24, point 2: an entry with a scheme, a wildcard or a space never matches as the operator meant;
    `terraform plan` refuses it with the same rule (RE2 reads this pattern as Python does: no backslashes, no
    look-arounds) that Settings.from_env applies."""
    [validation] = tf.variables["extra_allowed_image_prefixes"]["validation"]
    pattern = re.fullmatch(
        r'\$\{alltrue\(\[for p in var\.extra_allowed_image_prefixes : can\(regex\("(.*)", p\)\)\]\)\}',
        validation["condition"],
    )
    assert pattern is not None, validation["condition"]
    assert pattern[1] == PREFIX_PATTERN
    assert "\\" not in PREFIX_PATTERN and "(?" not in PREFIX_PATTERN
    for good in ("us-docker.pkg.dev/partner/repo", "us-docker.pkg.dev/partner/repo/", "gcr.io/p/trainer:1"):
        assert re.search(pattern[1], good), good
    for bad in ("https://us-docker.pkg.dev/p/", "us-docker.pkg.dev/p/*", "us-docker.pkg.dev/p/my repo", ""):
        assert not re.search(pattern[1], bad), bad
    assert "no scheme, no wildcards, no spaces" in validation["error_message"]
