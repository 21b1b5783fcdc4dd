"""The Terraform configuration read with python-hcl2, for tests that check it without a cloud.

Values come back as HCL source text: a literal string as itself, any expression as "${...}".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hcl2

TERRAFORM_DIR = Path(__file__).resolve().parents[2] / "terraform"

_OPTIONS = hcl2.SerializationOptions(
    strip_string_quotes=True, with_comments=False, explicit_blocks=False, preserve_heredocs=False
)


@dataclass(frozen=True)
class Terraform:
    resources: dict[tuple[str, str], dict[str, Any]]
    locals: dict[str, Any]
    variables: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, Any]]
    files: dict[str, dict[str, Any]]

    def resource(self, kind: str, name: str) -> dict[str, Any]:
        return self.resources[(kind, name)]

    def of_kind(self, kind: str) -> dict[str, dict[str, Any]]:
        return {name: body for (k, name), body in self.resources.items() if k == kind}


def block(body: dict[str, Any], name: str) -> dict[str, Any]:
    """The single nested block `name` of a resource body (hcl2 gives blocks as lists)."""
    blocks = body[name]
    assert len(blocks) == 1, f"expected one {name} block, found {len(blocks)}"
    return blocks[0]


def dynamic_block(body: dict[str, Any], name: str) -> dict[str, Any]:
    """The `dynamic "<name>"` block of a body: its for_each and its content."""
    found = [d[name] for d in body.get("dynamic", []) if name in d]
    assert len(found) == 1, f"expected one dynamic {name} block, found {len(found)}"
    return {"for_each": found[0]["for_each"], "content": block(found[0], "content")}


def strings(value: Any) -> Iterator[str]:
    """Every string anywhere in a parsed value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def load(directory: Path = TERRAFORM_DIR) -> Terraform:
    resources: dict[tuple[str, str], dict[str, Any]] = {}
    locals_: dict[str, Any] = {}
    variables: dict[str, dict[str, Any]] = {}
    outputs: dict[str, dict[str, Any]] = {}
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.tf")):
        with path.open() as handle:
            parsed = hcl2.load(handle, serialization_options=_OPTIONS)
        files[path.name] = parsed
        for entry in parsed.get("resource", []):
            for kind, named in entry.items():
                for name, body in named.items():
                    assert (kind, name) not in resources, f"{kind}.{name} is declared twice"
                    resources[(kind, name)] = body
        for entry in parsed.get("locals", []):
            for key, value in entry.items():
                assert key not in locals_, f"local.{key} is declared twice"
                locals_[key] = value
        for entry in parsed.get("variable", []):
            variables.update(entry)
        for entry in parsed.get("output", []):
            outputs.update(entry)
    return Terraform(resources, locals_, variables, outputs, files)
