# Names, the controller's environment and the table of functions: the three things the rest of the
# configuration reads, and the three things tests/terraform checks against the Python side.

locals {
  # Same keys and values as local/names.py's Names(project, prefix) properties; a test compares them.
  default_names = {
    data_bucket              = "${var.project}-${var.name_prefix}-data"
    control_bucket           = "${var.project}-${var.name_prefix}-control"
    requests_topic           = "${var.name_prefix}-requests"
    requests_subscription    = "${var.name_prefix}-requests-push"
    events_topic             = "${var.name_prefix}-events"
    job_state_topic          = "${var.name_prefix}-job-state"
    dead_letter_topic        = "${var.name_prefix}-dead-letter"
    dead_letter_subscription = "${var.name_prefix}-dead-letter-pull"
    retrain_topic            = "${var.name_prefix}-retrain"
  }

  names = merge(local.default_names, {
    data_bucket    = coalesce(var.data_bucket_name, local.default_names.data_bucket)
    control_bucket = coalesce(var.control_bucket_name, local.default_names.control_bucket)
  })

  labels = merge(var.labels, { app = var.name_prefix })

  # Every bucket a job may read a dataset from.
  data_buckets = concat([google_storage_bucket.data.name], var.extra_data_buckets)

  # The built-in trainer writes run outputs only below this prefix of the control bucket (the controller's default
  # output_dir is gs://<control bucket>/runs/<request_id>/); the ledger beside it stays out of its reach.
  artifacts_prefix = "runs/"
  # Custom images write only below this one (gs://<control bucket>/custom-runs/<request_id>/ by default) and to
  # var.output_buckets, as an account of their own: what the built-in trainer wrote stays out of their reach.
  # functions/jobs/planning.py's RUNS_PREFIX and CUSTOM_RUNS_PREFIX; a test compares them.
  custom_artifacts_prefix = "custom-runs/"
  # Below it, each team's own code (every team but the default one) writes only its own folder, as its own account
  # (teams.tf; functions/jobs/planning.py TEAMS_FOLDER).
  team_artifacts_prefix = "${local.custom_artifacts_prefix}_teams/"
  # What the controller copies and keeps (issue 38): each registered version's model folder and each model's
  # reference set. No job account writes there and the lifecycle rule does not match it; every job reads it (the
  # champion it scores, the reference rows). functions/ledger/model_charter.py's ARTIFACTS_PREFIX and REFERENCES_PREFIX.
  model_prefixes = ["model-artifacts/", "model-references/"]

  trainer_repository = "${var.region}-docker.pkg.dev/${var.project}/${google_artifact_registry_repository.trainer.repository_id}"
  trainer_image      = coalesce(var.trainer_image, "${local.trainer_repository}/trainer:latest")

  # Reduction Server images exist in the us, europe and asia multi-regions only.
  reduction_server_multiregion = startswith(var.region, "europe-") ? "europe" : (startswith(var.region, "asia-") || startswith(var.region, "australia-") ? "asia" : "us")
  reduction_server_image       = coalesce(var.reduction_server_image, "${local.reduction_server_multiregion}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest")

  # The controller's settings (functions/settings.py): one TRAINCTL_<FIELD> per Settings field, the same for
  # all five functions. TRAINCTL_VERTEX_ENDPOINT, TRAINCTL_QUOTAS_ENDPOINT, TRAINCTL_MONITORING_ENDPOINT and
  # TRAINCTL_COMPUTE_ENDPOINT are left out on purpose: only the local stack sets them, so in the cloud the controller
  # talks to <region>-aiplatform.googleapis.com, cloudquotas.googleapis.com, monitoring.googleapis.com and
  # compute.googleapis.com.
  # Teams (teams.tf): the variable with each team's topic and the data bucket (which data_prefixes are folders of) filled
  # in, as the controller reads it (functions/teams.py).
  # try(), not `var.teams == null ? {} : var.teams.teams`: a conditional must unify its two results' types, and teams
  # whose settings differ in shape (one with a weight, another without) are an object no empty map unifies with.
  teams         = try(var.teams.teams, {})
  teams_setting = var.teams == null ? "" : jsonencode(merge(var.teams, { data_bucket = google_storage_bucket.data.name, teams = { for name, team in local.teams : name => merge(team, { topic = "${var.name_prefix}-requests-${name}" }, contains(keys(local.own_code_teams), name) ? { custom_service_account = google_service_account.team_custom[name].email } : {}) } }))

  controller_settings = {
    TRAINCTL_PROJECT                  = var.project
    TRAINCTL_CONTROL_BUCKET           = google_storage_bucket.control.name
    TRAINCTL_EVENTS_TOPIC             = google_pubsub_topic.events.name
    TRAINCTL_TRAINER_IMAGE            = local.trainer_image
    TRAINCTL_REGION                   = var.region
    TRAINCTL_TRIGGER_RULES            = jsonencode(var.trigger_rules)
    TRAINCTL_MARKER_NAMES             = join(",", var.marker_names)
    TRAINCTL_SCORE_MARKER_NAMES       = join(",", var.score_marker_names)
    TRAINCTL_TRAINER_SERVICE_ACCOUNT  = google_service_account.trainer.email
    TRAINCTL_CUSTOM_SERVICE_ACCOUNT   = google_service_account.custom.email
    TRAINCTL_REDUCTION_SERVER_IMAGE   = local.reduction_server_image
    TRAINCTL_ALLOWED_MACHINE_TYPES    = join(",", var.allowed_machine_types)
    TRAINCTL_ALLOWED_REGIONS          = join(",", var.allowed_regions)
    TRAINCTL_ALLOWED_IMAGE_PREFIXES   = join(",", var.extra_allowed_image_prefixes)
    TRAINCTL_ALLOW_PYTHON_PACKAGES    = var.allow_python_packages ? "true" : ""
    TRAINCTL_EXECUTORS                = var.executors == null ? "" : jsonencode(var.executors)
    TRAINCTL_ALLOWED_DATA_BUCKETS     = join(",", local.data_buckets)
    TRAINCTL_ALLOWED_OUTPUT_BUCKETS   = join(",", concat([google_storage_bucket.control.name], var.output_buckets))
    TRAINCTL_ALLOWED_SERVICE_ACCOUNTS = google_service_account.trainer.email
    TRAINCTL_MAX_GPUS_PER_JOB         = tostring(var.max_gpus_per_job)
    TRAINCTL_MAX_NODES                = tostring(var.max_nodes)
    TRAINCTL_MAX_TIMEOUT              = var.max_timeout
    TRAINCTL_MAX_COST_USD             = tostring(var.max_cost_usd)
    TRAINCTL_MAX_REQUEST_COST_USD     = tostring(var.max_request_cost_usd)
    TRAINCTL_MAX_REQUEST_BYTES        = tostring(var.max_request_bytes)
    TRAINCTL_LEASE                    = var.lease
    TRAINCTL_PERMISSION_WAIT          = var.permission_wait
    TRAINCTL_RECONCILE_CONCURRENCY    = tostring(var.reconcile_concurrency)
    TRAINCTL_MAX_EVENT_AGE            = var.max_event_age
    TRAINCTL_FUNCTION_TIMEOUT         = tostring(var.function_timeout_seconds)
    TRAINCTL_TEAMS                    = local.teams_setting
    TRAINCTL_JOB_SECRETS              = length(var.job_secrets) > 0 ? jsonencode(var.job_secrets) : ""
  }
  # Settings read an empty variable as unset, so empty ones (an empty allow-list) are simply not set.
  controller_env = { for name, value in local.controller_settings : name => value if value != "" }

  # The five entry points of functions/main.py and what each one needs. All five create CustomJobs as the trainer (or a
  # custom account: act-as, iam.tf). `vertex_permissions`: the Vertex AI permissions of the calls it can reach, no more
  # (a custom role each, iam.tf; tests/terraform/test_terraform_reachable_calls.py derives them from the code: issue 40,
  # point 6), and compute.reservations.get where admission reads a reserved rung's reservation (issue 43).
  # `reads_data`: reads dataset markers
  # and lists datasets (the intake functions at admission, on_job_state and reconcile when they diagnose a
  # user failure); `reads_outputs`: reads what jobs wrote in var.output_buckets (the functions that observe
  # jobs); tests/terraform/test_terraform_reachable_calls.py derives both from the code. `trigger`: an Eventarc trigger, or null when something else calls the
  # function (on_job_request: our push subscription with a dead-letter policy; reconcile: Cloud Scheduler).
  functions = {
    on_dataset_upload = {
      account       = "fn-upload"
      description   = "Starts a job when a dataset marker lands in the data bucket."
      reads_data    = true
      reads_outputs = false
      vertex_permissions = [
        "aiplatform.customJobs.create", "aiplatform.customJobs.list", "aiplatform.models.get", "compute.reservations.get",
        # A rung's persistent resource, read at admission (issue 43).
        "aiplatform.persistentResources.get",
        # A `_SCORE` marker's BatchPredictionJob, looked up by its label before it is made (issue 41).
        "aiplatform.batchPredictionJobs.create", "aiplatform.batchPredictionJobs.get", "aiplatform.batchPredictionJobs.list",
      ]
      # The data bucket's notifications, through the uploads topic (storage.tf; triggers.tf says why not a Cloud
      # Storage trigger).
      trigger = {
        event_type   = "google.cloud.pubsub.topic.v1.messagePublished"
        bucket       = null
        pubsub_topic = google_pubsub_topic.data_uploads.id
      }
    }
    on_job_request = {
      account            = "fn-request"
      description        = "Starts a job for each request published on the requests topic."
      reads_data         = true
      reads_outputs      = false
      vertex_permissions = ["aiplatform.customJobs.create", "aiplatform.customJobs.list", "aiplatform.models.get", "compute.reservations.get", "aiplatform.persistentResources.get"]
      trigger            = null
    }
    on_job_state = {
      account       = "fn-job-state"
      description   = "Publishes lifecycle events for job state changes routed from Cloud Logging."
      reads_data    = true
      reads_outputs = true
      vertex_permissions = [
        "aiplatform.customJobs.cancel", "aiplatform.customJobs.create", "aiplatform.customJobs.get", "aiplatform.customJobs.list",
        "aiplatform.modelEvaluations.import", "aiplatform.modelEvaluations.list",
        "aiplatform.models.get", "aiplatform.models.list", "aiplatform.models.update", "aiplatform.models.upload",
        # Rolling promoted versions out to their model's endpoint, judged on its Cloud Monitoring figures (issue 41).
        "aiplatform.endpoints.create", "aiplatform.endpoints.deploy", "aiplatform.endpoints.get",
        "aiplatform.endpoints.undeploy", "aiplatform.endpoints.update", "monitoring.timeSeries.list",
      ]
      trigger = {
        event_type   = "google.cloud.pubsub.topic.v1.messagePublished"
        bucket       = null
        pubsub_topic = google_pubsub_topic.job_state.id
      }
    }
    on_retrain = {
      account     = "fn-retrain"
      description = "Starts a trigger rule's run on its newest marker for a schedule tick or a Monitoring alert."
      reads_data  = true
      # A tick or an alert lists the rule's prefix for its newest marker (issue 42).
      reads_outputs      = false
      vertex_permissions = ["aiplatform.customJobs.create", "aiplatform.customJobs.list", "aiplatform.models.get", "compute.reservations.get", "aiplatform.persistentResources.get"]
      # Cloud Scheduler's ticks and the Monitoring notification channel's incidents, on the retrain topic (retrain.tf).
      trigger = {
        event_type   = "google.cloud.pubsub.topic.v1.messagePublished"
        bucket       = null
        pubsub_topic = google_pubsub_topic.retrain.id
      }
    }
    reconcile = {
      account       = "fn-reconcile"
      description   = "Sweeps active jobs: missed state changes, stuck jobs, resubmissions."
      reads_data    = true
      reads_outputs = true
      vertex_permissions = [
        "aiplatform.customJobs.cancel", "aiplatform.customJobs.create", "aiplatform.customJobs.get", "aiplatform.customJobs.list",
        "aiplatform.modelEvaluations.import", "aiplatform.modelEvaluations.list",
        "aiplatform.models.get", "aiplatform.models.list", "aiplatform.models.update", "aiplatform.models.upload",
        # Rolling promoted versions out to their model's endpoint, judged on its Cloud Monitoring figures (issue 41).
        "aiplatform.endpoints.create", "aiplatform.endpoints.deploy", "aiplatform.endpoints.get",
        "aiplatform.endpoints.undeploy", "aiplatform.endpoints.update", "monitoring.timeSeries.list",
        # Each `_SCORE` marker's BatchPredictionJob, made if a crash left it unmade, read until it ends (issue 41).
        "aiplatform.batchPredictionJobs.create", "aiplatform.batchPredictionJobs.get", "aiplatform.batchPredictionJobs.list",
        # A reserved rung's reservation (issue 43): reconcile admits the runs of the windows it closes (issue 42).
        "compute.reservations.get",
        # The teams' warm pools (issue 43): reconcile creates, watches and deletes their persistent resources.
        "aiplatform.persistentResources.create", "aiplatform.persistentResources.delete", "aiplatform.persistentResources.get",
      ]
      trigger = null
    }
  }

  # One entry per (function, data bucket) pair for the read grants.
  data_readers = merge([
    for name, f in local.functions : { for b in local.data_buckets : "${name}/${b}" => { function = name, bucket = b } } if f.reads_data
  ]...)

  # One entry per (function, output bucket) pair: the functions that observe jobs read what custom images wrote
  # there (metrics.json, progress.json, failure.json) and list it when diagnosing a failure.
  output_readers = merge([
    for name, f in local.functions : { for b in var.output_buckets : "${name}/${b}" => { function = name, bucket = b } } if f.reads_outputs
  ]...)
}
