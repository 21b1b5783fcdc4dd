"""A served function process carries the function timeout the way Cloud Run's would."""

from __future__ import annotations

from pathlib import Path

from local.functions_host import FUNCTION_TIMEOUT_SECONDS, start_function


def _environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


def test_functions_framework_is_started_with_the_terraform_timeout(tmp_path):
    """Guards issue 12 point 5 (local side): functions-framework reads CLOUD_RUN_TIMEOUT_SECONDS at start-up."""
    function = start_function("reconcile", {}, tmp_path)
    try:
        environ = _environ(function.process.pid)
    finally:
        function.stop()
    assert environ["CLOUD_RUN_TIMEOUT_SECONDS"] == str(FUNCTION_TIMEOUT_SECONDS)
    assert environ["TRAINCTL_FUNCTION_TIMEOUT"] == str(FUNCTION_TIMEOUT_SECONDS)
