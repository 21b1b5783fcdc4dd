# Secrets by reference (issue 40, point 7): a request's trainer.secret_env names Secret Manager versions, which the
# job reads on its nodes as its own account (functions/jobs/secret_launcher.py); the controller never reads one.
# Access is granted secret by secret, to the one account each team's own code runs as (var.job_secrets), never on
# the project: `google_secret_manager_secret_iam_member` on the secret (its resource name, projects/P/secrets/S, is
# what `secret_id` takes, registry.terraform.io/providers/hashicorp/google/latest/docs/resources/
# secret_manager_secret_iam); roles/secretmanager.secretAccessor holds secretmanager.versions.access, which
# AccessSecretVersion needs (cloud.google.com/secret-manager/docs/access-control).
locals {
  # functions/jobs/secret_env.py LAUNCHERS_PREFIX: trainctl's secret launcher as a package, which a package job with
  # secret_env installs. Only the controller writes there (function_uses_control_bucket); the job accounts read it.
  launchers_prefix        = "launchers/"
  launcher_read_condition = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.control.name}/objects/${local.launchers_prefix}\") || api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${local.launchers_prefix}\")"
  # (team, secret) pairs: the default team's (or, without teams, everyone's) code runs as the custom images'
  # account, every other team's as its own (teams.tf).
  job_secret_grants = {
    for pair in flatten([for team, secrets in var.job_secrets : [for secret in secrets : { team = team, secret = secret }]]) :
    "${pair.team} ${pair.secret}" => pair
  }
  custom_secret_grants      = { for key, pair in local.job_secret_grants : key => pair if !contains(keys(local.own_code_teams), pair.team) }
  team_custom_secret_grants = { for key, pair in local.job_secret_grants : key => pair if contains(keys(local.own_code_teams), pair.team) }
}

resource "google_secret_manager_secret_iam_member" "custom_reads_secret" {
  for_each = local.custom_secret_grants

  secret_id = each.value.secret
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.custom.member
}

resource "google_secret_manager_secret_iam_member" "team_custom_reads_secret" {
  for_each = local.team_custom_secret_grants

  secret_id = each.value.secret
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.team_custom[each.value.team].member
}

resource "google_storage_bucket_iam_member" "custom_reads_launchers" {
  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.custom.member

  condition {
    title       = "secret-launcher-only"
    description = "Objects below ${local.launchers_prefix}, and listings of them."
    expression  = local.launcher_read_condition
  }
}

resource "google_storage_bucket_iam_member" "team_custom_reads_launchers" {
  for_each = local.own_code_teams

  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.team_custom[each.key].member

  condition {
    title       = "secret-launcher-only"
    description = "Objects below ${local.launchers_prefix}, and listings of them."
    expression  = local.launcher_read_condition
  }
}
