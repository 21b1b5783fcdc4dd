"""A trigger rule's policy (issue 42): when a rule's markers, schedule ticks and alerts become requests.

A rule is a `gs://bucket/prefix/` of the `trigger_rules` setting mapped to a request template; the template's
reserved key `policy` holds a `TriggerPolicy`. What a policy says of one model — one run at a time, skip unchanged
data — lives in the request's `model` block (schemas/request.py: concurrency, skip_unchanged), since Pub/Sub requests
feed models too. JSON Schema: schemas/trigger_policy.schema.json (`python -m schemas.export`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from schemas import cron as unix_cron
from schemas.request import Duration

# The template's key that holds the policy (beside `team` and `marker_may_set`, which the controller reads too).
POLICY_KEY = "policy"
MAX_QUIET_WINDOW = 24 * 3600
MAX_WAIT = 7 * 86400
# A window that never goes quiet still closes: by default after this many quiet windows from its first marker.
DEFAULT_WAIT_WINDOWS = 10


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Schedule(_Strict):
    """Run the rule on a cron schedule: Cloud Scheduler publishes a tick to the retrain topic (terraform/triggers.tf),
    and the request's id derives from (rule, scheduled time), so each tick runs at most once however often it is
    delivered. The run trains on the rule's latest data: the folder of the newest marker under its prefix."""

    cron: Annotated[str, Field(min_length=9, max_length=128)] = Field(
        description="Five fields: minute hour day-of-month month day-of-week (unix-cron, as Cloud Scheduler takes).",
        examples=["0 2 * * *", "*/30 * * * 1-5"],
    )
    time_zone: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        "Etc/UTC", description="An IANA time zone the cron is read in (Cloud Scheduler's default: Etc/UTC).",
        examples=["Europe/Paris"],
    )  # fmt: skip
    catch_up: Literal["none", "latest"] = Field(
        "latest",
        description="A tick missed (the scheduler paused, the controller down): `latest` runs the newest missed tick "
        "once, when a later tick or reconcile finds it; `none` runs none of them (a late tick is `skipped`, reason "
        "missed_tick).",
    )

    @field_validator("cron", "time_zone")
    @classmethod
    def _as_cloud_scheduler_takes(cls, value: str, info: ValidationInfo) -> str:
        """A cron and a zone Cloud Scheduler takes (schemas/cron.py): a schedule Terraform could not create is refused
        here, naming the field."""
        try:
            unix_cron.parse(value) if info.field_name == "cron" else unix_cron.zone(value)
        except unix_cron.CronError as exc:
            raise ValueError(str(exc)) from None
        return value


class TriggerPolicy(_Strict):
    """When a rule's triggers start runs. Every field is optional: an empty policy starts one run per marker."""

    quiet_window: Duration | None = Field(
        None,
        description="Coalesce markers: markers under the rule within this window of each other become one request, "
        "started by reconcile once no marker has arrived for the window (at most max_wait after the first). Event "
        "`coalesced` names the markers folded in.",
        examples=["20s", "10m"],
    )
    max_wait: Duration | None = Field(
        None,
        description=f"The longest a window stays open from its first marker, however busy; default "
        f"{DEFAULT_WAIT_WINDOWS} × quiet_window.",
    )
    coalesce: Literal["newest", "union"] = Field(
        "newest",
        description="What the one request trains on: `newest`, the newest marker's folder; `union`, the deepest folder "
        "holding every marker folded in (and so every partition under it).",
    )
    schedule: Schedule | None = None

    @model_validator(mode="after")
    def _bounds(self) -> TriggerPolicy:
        if self.quiet_window is not None and not 1 <= self.quiet_window <= MAX_QUIET_WINDOW:
            raise ValueError(f"quiet_window must be 1s to {MAX_QUIET_WINDOW // 3600}h")
        if self.max_wait is not None:
            if self.quiet_window is None:
                raise ValueError("max_wait needs quiet_window: it bounds a coalescing window")
            if not self.quiet_window <= self.max_wait <= MAX_WAIT:
                raise ValueError(f"max_wait must be at least quiet_window and at most {MAX_WAIT // 86400}d")
        return self

    @property
    def window_limit(self) -> int | None:
        """Seconds a coalescing window may stay open from its first marker (None: the rule does not coalesce)."""
        if self.quiet_window is None:
            return None
        return self.max_wait or min(MAX_WAIT, DEFAULT_WAIT_WINDOWS * self.quiet_window)
