"""Names of the buckets, topics and subscriptions a deployment has. Terraform's defaults
(terraform/variables.tf, name_prefix "trainctl") produce the same names; a test checks."""

from __future__ import annotations

from dataclasses import dataclass

LOCAL_PROJECT = "trainctl-local"
LOCAL_REGION = "us-central1"
# The image the local JobService runs as `python -m trainer.launch`.
LOCAL_TRAINER_IMAGE = "localhost/trainctl/trainer:latest"


@dataclass(frozen=True)
class Names:
    project: str
    prefix: str = "trainctl"

    @property
    def data_bucket(self) -> str:
        return f"{self.project}-{self.prefix}-data"

    @property
    def control_bucket(self) -> str:
        return f"{self.project}-{self.prefix}-control"

    @property
    def requests_topic(self) -> str:
        return f"{self.prefix}-requests"

    @property
    def requests_subscription(self) -> str:
        return f"{self.prefix}-requests-push"

    @property
    def events_topic(self) -> str:
        return f"{self.prefix}-events"

    @property
    def job_state_topic(self) -> str:
        return f"{self.prefix}-job-state"

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.prefix}-dead-letter"

    @property
    def retrain_topic(self) -> str:
        """Schedule ticks and alerts for on_retrain (terraform/retrain.tf; issue 42)."""
        return f"{self.prefix}-retrain"

    @property
    def dead_letter_subscription(self) -> str:
        return f"{self.prefix}-dead-letter-pull"

    def team_requests_topic(self, team: str) -> str:
        """A team's own request topic (terraform/teams.tf: <prefix>-requests-<team>; issue 32)."""
        return f"{self.prefix}-requests-{team}"

    def team_requests_subscription(self, team: str) -> str:
        return f"{self.prefix}-requests-{team}-push"

    def service_account(self, account: str) -> str:
        """The email of Terraform's `<prefix>-<account>` service account (terraform/iam.tf: trainer, custom)."""
        return f"{self.prefix}-{account}@{self.project}.iam.gserviceaccount.com"
