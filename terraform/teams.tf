# Teams (issue 32): each team's own request topic, delivered to on_job_request as the shared one is (triggers.tf:
# a push subscription whose path names the topic — the controller knows a request's team from that path, which no
# publisher can change), and publishers per team. A team's uploaders may create and replace objects only under its data
# prefixes, and create (never replace) under packages/<team>/ (an IAM condition on the object's name,
# cloud.google.com/storage/docs/samples/storage-add-bucket-conditional-iam-binding); its markers' trigger rules name the
# team in their template (`team`). Each team's watchers follow its events alone (watchers.tf).

resource "google_pubsub_topic" "team_requests" {
  # checkov:skip=CKV_GCP_83: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  for_each = local.teams

  name   = "${var.name_prefix}-requests-${each.key}"
  labels = merge(local.labels, { team = each.key })

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_topic_iam_member" "team_publisher" {
  for_each = { for pair in flatten([for name, team in local.teams : [for member in try(team.publishers, []) : { team = name, member = member }]]) : "${pair.team} ${pair.member}" => pair }

  topic  = google_pubsub_topic.team_requests[each.value.team].id
  role   = "roles/pubsub.publisher"
  member = each.value.member
}

# Where each team's uploaders may write: its data prefixes (create and replace), and its own packages/<team>/ folder
# (create only), where `trainctl submit --source` puts the team's code (issue 38: no other team can plant an object
# under a digest of this team's code). Every folder ends in exactly one '/' in the condition, whatever the variable
# holds (its validation requires it too): `vision` would also cover `vision-evil/`, another team's folder (issue 40,
# point 5).
locals {
  packages_prefix           = "packages/"
  team_data_upload_prefixes = { for name, team in local.teams : name => [for prefix in try(team.data_prefixes, []) : "${trimsuffix(prefix, "/")}/"] }
  team_upload_prefixes      = { for name, prefixes in local.team_data_upload_prefixes : name => concat(prefixes, ["${local.packages_prefix}${name}/"]) }
  # Every folder of the data bucket that is some team's: the deployment's other uploaders stay out of them (iam.tf).
  all_team_upload_prefixes = distinct(flatten(values(local.team_upload_prefixes)))
}

# Uploading needs storage.objects.create; replacing an object (a re-uploaded _SUCCESS or data file, a new generation of
# a marker) needs storage.objects.delete as well ("To replace an existing object, you need both storage.objects.create
# and storage.objects.delete", cloud.google.com/storage/docs/access-control/iam-permissions), which
# roles/storage.objectCreator lacks (issue 40, point 11) and roles/storage.objectUser has beside reads and updates. A
# custom role holds exactly the two, granted only under the uploader's folders.
resource "google_project_iam_custom_role" "data_uploader" {
  project     = var.project
  role_id     = "${replace(var.name_prefix, "-", "_")}_data_uploader"
  title       = "trainctl data uploader"
  description = "Create and replace objects (storage.objects.create and .delete), granted on the data bucket under an IAM condition on the object's name."
  permissions = ["storage.objects.create", "storage.objects.delete"]

  depends_on = [google_project_service.enabled]
}

resource "google_storage_bucket_iam_member" "team_uploader" {
  for_each = { for pair in flatten([for name, team in local.teams : [for member in try(team.uploaders, []) : { team = name, member = member }] if length(local.team_data_upload_prefixes[name]) > 0]) : "${pair.team} ${pair.member}" => pair }

  bucket = google_storage_bucket.data.name
  role   = google_project_iam_custom_role.data_uploader.id
  member = each.value.member

  condition {
    title       = "team-${each.value.team}-data"
    description = "Only under team ${each.value.team}'s data prefixes."
    expression  = join(" || ", [for prefix in local.team_data_upload_prefixes[each.value.team] : "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.data.name}/objects/${prefix}\")"])
  }
}

# A package is named by its content's sha256 and never needs replacing (`submit --source` creates it with
# ifGenerationMatch=0 and reuses one already there only when its hashes are the archive's). Create only: no uploader,
# of this team or any, can swap the code under a name between the controller's check at intake and a node's install.
resource "google_storage_bucket_iam_member" "team_package_uploader" {
  for_each = { for pair in flatten([for name, team in local.teams : [for member in try(team.uploaders, []) : { team = name, member = member }]]) : "${pair.team} ${pair.member}" => pair }

  bucket = google_storage_bucket.data.name
  role   = "roles/storage.objectCreator"
  member = each.value.member

  condition {
    title       = "team-${each.value.team}-packages"
    description = "Only under team ${each.value.team}'s packages folder, create only."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.data.name}/objects/${local.packages_prefix}${each.value.team}/\")"
  }
}

# ---------------------------------------------------------------------------------------------------
# Each team's own code (issue 38, point 4): every team but the default one runs its images and packages as an
# account of its own, which may write only its folder custom-runs/_teams/<team>/ of the control bucket, so one team's
# job can never rewrite another's metrics.json, model or schema.json (its promotion, its data contract). The
# controller sends a team's own code there, as this account (TRAINCTL_TEAMS' custom_service_account, locals.tf).
# Service account ids are at most 30 characters: the team's name is in the display name, a hash of it in the id.
locals {
  # What each team's requests may read, by bucket: its data prefixes and relative `reads` in the data bucket, its
  # `reads` written gs://bucket/folder/ in theirs, and its packages folder; each ending in exactly one '/'.
  team_read_uris = { for name, team in local.teams : name => distinct(concat(
    [for prefix in concat(try(team.data_prefixes, []), [for r in try(team.reads, []) : r if !startswith(r, "gs://")], ["${local.packages_prefix}${name}/"]) : "gs://${google_storage_bucket.data.name}/${trimsuffix(prefix, "/")}/"],
    [for r in try(team.reads, []) : "${trimsuffix(r, "/")}/" if startswith(r, "gs://")],
  )) }
  team_read_prefixes = { for name, uris in local.team_read_uris : name => { for bucket in local.data_buckets : bucket => [for uri in uris : trimprefix(uri, "gs://${bucket}/") if startswith(uri, "gs://${bucket}/")] } }
  team_read_conditions = { for name, buckets in local.team_read_prefixes : name => { for bucket, prefixes in buckets : bucket => join(" || ", concat(
    [for prefix in prefixes : "resource.name.startsWith(\"projects/_/buckets/${bucket}/objects/${prefix}\")"],
    [for prefix in prefixes : "api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${prefix}\")"],
  )) } }

  own_code_teams      = { for name, team in local.teams : name => team if name != try(var.teams.default_team, null) }
  team_custom_readers = { for pair in setproduct(keys(local.own_code_teams), local.data_buckets) : "${pair[0]}/${pair[1]}" => { team = pair[0], bucket = pair[1] } }
  team_custom_writers = { for pair in setproduct(keys(local.own_code_teams), var.output_buckets) : "${pair[0]}/${pair[1]}" => { team = pair[0], bucket = pair[1] } }
  team_custom_actors  = { for pair in setproduct(keys(local.functions), keys(local.own_code_teams)) : "${pair[0]}/${pair[1]}" => { function = pair[0], team = pair[1] } }
}

resource "google_service_account" "team_custom" {
  for_each = local.own_code_teams

  account_id   = "${var.name_prefix}-t-${substr(sha256(each.key), 0, 10)}"
  display_name = "trainctl team ${each.key}'s own code"
  description  = "Runs team ${each.key}'s images and packages inside Vertex AI CustomJobs: reads datasets, writes ${local.team_artifacts_prefix}${each.key}/ and the output buckets."

  depends_on = [google_project_service.enabled]
}

# A team's own code reads only what its requests may name as data (issue 40, point 5): its data prefixes, the
# operator's `reads` grants, and its packages folder, at a '/' boundary, and listings of them. Admission refuses a
# request naming other data (functions/teams.py); this grant is where that holds for code the team wrote, which may
# read whatever its account can.
resource "google_storage_bucket_iam_member" "team_custom_reads_data" {
  for_each = { for key, pair in local.team_custom_readers : key => pair if length(local.team_read_prefixes[pair.team][pair.bucket]) > 0 }

  bucket = each.value.bucket
  role   = "roles/storage.objectViewer"
  member = google_service_account.team_custom[each.value.team].member

  condition {
    title       = "team-${each.value.team}-readable-data"
    description = "Objects below team ${each.value.team}'s folders of this bucket, and listings of them."
    expression  = local.team_read_conditions[each.value.team][each.value.bucket]
  }
}

resource "google_storage_bucket_iam_member" "team_custom_writes_its_runs" {
  for_each = local.own_code_teams

  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectUser"
  member = google_service_account.team_custom[each.key].member

  condition {
    title       = "team-${each.key}-runs-only"
    description = "Objects below ${local.team_artifacts_prefix}${each.key}/, and listings of that prefix."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.control.name}/objects/${local.team_artifacts_prefix}${each.key}/\") || api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${local.team_artifacts_prefix}${each.key}/\")"
  }
}

resource "google_storage_bucket_iam_member" "team_custom_reads_models" {
  for_each = local.own_code_teams

  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.team_custom[each.key].member

  condition {
    title       = "registered-models-only"
    description = "Objects below ${join(" and ", local.model_prefixes)}, and listings of them."
    expression  = local.model_read_condition
  }
}

resource "google_storage_bucket_iam_member" "team_custom_writes_output_buckets" {
  for_each = local.team_custom_writers

  bucket = each.value.bucket
  role   = "roles/storage.objectUser"
  member = google_service_account.team_custom[each.value.team].member
}

# The controller creates a team's jobs to run as the team's account.
resource "google_service_account_iam_member" "function_acts_as_team_custom" {
  for_each = local.team_custom_actors

  service_account_id = google_service_account.team_custom[each.value.team].name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.function[each.value.function].member
}

