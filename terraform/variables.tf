# Inputs. Only `project` is required; every other default gives a working deployment whose names match
# what the local stack creates (local/names.py).

# ---------------------------------------------------------------------------------------------------
# Where and what to call things

variable "project" {
  description = "ID of the Google Cloud project to deploy into."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project))
    error_message = "project must be a project ID: 6-30 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "region" {
  description = "Region of the functions, buckets, Vertex AI jobs, Artifact Registry repositories and Cloud Scheduler job. The storage trigger must be in the data bucket's region, so both use this one."
  type        = string
  default     = "us-central1"

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a single region such as us-central1 or europe-west4, not a multi-region."
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name: buckets are <project>-<prefix>-data/-control, topics <prefix>-requests etc. Keep \"trainctl\" to match the local stack's names."
  type        = string
  default     = "trainctl"

  validation {
    # 16 characters keeps the longest service account ID (<prefix>-fn-job-state) within IAM's 30.
    condition     = can(regex("^[a-z][a-z0-9-]{0,14}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 2-16 lowercase letters, digits or hyphens, starting with a letter and not ending with a hyphen."
  }
}

variable "data_bucket_name" {
  description = "Name of the data bucket to create and watch for dataset markers. Null means <project>-<name_prefix>-data."
  type        = string
  default     = null

  validation {
    condition     = var.data_bucket_name == null || can(regex("^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$", var.data_bucket_name))
    error_message = "data_bucket_name must be 3-63 lowercase letters, digits, '_' or '-', starting and ending with a letter or digit."
  }
}

variable "control_bucket_name" {
  description = "Name of the control bucket to create: the submission ledger, trigger templates and run artifacts (runs/<request_id>/ of the built-in trainer, custom-runs/<request_id>/ of custom images). Null means <project>-<name_prefix>-control."
  type        = string
  default     = null

  validation {
    condition     = var.control_bucket_name == null || can(regex("^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$", var.control_bucket_name))
    error_message = "control_bucket_name must be 3-63 lowercase letters, digits, '_' or '-', starting and ending with a letter or digit."
  }
}

variable "extra_data_buckets" {
  description = "Existing buckets (names, not gs:// URIs) that jobs may also read datasets from. The controller and the trainer get read access to them; they are not watched for uploads (send a job request instead)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for b in var.extra_data_buckets : can(regex("^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$", b))])
    error_message = "extra_data_buckets must hold bucket names such as my-datasets, without gs:// or a path."
  }
}

variable "output_buckets" {
  description = "Existing buckets (names, not gs:// URIs) that custom images may write their outputs to (a request's output_dir), besides their own folder custom-runs/<request_id>/ of the control bucket. Only the custom images' account may write them, and the functions that observe jobs read them; the built-in trainer writes only to runs/<request_id>/ of the control bucket. Neither the control bucket nor a data bucket: a job that could write there could rewrite the ledger, another request's dataset, or a marker that starts a job."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for b in var.output_buckets : can(regex("^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$", b))])
    error_message = "output_buckets must hold bucket names such as my-models, without gs:// or a path."
  }

  validation {
    condition = length(setintersection(var.output_buckets, concat(
      [coalesce(var.control_bucket_name, "${var.project}-${var.name_prefix}-control")],
      [coalesce(var.data_bucket_name, "${var.project}-${var.name_prefix}-data")],
      var.extra_data_buckets,
    ))) == 0
    error_message = "output_buckets must not name the control bucket or a data bucket (data_bucket_name, extra_data_buckets): jobs may write every object of an output bucket."
  }
}

variable "labels" {
  description = "Labels added to every resource that takes labels (an app=<name_prefix> label is always added)."
  type        = map(string)
  default     = {}
}

# ---------------------------------------------------------------------------------------------------
# What the controller runs

variable "trainer_image" {
  description = "Container image of the DDP trainer that jobs run. Null means <region>-docker.pkg.dev/<project>/<name_prefix>/trainer:latest in the repository this configuration creates; prefer an @sha256 digest (see README)."
  type        = string
  default     = null

  validation {
    condition     = var.trainer_image == null || can(regex("^[a-z0-9.-]+(:[0-9]+)?/[^\\s]+$", var.trainer_image))
    error_message = "trainer_image must be an image reference such as us-central1-docker.pkg.dev/PROJECT/REPO/trainer@sha256:..."
  }
}

variable "trigger_rules" {
  description = "Trigger rules for dataset uploads: an object mapping \"gs://bucket/prefix/\" to a template (a partial job request object, or a gs:// URI of a YAML/JSON template). A template's optional marker_may_set lists the dotted request fields a marker may override (default: dataset, trainer.hyperparameters, labels, display_name); the controller checks the names against the request schema. An inline template's policy.schedule (cron, time_zone) becomes a Cloud Scheduler job that publishes the rule's ticks to the retrain topic (retrain.tf). Passed JSON-encoded as TRAINCTL_TRIGGER_RULES."
  type        = any
  default     = {}

  validation {
    condition     = can(keys(var.trigger_rules)) && alltrue([for prefix in try(keys(var.trigger_rules), []) : can(regex("^gs://[a-z0-9][a-z0-9._-]*[a-z0-9](/.*)?/$", prefix))])
    error_message = "trigger_rules must be an object whose keys are gs://bucket/prefix/ URIs ending in '/'."
  }

  validation {
    # An absent marker_may_set (or a gs:// template, checked when it is read) passes; one that is there must be a list.
    condition     = try(alltrue([for template in values(var.trigger_rules) : try(alltrue([for field in template.marker_may_set : can(regex("^[a-z_]+(\\.[a-z_]+)*$", field))]), !can(template.marker_may_set))]), true)
    error_message = "A trigger template's marker_may_set must be a list of dotted request fields, such as [\"dataset\", \"trainer.hyperparameters\", \"labels\", \"display_name\"]."
  }

  validation {
    # A template's policy.schedule becomes a Cloud Scheduler job (retrain.tf): five cron fields, and a time zone name if
    # given. The controller checks the rest as Cloud Scheduler does (schemas/cron.py) when it reads the template.
    condition = try(alltrue([for template in values(var.trigger_rules) : !can(template.policy.schedule) || (
      can(regex("^\\S+(\\s+\\S+){4}$", trimspace(template.policy.schedule.cron))) && can(regex("^[A-Za-z0-9_+/-]+$", try(template.policy.schedule.time_zone, "Etc/UTC")))
    )]), true)
    error_message = "A trigger template's policy.schedule must hold cron, five unix-cron fields such as \"0 2 * * *\", and may hold time_zone, an IANA name such as \"Europe/Paris\"."
  }
}

variable "marker_names" {
  description = "Object basenames that mark a finished dataset upload; every other finalized object is ignored."
  type        = list(string)
  default     = ["_SUCCESS"]

  validation {
    condition     = length(var.marker_names) > 0 && alltrue([for m in var.marker_names : can(regex("^[^/,\\s]+$", m))])
    error_message = "marker_names must name at least one basename, without '/', ',' or spaces."
  }
}

variable "score_marker_names" {
  description = "Object basenames that ask for their folder's CSV files to be scored by the rule's model's champion (a Vertex BatchPredictionJob); a name also in marker_names scores."
  type        = list(string)
  default     = ["_SCORE"]

  validation {
    condition     = alltrue([for m in var.score_marker_names : can(regex("^[^/,\\s]+$", m))])
    error_message = "score_marker_names must be basenames, without '/', ',' or spaces."
  }
}

variable "reduction_server_image" {
  description = "Reduction Server image for pool 2 of large jobs. Null means the vertex-ai-restricted image in the multi-region nearest to var.region."
  type        = string
  default     = null
}

# ---------------------------------------------------------------------------------------------------
# Guardrails (admission). Empty allow-lists allow anything.

variable "allowed_machine_types" {
  description = "Machine types a job may use (pools 0 and 1). Empty allows every type in the catalog."
  type        = list(string)
  default     = []
}

variable "allowed_regions" {
  description = "Regions a request's fallback rung may name besides var.region. Empty allows only var.region."
  type        = list(string)
  default     = []
}

variable "extra_allowed_image_prefixes" {
  description = "Image prefixes custom trainer images may come from (TRAINCTL_ALLOWED_IMAGE_PREFIXES), each a registry host and path matched at a '/' boundary (us-docker.pkg.dev/partner/repo allows us-docker.pkg.dev/partner/repo/x:1, never .../repo-evil/x:1), or one full image with its :tag or @digest. Empty: only the built-in trainer runs. The trainer's own repository runs only the built-in trainer, even when an entry covers it. An allowed image runs any code its requester chooses, as the trainer service account."
  type        = list(string)
  default     = []

  # The same pattern as schemas/images.py PREFIX_PATTERN (a test compares them): the controller refuses at
  # start-up what this lets through.
  validation {
    condition     = alltrue([for p in var.extra_allowed_image_prefixes : can(regex("^([a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9])([.]([a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9]))*(:[0-9]+)?((/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*/?|(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)+((:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}|:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))$", p))])
    error_message = "extra_allowed_image_prefixes: each entry must be a registry host and path such as us-docker.pkg.dev/my-project/repo/ (no scheme, no wildcards, no spaces, lowercase path components), or one full image with its :tag or @digest."
  }
}

variable "allow_python_packages" {
  description = "Let requests run their own Python package (trainer.python_package, `trainctl submit --source`) on one of Vertex's prebuilt PyTorch training containers (TRAINCTL_ALLOW_PYTHON_PACKAGES). Custom code, like an allowed image: it runs as the custom service account, writes only custom-runs/ and the output buckets, and is installed from a data bucket. Off: only the built-in trainer and allowed images run."
  type        = bool
  default     = false
}

variable "executors" {
  description = "The prebuilt PyTorch training containers packages may run on (TRAINCTL_EXECUTORS), by the name requests give in trainer.python_package.executor: image (us-docker.pkg.dev/vertex-ai/training/pytorch-…:latest, as Google's list of prebuilt training containers names it), pytorch, cuda, max_compute_capability (\"9.0\"), available_until (Google's end of availability, YYYY-MM-DD: admission refuses the executor after it) and python (default \"3.10\"). It replaces the default list as a whole, so that it follows Google's page without a release; null: the list schemas/executors.py records, which Google dates past its end of availability."
  type = map(object({
    image                  = string
    pytorch                = string
    cuda                   = string
    max_compute_capability = string
    available_until        = string
    python                 = optional(string, "3.10")
  }))
  default = null

  validation {
    condition     = alltrue([for name, e in(var.executors == null ? {} : var.executors) : can(regex("^[a-z0-9][a-z0-9.-]{0,62}$", name)) && can(regex("^us-docker\\.pkg\\.dev/vertex-ai/training/pytorch-[a-z0-9.-]+:latest$", e.image)) && can(regex("^[0-9]+\\.[0-9]+$", e.max_compute_capability)) && can(regex("^[0-9]{4}-[0-9]{2}-[0-9]{2}$", e.available_until)) && can(regex("^3\\.[0-9]{1,2}$", e.python))])
    error_message = "Each executor: a name of lowercase letters, digits, '.' and '-'; image us-docker.pkg.dev/vertex-ai/training/pytorch-…:latest; max_compute_capability like \"9.0\"; available_until YYYY-MM-DD; python like \"3.10\"."
  }
}

variable "max_gpus_per_job" {
  description = "Most GPUs one job may use, all nodes together."
  type        = number
  default     = 64

  validation {
    condition     = var.max_gpus_per_job >= 2 && floor(var.max_gpus_per_job) == var.max_gpus_per_job
    error_message = "max_gpus_per_job must be a whole number of at least 2: every job uses at least 2 GPUs."
  }
}

variable "max_nodes" {
  description = "Most nodes (replicas of pools 0 and 1) one job may use."
  type        = number
  default     = 16

  validation {
    condition     = var.max_nodes >= 1 && floor(var.max_nodes) == var.max_nodes
    error_message = "max_nodes must be a whole number of at least 1."
  }
}

# The durations the controller reads (schemas/rules.py, parse_duration): whole seconds, or days, hours, minutes and
# seconds such as 10m or 1d12h. Each validation below that takes one refers to this.
locals {
  duration_pattern = "^([0-9]+|([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?)$"
}

variable "max_timeout" {
  description = "Longest timeout a job may ask for, as seconds or a duration such as 24h, 7d or 1h30m."
  type        = string
  default     = "7d"

  validation {
    condition     = can(regex(local.duration_pattern, var.max_timeout)) && var.max_timeout != ""
    error_message = "max_timeout must be seconds or a duration such as 24h, 7d or 1h30m."
  }
}

variable "max_cost_usd" {
  description = "Cost ceiling of one job in US dollars (catalog price x GPUs x nodes x timeout, reducers included)."
  type        = number
  default     = 1000

  validation {
    condition     = var.max_cost_usd > 0
    error_message = "max_cost_usd must be positive."
  }
}

variable "max_request_cost_usd" {
  description = "Ceiling on what all attempts of one request may spend together, in US dollars (its costliest rung's cost x scheduling.max_attempts); 0: no limit beyond max_cost_usd per attempt."
  type        = number
  default     = 0

  validation {
    condition     = var.max_request_cost_usd >= 0
    error_message = "max_request_cost_usd must be 0 (no limit) or positive."
  }
}

variable "max_request_bytes" {
  description = "Largest job request (Pub/Sub message or marker file) or gs:// trigger template the controller reads, in bytes; a marker whose event states more is refused unread."
  type        = number
  default     = 65536

  validation {
    # Pub/Sub's own limit is 10 MB per message.
    condition     = var.max_request_bytes >= 1024 && var.max_request_bytes <= 10000000
    error_message = "max_request_bytes must be between 1024 and 10000000."
  }
}

variable "reconcile_concurrency" {
  description = "How many active requests a reconcile tick observes at once: those whose job changed, ended or has a decision due (a tick lists the deployment's jobs once and leaves the others alone). Each job missing from the listing, one that has ended, costs one GetCustomJob against Vertex AI's per-minute, per-region read quota (Resource management (CRUD) requests)."
  type        = number
  default     = 16

  validation {
    condition     = var.reconcile_concurrency >= 1 && var.reconcile_concurrency <= 64
    error_message = "reconcile_concurrency must be between 1 and 64."
  }
}

variable "lease" {
  description = "How long a claim in the ledger holds before another delivery may take it over, as seconds or a duration such as 10m. Keep it above function_timeout_seconds."
  type        = string
  default     = "10m"

  validation {
    condition     = can(regex(local.duration_pattern, var.lease)) && var.lease != ""
    error_message = "lease must be seconds or a duration such as 10m."
  }
}

variable "permission_wait" {
  description = "How long a request whose submission Vertex AI refuses with PERMISSION_DENIED is tried again before it fails with reason permission, as seconds or a duration such as 20m. Fresh IAM grants and a just-enabled API take minutes to reach Vertex."
  type        = string
  default     = "20m"

  validation {
    condition     = can(regex(local.duration_pattern, var.permission_wait)) && var.permission_wait != ""
    error_message = "permission_wait must be seconds or a duration such as 20m."
  }
}

variable "max_event_age" {
  description = "Events older than this are dropped with a log line instead of processed, as seconds or a duration such as 24h."
  type        = string
  default     = "24h"

  validation {
    condition     = can(regex(local.duration_pattern, var.max_event_age)) && var.max_event_age != ""
    error_message = "max_event_age must be seconds or a duration such as 24h."
  }
}

# ---------------------------------------------------------------------------------------------------
# Functions

variable "python_runtime" {
  description = "Cloud Functions Python runtime of the five functions."
  type        = string
  default     = "python311"

  validation {
    condition     = contains(["python311", "python312", "python313"], var.python_runtime)
    error_message = "python_runtime must be python311, python312 or python313 (the project needs Python 3.11 or newer)."
  }
}

variable "function_memory" {
  description = "Memory of each function's instances, which also sets its vCPU (256Mi: 0.167, 512Mi: 0.333, 1Gi: 0.583, 2Gi: 1; cloud.google.com/functions/docs/configuring/memory). The functions that submit jobs get the smallest tier on which a cold submission stays within its goal (bench/RESULTS.md, \"Function tiers\"); on_job_state and reconcile have no latency goal and get a third of a vCPU."
  type = object({
    on_dataset_upload = optional(string, "2Gi")
    on_job_request    = optional(string, "2Gi")
    on_job_state      = optional(string, "512Mi")
    on_retrain        = optional(string, "2Gi")
    reconcile         = optional(string, "512Mi")
  })
  default = {}

  validation {
    condition     = alltrue([for size in values(var.function_memory) : can(regex("^[0-9]+(Mi|Gi|M|G)$", size))])
    error_message = "function_memory values must be sizes such as 512Mi or 2Gi."
  }
}

variable "function_timeout_seconds" {
  description = "Timeout of each function invocation; also the push subscription's ack deadline."
  type        = number
  default     = 120

  validation {
    # 540 s is the most an event-driven function may run.
    condition     = var.function_timeout_seconds >= 10 && var.function_timeout_seconds <= 540
    error_message = "function_timeout_seconds must be between 10 and 540."
  }
}

variable "function_min_instances" {
  description = "Instances of each function kept warm. 0 scales to zero (cold starts are kept short by design)."
  type        = number
  default     = 0

  validation {
    condition     = var.function_min_instances >= 0 && floor(var.function_min_instances) == var.function_min_instances
    error_message = "function_min_instances must be a whole number, 0 or more."
  }
}

variable "function_max_instances" {
  description = "Most instances of each function at once."
  type        = number
  default     = 10

  validation {
    condition     = var.function_max_instances >= 1 && var.function_max_instances >= var.function_min_instances
    error_message = "function_max_instances must be at least 1 and at least function_min_instances."
  }
}

# ---------------------------------------------------------------------------------------------------
# Delivery, retention, schedule

variable "request_max_delivery_attempts" {
  description = "Deliveries of one job request to on_job_request before it goes to the dead-letter topic."
  type        = number
  default     = 10

  validation {
    condition     = var.request_max_delivery_attempts >= 5 && var.request_max_delivery_attempts <= 100
    error_message = "request_max_delivery_attempts must be between 5 and 100 (Pub/Sub's limits)."
  }
}

variable "request_retry_backoff_seconds" {
  description = "Minimum and maximum backoff between redeliveries of a failed job request."
  type        = object({ min = number, max = number })
  default     = { min = 10, max = 600 }

  validation {
    condition     = var.request_retry_backoff_seconds.min >= 0 && var.request_retry_backoff_seconds.max <= 600 && var.request_retry_backoff_seconds.min <= var.request_retry_backoff_seconds.max
    error_message = "request_retry_backoff_seconds must satisfy 0 <= min <= max <= 600."
  }
}

variable "dead_letter_retention_days" {
  description = "How long dead-lettered requests wait in the operators' pull subscription."
  type        = number
  default     = 7

  validation {
    condition     = var.dead_letter_retention_days >= 1 && var.dead_letter_retention_days <= 31
    error_message = "dead_letter_retention_days must be between 1 and 31."
  }
}

variable "reconcile_schedule" {
  description = "Cron schedule of the reconcile sweep."
  type        = string
  default     = "*/5 * * * *"

  validation {
    condition     = length(split(" ", trimspace(var.reconcile_schedule))) == 5
    error_message = "reconcile_schedule must be a five-field cron expression such as */5 * * * *."
  }
}

variable "reconcile_time_zone" {
  description = "Time zone of reconcile_schedule."
  type        = string
  default     = "Etc/UTC"
}

variable "run_retention_days" {
  description = "Age in days after which run artifacts (runs/ and custom-runs/ in the control bucket) are deleted."
  type        = number
  default     = 90

  validation {
    condition     = var.run_retention_days >= 1
    error_message = "run_retention_days must be at least 1."
  }
}

variable "noncurrent_version_retention_days" {
  description = "Days an overwritten or deleted object version is kept in the versioned buckets."
  type        = number
  default     = 30

  validation {
    condition     = var.noncurrent_version_retention_days >= 1
    error_message = "noncurrent_version_retention_days must be at least 1."
  }
}

variable "log_retention_days" {
  description = "Days the functions' and training jobs' logs are kept in this deployment's own log bucket."
  type        = number
  default     = 90

  validation {
    condition     = var.log_retention_days >= 1 && var.log_retention_days <= 3650
    error_message = "log_retention_days must be between 1 and 3650."
  }
}

variable "legacy_pubsub_push_auth" {
  description = "Set true in projects created before 2021-04-08: their Pub/Sub service agent must be granted token creation on the push subscription's and the Eventarc triggers' identities to mint their OIDC tokens."
  type        = bool
  default     = false
}

# ---- who may start jobs, and who may follow them -----------------------------------------------------

variable "request_publishers" {
  description = "IAM members (user:…, group:…, serviceAccount:…) allowed to publish job requests to the requests topic. Nobody else can start a job by message."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.request_publishers : can(regex("^(user|group|serviceAccount|domain):", m))])
    error_message = "request_publishers entries must be IAM members such as group:ml-team@example.com."
  }
}

variable "data_uploaders" {
  description = "IAM members allowed to upload datasets (and markers, which start jobs) to the data bucket."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.data_uploaders : can(regex("^(user|group|serviceAccount|domain):", m))])
    error_message = "data_uploaders entries must be IAM members such as group:data-eng@example.com."
  }
}

variable "event_watchers" {
  description = "Who may follow lifecycle events from the command line (`trainctl watch`, `trainctl submit --wait`): name => IAM member. Each entry gets a pull subscription of its own on the events topic, <name_prefix>-watch-<name>, and may pull from that subscription only (terraform/README.md, \"Permissions\"); the watcher passes it as --subscription or TRAINCTL_EVENTS_SUBSCRIPTION. Concurrent sessions on one subscription share its events, so give each person or service its own entry."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for name, member in var.event_watchers : can(regex("^[a-z][a-z0-9-]{0,29}$", name)) && can(regex("^(user|group|serviceAccount|domain):", member))])
    error_message = "event_watchers: each name must be 1-30 of [a-z0-9-] starting with a letter, and each value an IAM member such as user:ana@example.com or serviceAccount:ci@my-project.iam.gserviceaccount.com."
  }
}

# ---- the web console (console.tf) ---------------------------------------------------------------------

variable "console" {
  description = "The web console (`trainctl console`, issue 45) as a Cloud Run service behind IAP: off unless enabled. image: the console image (trainctl/console/Dockerfile), default <trainer repository>/console:latest. Who sees what: admins (IAM members) see every team; viewers maps an IAM member to the teams it may watch; each team's watchers (var.teams) see their own team. Members are user:EMAIL, serviceAccount:EMAIL or domain:DOMAIN: a group: member cannot be resolved from IAP's signed header, which names a person (docs/deploying.md, \"Console in the cloud\")."
  type = object({
    enabled = optional(bool, false)
    image   = optional(string)
    admins  = optional(list(string), [])
    viewers = optional(map(list(string)), {})
  })
  default = {}

  validation {
    condition     = alltrue([for m in concat(var.console.admins, keys(var.console.viewers)) : can(regex("^(user|serviceAccount):[^@]+@[^@]+$|^domain:[^@]+$", m))])
    error_message = "console: admins and the keys of viewers must be user:EMAIL, serviceAccount:EMAIL or domain:DOMAIN; a group: member cannot be resolved from IAP's signed header, so list its people."
  }

  validation {
    condition     = alltrue([for teams in values(var.console.viewers) : alltrue([for t in teams : contains(var.teams == null ? ["default"] : keys(var.teams.teams), t)])])
    error_message = "console: each viewer's teams must be teams of var.teams (\"default\" without teams)."
  }
}

# ---- tearing down -------------------------------------------------------------------------------------

variable "force_destroy" {
  description = "Let `terraform destroy` delete the data, control and source buckets with every object and object version in them. Off, destroy stops at the first bucket that is not empty (the versioned buckets keep old versions for noncurrent_version_retention_days)."
  type        = bool
  default     = false
}

# ---- operations: history, dashboards, alerts, webhooks ------------------------------------------------

variable "history_retention_days" {
  description = "Days each day of event history is kept in BigQuery (the dataset's and the events table's partition expiry)."
  type        = number
  default     = 400

  validation {
    condition     = var.history_retention_days >= 1 && floor(var.history_retention_days) == var.history_retention_days
    error_message = "history_retention_days must be a whole number of days, 1 or more."
  }
}

variable "history_cost_label" {
  description = "The request label (e.g. team) the gpu_hours_by_label view groups GPU-hours and estimated cost by."
  type        = string
  default     = "team"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_-]{0,62}$", var.history_cost_label))
    error_message = "history_cost_label must be a label key: a lowercase letter, then up to 62 of [a-z0-9_-]."
  }
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channels every alert policy notifies (projects/P/notificationChannels/ID). Empty: the alerts open incidents in the console only."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "notification_channels entries must be channel names such as projects/my-project/notificationChannels/1234567890."
  }
}

variable "runbook_url" {
  description = "Where the alerts' documentation links to: the address of this repository's docs/operations.md as your team reads it (each alert links to its own entry under \"Alerts\")."
  type        = string
  default     = "docs/operations.md"
}

variable "alert_failed_jobs_per_hour" {
  description = "The failures alert fires when more jobs than this fail within an hour."
  type        = number
  default     = 3

  validation {
    condition     = var.alert_failed_jobs_per_hour >= 0
    error_message = "alert_failed_jobs_per_hour must be 0 or more."
  }
}

variable "alert_reconcile_window" {
  description = "The reconcile alert fires on two failed ticks within this window: twice reconcile_schedule's interval (600s for the default */5)."
  type        = string
  default     = "600s"

  validation {
    condition     = can(regex("^[0-9]+s$", var.alert_reconcile_window)) && try(tonumber(trimsuffix(var.alert_reconcile_window, "s")) >= 60, false)
    error_message = "alert_reconcile_window must be seconds such as 600s, at least 60s."
  }
}

variable "alert_function_error_ratio" {
  description = "The function errors alert fires when a function answers more than this share of its requests with a 5xx for 5 minutes."
  type        = number
  default     = 0.05

  validation {
    condition     = var.alert_function_error_ratio > 0 && var.alert_function_error_ratio < 1
    error_message = "alert_function_error_ratio must be between 0 and 1."
  }
}

variable "event_webhooks" {
  description = "Endpoints outside the project that receive lifecycle events: name => { url (https), filter (a Pub/Sub subscription filter on the event attributes, e.g. attributes.state = \"failed\"; empty: every event), audience (the OIDC token's audience; null: the url) }. Each becomes an ordered push subscription signed with an OIDC token (README.md, \"Webhooks\")."
  type = map(object({
    url      = string
    filter   = optional(string, "")
    audience = optional(string)
  }))
  default = {}

  validation {
    condition     = alltrue([for name, hook in var.event_webhooks : can(regex("^[a-z][a-z0-9-]{0,29}$", name)) && startswith(hook.url, "https://") && length(hook.filter) <= 256])
    error_message = "event_webhooks: each name must be 1-30 of [a-z0-9-] starting with a letter, each url must start with https://, and each filter must be at most 256 bytes (Pub/Sub's limit)."
  }
}

variable "teams" {
  description = "Teams (README.md, \"Teams\"; issues 32, 40): null for none. Else { default_team, shared_intake_open (optional, default false: requests on the shared topic and markers outside every team's data_prefixes are rejected; true: they are the default team's, spending its quota and budget), teams = { name => { weight, quota = { metric => nominal GPUs }, borrow_limit, monthly_budget_usd, publishers, uploaders, data_prefixes, reads, watchers, warm_pools = [{ machine_type, accelerator_type, accelerator_count, boot_disk, replicas, keep_alive }] } }, models = { model id => { owner, grants } } (optional: who owns a model, else the team whose request created it) }. data_prefixes: folders of the data bucket that are the team's, each ending in '/' and inside no other team's: its uploaders may create and replace objects there (and under packages/<team>/, its code), its requests and its own code may read there, and a marker there starts jobs for it alone. reads: the operator's grant of other data its requests and its own code may read, folders ending in '/' of the data bucket (`shared/reference/`) or of another data bucket (`gs://bucket/folder/`). watchers: name => IAM member, each given a pull subscription <name_prefix>-watch-<team>-<name> on the events topic that receives only this team's events. Each team but the default runs its own code as an account of its own (<name_prefix>-t-<hash>), writing only custom-runs/_teams/<team>/. Each team gets its own request topic (<name_prefix>-requests-<team>) that only its publishers may publish to; warm_pools (issue 43): capacity kept warm as Vertex persistent resources that reconcile creates on demand and deletes after keep_alive idle, the idle time charged to the team's budget. `trainctl local up --teams FILE` reads the same shape."
  type        = any
  default     = null

  validation {
    condition     = var.teams == null || try(contains(keys(var.teams.teams), var.teams.default_team) && alltrue([for name in keys(var.teams.teams) : can(regex("^[a-z][a-z0-9-]{0,29}$", name))]), false)
    error_message = "teams must hold default_team (one of its teams) and teams, a map whose names are 1-30 of [a-z0-9-] starting with a letter."
  }

  # packages/<team>/ is each team's own folder for its code (teams.tf): a data prefix reaching into packages/, or
  # around it, would let one team create objects in another's.
  validation {
    condition     = var.teams == null || try(alltrue(flatten([for team in values(var.teams.teams) : [for prefix in try(team.data_prefixes, []) : !startswith(prefix, "packages/") && !startswith("packages/", prefix)]])), false)
    error_message = "teams: no data_prefixes may lie inside packages/ or around it (\"\", \"p\", \"packages/x/\"): packages/<team>/ is each team's own folder for its code."
  }

  # A folder ends in '/' (issue 40, point 5): the IAM conditions match names by prefix, and `vision` would also cover
  # `vision-evil/`, another team's folder. No '.' or '..' parts, no leading '/', no empty part.
  validation {
    condition     = var.teams == null || try(alltrue(flatten([for team in values(var.teams.teams) : [for prefix in try(team.data_prefixes, []) : can(regex("^([^/]+/)+$", prefix)) && !startswith(prefix, "gs:") && length(setintersection(split("/", prefix), [".", ".."])) == 0]])), false)
    error_message = "teams: each data_prefixes entry must be a folder of the data bucket ending in '/' (\"vision/\"): without the '/', \"vision\" would also cover \"vision-evil/\"."
  }

  validation {
    condition     = var.teams == null || try(alltrue(flatten([for team in values(var.teams.teams) : [for prefix in try(team.reads, []) : (can(regex("^([^/]+/)+$", prefix)) && !startswith(prefix, "gs:") || can(regex("^gs://[a-z0-9][a-z0-9._-]*/([^/]+/)+$", prefix))) && length(setintersection(split("/", trimprefix(prefix, "gs://")), [".", ".."])) == 0]])), false)
    error_message = "teams: each reads entry must be a folder ending in '/', of the data bucket (\"shared/reference/\") or of another data bucket (\"gs://bucket/folder/\")."
  }

  # A folder is one team's: its uploaders write there and its markers start that team's jobs alone.
  validation {
    condition = var.teams == null || try(alltrue([
      for pair in setproduct(
        flatten([for name, team in var.teams.teams : [for prefix in try(team.data_prefixes, []) : { team = name, prefix = prefix }]]),
        flatten([for name, team in var.teams.teams : [for prefix in try(team.data_prefixes, []) : { team = name, prefix = prefix }]]),
      ) : pair[0].team == pair[1].team || !startswith(pair[0].prefix, pair[1].prefix)
    ]), false)
    error_message = "teams: no team's data_prefixes may lie inside (or be) another team's: a folder belongs to one team."
  }

  validation {
    condition     = var.teams == null || try(alltrue(flatten([for team in values(var.teams.teams) : [for name, member in try(team.watchers, {}) : can(regex("^[a-z][a-z0-9-]{0,29}$", name)) && can(regex("^(user|group|serviceAccount|domain):", member))]])) && contains([true, false], try(var.teams.shared_intake_open, false)), false)
    error_message = "teams: watchers maps names (1-30 of [a-z0-9-], starting with a letter) to IAM members such as user:ana@example.com; shared_intake_open is true or false."
  }
}

variable "job_secrets" {
  description = "The Secret Manager secrets each team's own code may read through trainer.secret_env (issue 40; README, \"Job requests\"): team => [\"projects/P/secrets/S\", …]. The team is `default` without teams, else one of var.teams' (its default team's code runs as the custom images' account, every other team's as its own). Each entry grants that one account roles/secretmanager.secretAccessor on that one secret, nothing project-wide, and the controller refuses at admission a reference to any other secret (TRAINCTL_JOB_SECRETS). Empty: no job reads a secret."
  type        = map(list(string))
  default     = {}

  validation {
    condition     = alltrue([for team, secrets in var.job_secrets : alltrue([for secret in secrets : can(regex("^projects/([a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20})/secrets/[A-Za-z0-9_-]{1,255}$", secret))])])
    error_message = "job_secrets: each secret must be a secret's resource name, projects/PROJECT/secrets/SECRET (no version: access is granted on the secret)."
  }

  validation {
    condition     = alltrue([for team in keys(var.job_secrets) : var.teams == null ? team == "default" : contains(keys(try(var.teams.teams, {})), team)])
    error_message = "job_secrets: each key must be a team of var.teams (or `default` when there are no teams)."
  }
}
