"""Secret Manager and the nodes' metadata server, locally (issue 40, point 7): what trainctl's secret launcher
(functions/jobs/secret_launcher.py) calls on every node of a job with `trainer.secret_env`.

- Secret Manager's access method on the JobService's REST port, behind the same resource names
  (cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access):

      GET /v1/projects/P/secrets/S/versions/N:access  (Authorization: Bearer TOKEN)
        → {"name": "projects/P/secrets/S/versions/N", "payload": {"data": BASE64, "dataCrc32c": "INT64"}}

  A caller whose account may not read the secret, or a secret that does not exist, gets Google's 403
  PERMISSION_DENIED, "Permission 'secretmanager.versions.access' denied for resource '…' (or it may not exist)."
  (the text Google's API answers, as quoted in googleapis/python-secret-manager#389), so that nobody learns which
  secrets exist; a version that does not exist of a secret the caller may read is 404 NOT_FOUND (in this stand-in's
  own words). `latest` names the newest version, as Google's alias does. No token is 401 UNAUTHENTICATED.
- A metadata server per running job (MetadataServer), as every Vertex node has one, that hands out tokens for the
  job's own service account (CustomJobSpec.service_account; Vertex's Custom Code Service Agent,
  service-<project number>@gcp-sa-aiplatform-cc.iam.gserviceaccount.com, when the job names none:
  cloud.google.com/vertex-ai/docs/general/custom-service-account). Each node gets its address in GCE_METADATA_HOST
  (google-auth's variable, google/auth/compute_engine/_metadata.py), and TRAINCTL_SECRET_MANAGER_ENDPOINT, the
  launcher's, points at the stand-in. A token names its account, signed with a key of this process: only tokens
  this JobService handed out are taken.

The secrets, their versions and who may read them come from `--secrets-file` (`trainctl local up --secret`), which
the JobService reads once; the values live in its memory and that file only, and nothing here logs one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc

from functions.jobs.secret_launcher import ENDPOINT_VAR, METADATA_HOST_VAR, crc32c
from local.jobservice.model_rules import ProjectNumbers, project_numbers
from local.jobservice.rest import RestAbort, RestRequest, RestResponse, Route

log = logging.getLogger("local.jobservice")

_VERSION = r"projects/(?P<project>[^/]+)/secrets/(?P<secret>[^/]+)/versions/(?P<version>[^/:]+)"
TOKEN_PREFIX = "ya29.local-"
TOKEN_LIFETIME = 3599  # seconds, as the metadata server's tokens usually state


class SecretsFileError(ValueError):
    """--secrets-file is not what the JobService takes; the message names the entry."""


@dataclass
class Secret:
    versions: list[str]  # version N is versions[N - 1]
    accessors: set[str] = field(default_factory=set)  # service account emails with secretAccessor on it


class SecretStore:
    """The stand-in's secrets by name (projects/P/secrets/S), and the tokens it hands out and takes."""

    def __init__(self, secrets: Mapping[str, Secret] | None = None, numbers: ProjectNumbers | None = None):
        self.secrets = dict(secrets or {})
        self.numbers = numbers or project_numbers()
        self._key = os.urandom(32)

    @classmethod
    def load(cls, path: Path, numbers: ProjectNumbers | None = None) -> SecretStore:
        """`{"secrets": {"projects/P/secrets/S": {"versions": ["v1", …], "accessors": ["sa@…", …]}}}`."""
        try:
            document = json.loads(path.read_text())
            secrets = {
                str(name): Secret([str(v) for v in entry["versions"]], {str(a) for a in entry.get("accessors", [])})
                for name, entry in (document.get("secrets") or {}).items()
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise SecretsFileError(f"{path}: {type(error).__name__}: {error}") from None
        wrong = [name for name in secrets if not re.fullmatch(r"projects/[^/]+/secrets/[A-Za-z0-9_-]{1,255}", name)]
        if wrong:
            raise SecretsFileError(f"{path}: not secret names (projects/P/secrets/S): {', '.join(wrong)}")
        return cls(secrets, numbers)

    def token_for(self, account: str) -> str:
        encoded = base64.urlsafe_b64encode(account.encode()).decode().rstrip("=")
        return f"{TOKEN_PREFIX}{encoded}.{self._sign(account)}"

    def account_of(self, token: str) -> str | None:
        """The account a token this store handed out names, or None for any other token."""
        if not token.startswith(TOKEN_PREFIX) or "." not in token:
            return None
        encoded, signature = token[len(TOKEN_PREFIX) :].rsplit(".", 1)
        try:
            account = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except ValueError:
            return None
        return account if hmac.compare_digest(signature, self._sign(account)) else None

    def _sign(self, account: str) -> str:
        return hmac.new(self._key, account.encode(), hashlib.sha256).hexdigest()[:32]

    def access(self, name: str, project: str, secret_id: str, version: str, account: str) -> dict[str, Any]:
        """AccessSecretVersionResponse for `account`, or RestAbort as Google's API answers."""
        secret = self._find(project, secret_id)
        if secret is None or account not in secret.accessors:
            raise RestAbort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"Permission 'secretmanager.versions.access' denied for resource '{name}' (or it may not exist).",
            )
        number = len(secret.versions) if version == "latest" else int(version) if version.isdigit() else 0
        if not 1 <= number <= len(secret.versions):
            raise RestAbort(grpc.StatusCode.NOT_FOUND, f"Secret version {name} does not exist.")
        data = secret.versions[number - 1].encode()
        return {
            "name": f"projects/{project}/secrets/{secret_id}/versions/{number}",
            "payload": {"data": base64.b64encode(data).decode(), "dataCrc32c": str(crc32c(data))},
        }

    def _find(self, project: str, secret_id: str) -> Secret | None:
        """A secret by its project's id or number, as Google's names take either."""
        for name, secret in self.secrets.items():
            _, owner, _, own_id = name.split("/", 3)
            if own_id == secret_id and project in (owner, self.numbers(owner)):
                return secret
        return None


def secret_manager_routes(store: SecretStore) -> list[Route]:
    def access(request: RestRequest, match: re.Match[str]) -> RestResponse:
        authorization = request.headers.get("authorization", "")
        if not authorization.lower().startswith("bearer "):
            raise RestAbort(
                grpc.StatusCode.UNAUTHENTICATED,
                "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie "
                "or other valid authentication credential.",
            )
        account = store.account_of(authorization[7:].strip())
        if account is None:
            raise RestAbort(grpc.StatusCode.UNAUTHENTICATED, "Request had invalid authentication credentials.")
        name = match["name"]
        answer = store.access(name, match["project"], match["secret"], match["version"], account)
        log.info(json.dumps({"severity": "INFO", "message": "secret version accessed", "name": name, "by": account}))
        return RestResponse(200, answer)

    return [("GET", re.compile(rf"/v1/(?P<name>{_VERSION}):access"), access)]


def default_account(project_number: str) -> str:
    """Who a CustomJob without a service account runs as: Vertex's Custom Code Service Agent."""
    return f"service-{project_number}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"


class MetadataServer:
    """One job's metadata server: its account's token and email, to callers that send `Metadata-Flavor: Google`
    (as the real one requires: cloud.google.com/compute/docs/metadata/querying-metadata)."""

    def __init__(self, store: SecretStore, account: str, host: str = "127.0.0.1"):
        token = store.token_for(account)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                base = "/computeMetadata/v1/instance/service-accounts/default/"
                answers = {
                    base + "token": ("application/json", json.dumps(_token_body(token))),
                    base + "email": ("application/text", account),
                }
                found = answers.get(self.path.split("?", 1)[0])
                if self.headers.get("Metadata-Flavor") != "Google":
                    self._answer(403, "text/html", "Missing Metadata-Flavor:Google header.")
                elif found is None:
                    self._answer(404, "text/html", "Not Found")
                else:
                    self._answer(200, *found)

            def _answer(self, status: int, kind: str, text: str) -> None:
                body = text.encode()
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metadata " + format, *args)

        self.account = account
        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="metadata", daemon=True).start()

    @property
    def host(self) -> str:
        """What GCE_METADATA_HOST holds: host:port."""
        host, port = self._httpd.server_address[:2]
        return f"{host!s}:{port}"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _token_body(token: str) -> dict[str, Any]:
    return {"access_token": token, "expires_in": TOKEN_LIFETIME, "token_type": "Bearer"}


@dataclass(frozen=True)
class NodeServices:
    """What the JobService's nodes reach besides storage: the job's metadata server and Secret Manager."""

    store: SecretStore
    secret_manager_url: str  # the REST port's URL

    def metadata_for(self, service_account: str, project: str) -> MetadataServer:
        return MetadataServer(self.store, service_account or default_account(self.store.numbers(project)))

    def node_env(self, metadata: MetadataServer) -> dict[str, str]:
        return {METADATA_HOST_VAR: metadata.host, ENDPOINT_VAR: self.secret_manager_url.rstrip("/")}
