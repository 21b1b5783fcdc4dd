"""The executors list as Terraform sets it (issue 40, point 8): the operator's `executors` reaches the controller as
TRAINCTL_EXECUTORS in the shape Settings reads, unset by default (Google's list), validated at plan time; the local
stack passes its own list the same way."""

from __future__ import annotations

import json

from functions.settings import Settings
from local import stack
from local.names import Names
from schemas.executors import EXECUTORS


def test_the_operators_executors_reach_the_controller_as_json_and_default_to_googles_list(tf):
    settings = tf.locals["controller_settings"]
    assert settings["TRAINCTL_EXECUTORS"] == '${var.executors == null ? "" : jsonencode(var.executors)}'
    variable = tf.variables["executors"]
    assert variable["default"] is None
    for key in ("image", "pytorch", "cuda", "max_compute_capability", "available_until", "python"):
        assert key in variable["type"], key
    [validation] = variable["validation"]
    for rule in ("available_until", "us-docker", ":latest", "max_compute_capability"):
        assert rule in validation["condition"], rule


def test_the_local_stack_passes_its_executors_as_terraform_does():
    names = Names("p", "trainctl")
    plain = Settings.from_env(stack.controller_settings(stack.StackOptions(), names, "http://127.0.0.1:1"))
    assert plain.executors == EXECUTORS
    listed = {
        "pytorch-2.4": {
            "image": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
            "pytorch": "2.4",
            "cuda": "12.x",
            "max_compute_capability": "9.0",
            "available_until": "9999-12-31",
        }
    }
    options = stack.StackOptions(executors=listed)
    given = Settings.from_env(stack.controller_settings(options, names, "http://127.0.0.1:1"))
    assert given.executors["pytorch-2.4"].available_until.year == 9999
    assert json.loads(stack.controller_settings(options, names, "http://127.0.0.1:1")["TRAINCTL_EXECUTORS"]) == listed
