"""A training marker's arrival (DESIGN.md §4, trigger rules): its rule's template and team, its overrides, the request
they make — then the submission. The marker's upload event reaches it through functions/handlers.py; a rule's quiet
window, schedule tick or alert (issue 42) reaches it with the rule's newest marker and an arrival of its own (its
request id, key and trigger), so that every run a rule starts is built the same way from the same documents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from functions import logs
from functions.cloud.gcs import TooLarge
from functions.cloud.ports import Storage
from functions.intake import triggers
from functions.intake.delivery import Delivery
from functions.intake.marker_policy import template_policy
from functions.intake.rejections import Rejections
from functions.ledger import keys
from functions.settings import Settings
from functions.teams import TEMPLATE_TEAM_KEY
from functions.untrusted.documents import DocumentInvalid, load_document
from schemas.errors import RequestInvalid, parse_request
from schemas.request import TrainingJobRequest
from schemas.rules import split_gs_uri
from schemas.triggers import TriggerPolicy


@dataclass(frozen=True)
class Arrival:
    """One marker becoming a request: the marker (`size` from its event or listing; 0: empty), its rule, and the
    request's id, key and delivery — the marker's own (`marker_arrival`), or a policy's (a window, a tick, an alert)."""

    bucket: str
    name: str
    generation: str
    size: int
    rule: str
    request_id: str
    key: str
    delivery: Delivery
    # The folder the request trains on when it is not the marker's own (a window's union of partitions).
    dataset_uri: str | None = None


def marker_arrival(bucket: str, name: str, generation: str, size: int, rule: str, delivery: Delivery) -> Arrival:
    """The arrival of a marker as its upload event brings it: the id and key derived from the marker."""
    key = keys.marker_key(bucket, name, generation)
    return Arrival(bucket, name, generation, size, rule, triggers.derive_request_id(name, generation), key, delivery)


@dataclass
class Markers:
    settings: Settings
    gcs: Storage
    rejections: Rejections
    request_key: Callable[[str, str | None], str]  # a named id's key as the team's (Controller.request_key)
    handle_request: Callable[[TrainingJobRequest, str, bool, Delivery], str]
    # A rule with a quiet window folds its markers into its open window instead (functions/intake/windows.py).
    fold: Callable[[Arrival, TriggerPolicy], str] | None = None

    def arrive(self, arrival: Arrival) -> str:
        """Build the arrival's request from its rule's template and the marker's overrides, and hand it on; what
        happened in a word (a rejection for what can never become a request)."""
        a = arrival
        limit = self.settings.max_request_bytes
        with logs.request_context(a.request_id):
            if a.size > limit:
                # Refused from the event alone (StorageObjectData.size, ../shared/reference/functions.md §2.1): a
                # marker of gigabytes is never downloaded (issue 24, point 6).
                size = f"gs://{a.bucket}/{a.name} is {a.size} bytes"
                errors = [f"marker: {size}; the limit is {limit} bytes (max_request_bytes)"]
                return self._reject(a, errors, "the marker is larger than a request may be")
            try:
                # Before its content is read: a marker outside its team's folders is refused.
                template, a, planted = self.rule_template(a)
                if planted is not None:
                    return planted
                template, trigger_policy = triggers.split_policy(template, a.rule)
                if trigger_policy.quiet_window is not None and a.delivery.folded is None and self.fold is not None:
                    return self.fold(a, trigger_policy)  # into the rule's open window: reconcile starts it
                template, policy = template_policy(template, a.rule)
                overrides = self._overrides(a, limit)
                if overrides is None:
                    logs.info("this generation of the marker is gone (an unversioned bucket); the newer one counts")
                    return "ignored"
                problems = policy.problems(template, overrides, triggers.dataset_folder(a.bucket, a.name))
                if problems:
                    return self._reject(a, problems, "the marker sets fields its template does not let markers set")
                document, explicit = triggers.marker_request(template, overrides, a.bucket, a.name, a.generation)
                if not explicit:
                    document["request_id"] = a.request_id
                if a.dataset_uri is not None:
                    document["dataset"]["uri"] = a.dataset_uri
                request = parse_request(document)
            except (DocumentInvalid, TooLarge) as exc:
                return self._reject(a, [f"marker: {exc}"], "the marker's overrides are unreadable")
            except RequestInvalid as exc:
                return self._reject(a, [str(e) for e in exc.errors], "the request is invalid")
            key = a.key
            if explicit:
                key = self.request_key(request.request_id, a.delivery.team)
                logs.set_request_id(request.request_id)
            return self.handle_request(request, key, explicit, a.delivery)

    def _overrides(self, a: Arrival, limit: int) -> dict[str, Any] | None:
        """The marker's overrides ({} for an empty marker), None when this generation is gone."""
        if a.size == 0:
            return {}  # an empty marker: the template as it is
        # Each generation of a marker is its own request with its own overrides: read exactly this one. The data
        # bucket is versioned (terraform/storage.tf), so an overwritten generation stays readable.
        if not (a.generation.isascii() and a.generation.isdigit() and len(a.generation) <= 20):
            raise DocumentInvalid(f"the event's generation {a.generation!r} is not a number")
        found = self.gcs.read(a.bucket, a.name, int(a.generation), max_bytes=limit)  # bounded: the size may be wrong
        if found is None:
            return None
        overrides = load_document(found[0], limit)
        if not isinstance(overrides, dict):
            raise DocumentInvalid("a marker's content must be a mapping of request fields")
        return overrides

    def _reject(self, a: Arrival, errors: list[str], message: str) -> str:
        return self.rejections.reject(a.request_id, a.key, a.delivery, errors, message)

    def rule_template(self, a: Arrival) -> tuple[dict[str, Any], Arrival, str | None]:
        """(the rule's template without its team, the arrival as that team's, None); the third is the rejection's
        outcome instead when the marker lies outside its team's folders — told to the team whose folder it lies in,
        else to the rule's team."""
        template, team = self.template_team(self.template(a.rule), a.rule)
        a = replace(a, delivery=replace(a.delivery, team=team))
        teams = self.settings.teams
        if teams is not None and team is not None and (planted := teams.marker_problem(a.bucket, a.name, team, a.rule)):
            a = replace(a, delivery=replace(a.delivery, team=teams.owner_of(f"gs://{a.bucket}/{a.name}") or team))
            return template, a, self._reject(a, [planted], "the marker lies outside its team's folders")
        return template, a, None

    def template_team(self, template: dict[str, Any], rule: str) -> tuple[dict[str, Any], str | None]:
        """(the template without its `team`, the team its markers belong to: the one it names, else the default)."""
        body = {key: value for key, value in template.items() if key != TEMPLATE_TEAM_KEY}
        team = template.get(TEMPLATE_TEAM_KEY)
        teams = self.settings.teams
        if team is None:
            return body, teams.default_team if teams else None
        if not isinstance(team, str) or (teams is not None and team not in teams.teams):
            known = f"one of {', '.join(teams.teams)}" if teams else "a team name"
            raise DocumentInvalid(f"the template of rule {rule}: {TEMPLATE_TEAM_KEY} {team!r} must be {known}")
        return body, team

    def template(self, rule: str) -> dict[str, Any]:
        """A rule's template: inline in the settings, or a gs:// YAML/JSON object (read each time: it may change),
        read with the same bound as a request."""
        template = self.settings.trigger_rules[rule]
        if isinstance(template, str):
            bucket, name = split_gs_uri(template)
            limit = self.settings.max_request_bytes
            try:
                found = self.gcs.read(bucket, name, max_bytes=limit)
            except TooLarge as exc:
                raise DocumentInvalid(f"the template of rule {rule} is too large: {exc} (max_request_bytes)") from None
            if found is None:
                raise DocumentInvalid(f"the template {template} of rule {rule} does not exist")
            template = load_document(found[0], limit)
        if not isinstance(template, dict):
            raise DocumentInvalid(f"the template of rule {rule} is not a mapping of request fields")
        return template
