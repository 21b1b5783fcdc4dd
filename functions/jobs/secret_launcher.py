"""trainctl's secret launcher: the program in front of your own code on every node of a request with
`trainer.secret_env` (issue 40, point 7). It is never imported by the controller: the planner ships this file's
source into the job (functions/jobs/secret_env.py), as `python3 -c <source> --exec COMMAND…` before a custom image's
command, or installed from a package as `python -m trainctl_secret_env --module MODULE ARGS…` for a python_package.

On the node it reads TRAINCTL_SECRET_ENV (a JSON object NAME → projects/P/secrets/S/versions/N, names only), takes
an access token for the job's own service account from the metadata server (GCE_METADATA_HOST, as google-auth reads
it, else metadata.google.internal: google/auth/compute_engine/_metadata.py), reads each version with Secret Manager's
REST method `GET https://secretmanager.googleapis.com/v1/{name}:access` (its `payload.data` base64, `dataCrc32c` an
int64 in a JSON string: cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access and
SecretPayload), checks each value's CRC32C, and then replaces itself (exec) with your program, whose environment
alone holds the values. It logs names and resource names, never a value. It fails the node, naming the secret and
the account, when one cannot be read.

Plain Python 3.8+ and its standard library only: it runs on whatever python3 your image or executor has. No dollar
sign may appear in this file: Vertex expands a dollar-sign reference to a variable in a container's command
(env_var.proto), and the source is one of its words.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

SECRET_ENV_VAR = "TRAINCTL_SECRET_ENV"
ENDPOINT_VAR = "TRAINCTL_SECRET_MANAGER_ENDPOINT"  # only the local stack sets it: its Secret Manager stand-in
DEFAULT_ENDPOINT = "https://secretmanager.googleapis.com"
METADATA_HOST_VAR = "GCE_METADATA_HOST"
DEFAULT_METADATA_HOST = "metadata.google.internal"
ATTEMPTS = 5  # a metadata server or an API that answers 429 or 5xx is tried again, waiting 1, 2, 4, 8 s
TIMEOUT = 30


class LaunchError(Exception):
    """A secret cannot be set; the message names it (never its value) and what to do."""


def _crc32c_table() -> list:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum Secret Manager states for a payload."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _log(severity: str, message: str, **fields: object) -> None:
    print(json.dumps(dict(severity=severity, message=message, **fields)), file=sys.stderr, flush=True)


def _get(url: str, headers: dict) -> bytes:
    """GET with the retries every Google API asks for on 429 and 5xx; other HTTP errors are raised at once."""
    for attempt in range(ATTEMPTS):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            if (error.code != 429 and error.code < 500) or attempt == ATTEMPTS - 1:
                raise
        except (urllib.error.URLError, OSError):
            if attempt == ATTEMPTS - 1:
                raise
        time.sleep(2**attempt)
    raise AssertionError("unreachable")


def _metadata(env: dict, path: str) -> bytes:
    host = env.get(METADATA_HOST_VAR) or DEFAULT_METADATA_HOST
    url = "http://" + host + "/computeMetadata/v1/instance/service-accounts/default/" + path
    return _get(url, {"Metadata-Flavor": "Google"})


def access_token(env: dict) -> str:
    try:
        return str(json.loads(_metadata(env, "token"))["access_token"])
    except (OSError, ValueError, KeyError) as error:
        raise LaunchError(
            "cannot take the job's credentials from the metadata server (" + type(error).__name__ + "): the job runs "
            "with no service account Vertex can give it"
        ) from None


def account(env: dict) -> str:
    """The job's account, for messages only."""
    try:
        return _metadata(env, "email").decode().strip() or "the job's service account"
    except (OSError, ValueError):
        return "the job's service account"


def _google_error(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read() or b"{}").get("error") or {}
        return str(body.get("status") or error.code) + ": " + str(body.get("message") or error.reason)
    except ValueError:
        return str(error.code) + ": " + str(error.reason)


def access(env: dict, token: str, name: str, resource: str) -> str:
    """The value of `resource` for the variable `name`, checked; raises LaunchError saying why not."""
    url = (env.get(ENDPOINT_VAR) or DEFAULT_ENDPOINT).rstrip("/") + "/v1/" + resource + ":access"
    try:
        answer = json.loads(_get(url, {"Authorization": "Bearer " + token}))
    except urllib.error.HTTPError as error:
        said = _google_error(error)
        if error.code in (403, 404):
            raise LaunchError(
                "secret_env " + name + ": " + account(env) + " cannot read " + resource + " (" + said + "). The job "
                "reads it as its own service account, which needs roles/secretmanager.secretAccessor on the secret "
                "(Terraform: job_secrets), and the version must exist and be enabled"
            ) from None
        raise LaunchError("secret_env " + name + ": Secret Manager refused " + resource + " (" + said + ")") from None
    except (OSError, ValueError) as error:
        raise LaunchError(
            "secret_env " + name + ": cannot reach Secret Manager for " + resource + " (" + type(error).__name__ + ")"
        ) from None
    payload = answer.get("payload") or {}
    try:
        data = base64.b64decode(payload.get("data") or "", validate=True)
    except ValueError:
        raise LaunchError("secret_env " + name + ": " + resource + " answered a payload that is not base64") from None
    stated = payload.get("dataCrc32c")
    if stated is not None and int(stated) != crc32c(data):
        raise LaunchError("secret_env " + name + ": " + resource + " arrived damaged (its CRC32C does not match)")
    try:
        value = data.decode("utf-8")
    except UnicodeDecodeError:
        raise LaunchError("secret_env " + name + ": " + resource + " is not UTF-8 text") from None
    if "\x00" in value:
        raise LaunchError("secret_env " + name + ": " + resource + " holds a NUL byte, which no variable can hold")
    return value


def resolve(env: dict) -> dict:
    """NAME → value for every reference in TRAINCTL_SECRET_ENV."""
    try:
        references = json.loads(env.get(SECRET_ENV_VAR) or "{}")
    except ValueError:
        raise LaunchError(SECRET_ENV_VAR + " is not a JSON object") from None
    if not isinstance(references, dict):
        raise LaunchError(SECRET_ENV_VAR + " is not a JSON object")
    if not references:
        return {}
    token = access_token(env)
    values = {}
    for name in sorted(references):
        values[name] = access(env, token, name, str(references[name]))
        _log("INFO", "secret_env: set " + name + " from " + str(references[name]), variable=name)
    return values


def command(argv: list) -> list:
    """What to run: `--exec PROGRAM ARGS…` (a custom image's command) or `--module MODULE ARGS…` (a package's)."""
    if len(argv) >= 2 and argv[0] == "--exec":
        return list(argv[1:])
    if len(argv) >= 2 and argv[0] == "--module":
        return [sys.executable, "-m", *argv[1:]]
    raise LaunchError("usage: --exec PROGRAM [ARGS…] | --module MODULE [ARGS…]")


def main(argv: list) -> int:
    try:
        program = command(argv)
        env = dict(os.environ)
        values = resolve(env)
    except LaunchError as error:
        _log("ERROR", str(error))
        return 1
    for variable in (SECRET_ENV_VAR, ENDPOINT_VAR):
        env.pop(variable, None)
    env.update(values)
    sys.stdout.flush()
    try:
        os.execvpe(program[0], program, env)
    except OSError as error:
        _log("ERROR", "cannot run " + program[0] + ": " + str(error))
        return 127
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
