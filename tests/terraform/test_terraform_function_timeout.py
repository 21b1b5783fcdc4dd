"""The local functions run with the timeout Terraform gives the deployed ones, and Pub/Sub waits as long."""

from __future__ import annotations

from tfconfig import block

from functions.settings import Settings
from local import stack
from local.functions_host import FUNCTION_TIMEOUT_SECONDS, function_environment
from local.names import Names


def test_terraform_settings_and_local_stack_share_one_function_timeout(tf):
    """Guards issue 12 point 5 (local side): one number, Terraform's default, everywhere."""
    assert tf.variables["function_timeout_seconds"]["default"] == FUNCTION_TIMEOUT_SECONDS == Settings.function_timeout
    function = tf.resource("google_cloudfunctions2_function", "function")
    assert block(function, "service_config")["timeout_seconds"] == "${var.function_timeout_seconds}"
    assert tf.locals["controller_settings"]["TRAINCTL_FUNCTION_TIMEOUT"] == "${tostring(var.function_timeout_seconds)}"
    push = tf.resource("google_pubsub_subscription", "on_job_request")
    assert push["ack_deadline_seconds"] == "${var.function_timeout_seconds}"
    assert stack.PUSH_ACK_DEADLINE_SECONDS == FUNCTION_TIMEOUT_SECONDS


def test_local_functions_get_the_timeout_as_functions_framework_and_the_handlers_read_it():
    """Guards issue 12 point 5 (local side): functions-framework reads CLOUD_RUN_TIMEOUT_SECONDS (gunicorn's
    timeout), the handlers TRAINCTL_FUNCTION_TIMEOUT; both carry the function's timeout."""
    default = function_environment({})
    assert default["CLOUD_RUN_TIMEOUT_SECONDS"] == default["TRAINCTL_FUNCTION_TIMEOUT"] == str(FUNCTION_TIMEOUT_SECONDS)
    chosen = function_environment({"TRAINCTL_FUNCTION_TIMEOUT": "5m"})
    assert chosen["CLOUD_RUN_TIMEOUT_SECONDS"] == chosen["TRAINCTL_FUNCTION_TIMEOUT"] == "300"
    settings = stack.controller_settings(stack.StackOptions(), Names("p", "trainctl"), "127.0.0.1:1")
    assert settings["TRAINCTL_FUNCTION_TIMEOUT"] == str(FUNCTION_TIMEOUT_SECONDS)
