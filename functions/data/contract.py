"""Pure: the champion's data contract — the `schema.json` the built-in trainer writes beside its model (issue 27,
point 1) — and how a new dataset's header measures up to it (point 2).

schema.json is what a job wrote, so it is untrusted input: read with a bound on its size, parsed by
documents.load_json (bounded nesting) and checked against the contract's shape; what cannot be used raises
job_outputs.Unreadable. The contract (trainer/ writes it; it is not imported, DESIGN.md §2):
  {"schema_version": 1, "format": "csv"|"parquet", "target": "<column>", "task": "classification"|"regression",
   "rows": <int>, "columns": [{"name", "type": "number"|"string"|"boolean", "physical", "role":
   "feature"|"target"|"unused", "missing_rate", "stats"}]}

The comparison: the request's target and every feature the run needs (the request's `features`, else the
champion's) must be in the new header, each with the class the champion saw; columns the champion never saw are
allowed and named. One error per column, in the words `dataset: column 'age' was number, is string`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.data.header import Column
from functions.untrusted.job_outputs import clip, parse_output

SCHEMA_FILE = "schema.json"
# A column's entry with its statistics (quantiles, top categories) is a few hundred bytes: 1 MiB holds thousands.
MAX_SCHEMA_BYTES = 1024 * 1024
MAX_COLUMNS = 10_000
MAX_NAME_CHARS = 1024
# The errors a rejection lists; a dataset that lost hundreds of columns says how many more.
MAX_ERRORS = 50
COMPARED_TYPES = ("number", "string", "boolean")


class SchemaColumn(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(max_length=MAX_NAME_CHARS)
    type: str | None = Field(None, max_length=32, description="number, string or boolean; others are not compared.")
    role: Literal["feature", "target", "unused"]


class ChampionSchema(BaseModel):
    """The parts of schema.json the admission check uses (the statistics are the trainer's, for drift)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = Field(description="The contract's version; another is not read.")
    format: str | None = Field(None, max_length=32)
    target: str = Field(max_length=MAX_NAME_CHARS)
    task: str | None = Field(None, max_length=32)
    rows: int | None = Field(None, ge=0)
    columns: list[SchemaColumn] = Field(max_length=MAX_COLUMNS)

    @property
    def features(self) -> list[str]:
        return [c.name for c in self.columns if c.role == "feature"]

    def summary(self) -> str:
        """The schema in a line, for people (`trainctl models show`)."""
        types = Counter(c.type or "other" for c in self.columns if c.role == "feature")
        kinds = ", ".join(f"{n} {kind}" for kind, n in types.most_common())
        rows = f"{self.rows:,} rows" if self.rows is not None else "rows not recorded"
        task = f" ({self.task})" if self.task else ""
        return f"{rows}, {self.format or 'data'}; target {_shown(self.target)}{task}; {len(self.features)} features" + (
            f": {kinds}" if kinds else ""
        )


def parse_schema(raw: bytes) -> ChampionSchema:
    """schema.json as far as the check needs it; Unreadable (with the reason) when it is not the contract's."""
    return parse_output(ChampionSchema, raw, MAX_SCHEMA_BYTES)


@dataclass(frozen=True)
class HeaderCheck:
    errors: list[str]  # one `dataset: column …` line per column that breaks the contract; [] when none does
    new_columns: list[str]  # in the header, unknown to the champion: allowed


def compare_header(
    champion: ChampionSchema, header: Sequence[Column], target: str, features: Sequence[str] | None
) -> HeaderCheck:
    """How the new dataset's `header` measures up to the champion's schema, for a run predicting `target` from
    `features` (None: every column but the target, as the trainer takes them, so the champion's features)."""
    seen = {column.name: column for column in reversed(header)}  # a repeated name: its first column
    known = {column.name: column for column in champion.columns}
    errors: list[str] = []
    if target != champion.target:
        errors.append(
            f"dataset.target: the champion predicts {_shown(champion.target)}, this request {_shown(target)}; the "
            "versions of one model predict one target: name another model"
        )
    needed = [(target, "the target")]
    if features is not None:
        needed += [(name, "named in dataset.features") for name in features]
    else:
        needed += [(name, "a feature of the champion") for name in champion.features]
    reasons: dict[str, str] = {}
    for name, why in needed:
        reasons.setdefault(name, why)
    for name, why in reasons.items():
        column, was = seen.get(name), known.get(name)
        if column is None:
            errors.append(f"dataset: column {_shown(name)} is missing ({why})")
        elif was is not None and _compared(was.type) and _compared(column.type) and was.type != column.type:
            errors.append(f"dataset: column {_shown(name)} was {was.type}, is {column.type}")
    if len(errors) > MAX_ERRORS:
        errors = [*errors[: MAX_ERRORS - 1], f"dataset: and {len(errors) - MAX_ERRORS + 1} more columns"]
    new = [column.name for column in header if column.name not in known]
    return HeaderCheck(errors, list(dict.fromkeys(new)))


def _compared(kind: str | None) -> bool:
    return kind in COMPARED_TYPES


def _shown(name: str) -> str:
    return repr(clip(name, 80))
