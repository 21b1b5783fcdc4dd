"""Terraform expressions evaluated for real, and IAM conditions evaluated as IAM would, for tests without a cloud.

`evaluate` copies variables.tf and the named locals of terraform/*.tf into a folder of its own, stands in for the
resources they read (the data bucket's name), and asks `terraform console` (no provider needed) for the values of
expressions written as they are in the configuration. `allows` evaluates the CEL subset trainctl's conditions use:
`resource.name.startsWith("…")`, `api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("…")`,
`!`, `&&`, `||` and parentheses (cloud.google.com/iam/docs/conditions-overview, "Common Expression Language").
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tfconfig import TERRAFORM_DIR, Terraform

DATA = "proj-1-data"
# What the configuration reads from resources, as plain values (terraform console has no provider).
STAND_INS = {"google_storage_bucket.data.name": "local.stand_in_data_bucket"}


def hcl(value: str) -> str:
    """A value as python-hcl2 returned it (a literal, "${…}" or a template keeping its escapes) back as HCL source."""
    return f'"{value}"'


def evaluate(
    tmp_path: Path,
    tf: Terraform,
    teams: Any,
    expressions: dict[str, str],
    extra_data_buckets: list[str] | None = None,
    validate: bool = False,
) -> dict[str, Any]:
    """The value of each of `expressions` (HCL source, as in the configuration), with var.teams = `teams`. The
    variable's validations run only with `validate`; otherwise `teams` stands in for it as a local, so a test can show
    what an expression does with a value the validations would refuse (it is then var.teams_unvalidated)."""
    shutil.copy(TERRAFORM_DIR / "variables.tf", tmp_path)
    names = [
        "teams", "packages_prefix", "team_data_upload_prefixes", "team_upload_prefixes", "all_team_upload_prefixes",
        "data_buckets",
        "team_read_uris", "team_read_prefixes", "team_read_conditions", "team_watchers", "own_code_teams",
        "team_custom_readers",
    ]  # fmt: skip
    lines = [f'  stand_in_data_bucket = "{DATA}"']
    lines += [f"  {name} = {_stand_in(hcl(tf.locals[name]), validate)}" for name in names]
    lines += [f"  probe_{key} = {_stand_in(text, validate)}" for key, text in expressions.items()]
    # The unvalidated stand-in is typed as the variable is (`any`), so expressions see the value as Terraform would.
    unvalidated = 'variable "teams_unvalidated" {\n  type    = any\n  default = null\n}\n'
    (tmp_path / "eval.tf").write_text(unvalidated + "locals {\n" + "\n".join(lines) + "\n}\n")
    probe = "jsonencode({" + ", ".join(f"{key} = local.probe_{key}" for key in expressions) + "})"
    arguments = ["-var=project=proj-1", f"-var=extra_data_buckets={json.dumps(extra_data_buckets or [])}"]
    arguments.append(f"-var={'teams' if validate else 'teams_unvalidated'}={json.dumps(teams)}")
    run = subprocess.run(
        ["terraform", "console", "-no-color", *arguments],
        input=f"{probe}\n",
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    printed = run.stdout.strip()
    if not printed.startswith('"'):  # an error (a validation, a wrong expression): said on stderr
        raise TerraformRefused(" ".join(run.stderr.split()))
    return json.loads(json.loads(printed))


class TerraformRefused(Exception):
    """terraform console printed no value: a validation refused the variable, or the expression is wrong."""


def _stand_in(text: str, validate: bool) -> str:
    for reference, value in STAND_INS.items():
        text = text.replace(reference, value)
    return text if validate else text.replace("var.teams", "var.teams_unvalidated")


# ---- CEL ---------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r'\s*(?:(?P<op>\|\||&&|!|\(|\))|resource\.name\.startsWith\("(?P<name>[^"]*)"\)'
    r'|api\.getAttribute\("storage\.googleapis\.com/objectListPrefix", ""\)\.startsWith\("(?P<list>[^"]*)"\))'
)


def allows(expression: str, name: str | None = None, list_prefix: str | None = None) -> bool:
    """Whether a condition grants a call on object `name` (projects/_/buckets/B/objects/O), or a listing with prefix
    `list_prefix` (the bucket's name is then the resource's, and objectListPrefix is set)."""
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(expression.rstrip()):
        match = _TOKEN.match(expression, position)
        assert match, f"unexpected condition text at {expression[position : position + 60]!r}"
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        position = match.end()
    tokens.append(("end", ""))

    def atom(kind: str, text: str) -> bool:
        if kind == "name":
            return name is not None and name.startswith(text)
        return list_prefix is not None and list_prefix.startswith(text)

    index = 0

    def parse_or() -> bool:
        nonlocal index
        value = parse_and()
        while tokens[index] == ("op", "||"):
            index += 1
            value = parse_and() or value
        return value

    def parse_and() -> bool:
        nonlocal index
        value = parse_unary()
        while tokens[index] == ("op", "&&"):
            index += 1
            value = parse_unary() and value
        return value

    def parse_unary() -> bool:
        nonlocal index
        kind, text = tokens[index]
        index += 1
        if (kind, text) == ("op", "!"):
            return not parse_unary()
        if (kind, text) == ("op", "("):
            value = parse_or()
            assert tokens[index] == ("op", ")"), expression
            index += 1
            return value
        assert kind in ("name", "list"), f"unexpected {text!r} in {expression!r}"
        return atom(kind, text)

    value = parse_or()
    assert tokens[index][0] == "end", expression
    return value


def object_name(obj: str, bucket: str = DATA) -> str:
    return f"projects/_/buckets/{bucket}/objects/{obj}"
