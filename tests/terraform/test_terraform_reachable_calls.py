"""Every Cloud Storage, Pub/Sub, Cloud Quotas and Vertex AI (JobService, Model Registry) call a function can reach is
granted to that function's account in Terraform, and each function holds exactly the Vertex AI permissions of the calls
it can reach (issue 40, point 6).

The calls come from a static call graph over functions/*.py (reachable_calls.py), starting at each entry point
of functions/main.py. Each adapter method maps to the IAM permissions it needs, each call site to the
resource it touches; Terraform's grants map through their roles to the same permissions. A new adapter
method, or a new call site of one, fails here until it is classified, so a grant cannot be forgotten.
"""

from __future__ import annotations

import ast

import pytest
from reachable_calls import FUNCTIONS_DIR, CallGraph, Site

import functions.main

GCS = "functions.cloud.gcs.Gcs"
PUBLISHER = "functions.cloud.publisher.EventPublisher"
QUOTAS = "functions.cloud.quotas.GpuQuotas"
REGISTRY = "functions.cloud.registry.ModelRegistry"
VERTEX = "functions.cloud.vertex.VertexJobs"
ENDPOINTS = "functions.cloud.endpoints.Endpoints"
MONITORING = "functions.cloud.monitoring.ServingMetrics"
BATCH = "functions.cloud.batch_predictions.VertexBatchPredictions"
COMPUTE = "functions.cloud.reservations.ComputeReservations"
PERSISTENT = "functions.cloud.persistent_resources.PersistentResources"
# The custom role each function's Vertex AI permissions are granted by (terraform/iam.tf).
VERTEX_ROLE = "${google_project_iam_custom_role.function_vertex[each.key].id}"

# What each adapter method needs. Replacing an existing object needs storage.objects.delete as well as
# .create (https://cloud.google.com/storage/docs/access-control/iam-permissions, the note under
# storage.objects.create); the ledger's compare-and-swap rewrites do exactly that.
ADAPTER_PERMISSIONS: dict[tuple[str, str], frozenset[str]] = {
    (GCS, "__init__"): frozenset(),  # builds an authorised session; calls nothing
    (GCS, "read"): frozenset({"storage.objects.get"}),
    (GCS, "read_range"): frozenset({"storage.objects.get"}),  # a media download with a Range header
    (GCS, "digest"): frozenset({"storage.objects.get"}),  # a media download, hashed as it streams
    (GCS, "write"): frozenset({"storage.objects.create", "storage.objects.delete"}),
    (GCS, "delete"): frozenset({"storage.objects.delete"}),
    # objects.rewrite: get on the source, create (and delete, to replace) on the destination; the sites below name
    # the destination, and each source is one the caller reads anyway (its comment says which grant holds get).
    (GCS, "copy"): frozenset({"storage.objects.get", "storage.objects.create", "storage.objects.delete"}),
    (GCS, "any_under"): frozenset({"storage.objects.list"}),
    (GCS, "names"): frozenset({"storage.objects.list"}),
    (GCS, "objects_under"): frozenset({"storage.objects.list"}),  # the admission preflight's listing
    (GCS, "metadata_under"): frozenset({"storage.objects.list"}),  # the history index, names with their metadata
    (GCS, "listing"): frozenset({"storage.objects.list"}),  # names with generation, CRC32C, update time (issue 42)
    # objects.patch of custom metadata (the reconcile sweep's notes on active entries): storage.objects.update.
    (GCS, "set_metadata"): frozenset({"storage.objects.update"}),
    (PUBLISHER, "__init__"): frozenset(),
    (PUBLISHER, "publish"): frozenset({"pubsub.topics.publish"}),
    (QUOTAS, "__init__"): frozenset(),  # the session is built on first use
    # quotaInfos.get needs cloudquotas.quotas.get on the quota's name (Cloud Quotas REST reference).
    (QUOTAS, "limit"): frozenset({"cloudquotas.quotas.get"}),
    (QUOTAS, "limit_in_words"): frozenset({"cloudquotas.quotas.get"}),  # trainctl plan --quota, as `limit`
    # The ModelService (functions/cloud/registry.py), each method's permission from its REST reference page
    # (cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models…, "IAM Permissions"). Not stated
    # there: ListModelVersions (models.list assumed; models.get is granted as well) and GetOperation of an upload
    # (the IAM permissions page gives a long-running operation's GET the resource's `.get`).
    (REGISTRY, "__init__"): frozenset(),  # builds a session; calls nothing
    (REGISTRY, "model_name"): frozenset(),  # a name, no call
    (REGISTRY, "get"): frozenset({"aiplatform.models.get"}),
    (REGISTRY, "find_version"): frozenset({"aiplatform.models.list"}),
    (REGISTRY, "versions"): frozenset({"aiplatform.models.list"}),
    (REGISTRY, "models"): frozenset({"aiplatform.models.list"}),
    (REGISTRY, "upload"): frozenset({"aiplatform.models.upload"}),
    (REGISTRY, "operation"): frozenset({"aiplatform.models.get"}),
    (REGISTRY, "merge_aliases"): frozenset({"aiplatform.models.update"}),
    (REGISTRY, "evaluations"): frozenset({"aiplatform.modelEvaluations.list"}),
    (REGISTRY, "import_evaluation"): frozenset({"aiplatform.modelEvaluations.import"}),
    # The JobService (functions/cloud/vertex.py), each method's permission from its REST reference page
    # (cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs…, "IAM Permissions").
    (VERTEX, "find"): frozenset({"aiplatform.customJobs.list"}),  # ListCustomJobs by the attempt's labels
    # Looks first (ListCustomJobs), creates only when none is found, looks again before each retry.
    (VERTEX, "find_or_create"): frozenset({"aiplatform.customJobs.list", "aiplatform.customJobs.create"}),
    (VERTEX, "active_jobs"): frozenset({"aiplatform.customJobs.list"}),
    (VERTEX, "get"): frozenset({"aiplatform.customJobs.get"}),
    (VERTEX, "cancel"): frozenset({"aiplatform.customJobs.cancel"}),
    # The EndpointService (functions/cloud/endpoints.py), each method's permission from its REST reference page
    # (cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.endpoints…, "IAM Permissions"); an
    # endpoint's operation is read with the endpoint's `.get`, as the registry's uploads are.
    (ENDPOINTS, "__init__"): frozenset(),
    (ENDPOINTS, "endpoint_name"): frozenset(),  # a name, no call
    (ENDPOINTS, "get"): frozenset({"aiplatform.endpoints.get"}),
    (ENDPOINTS, "create"): frozenset({"aiplatform.endpoints.create"}),
    (ENDPOINTS, "deploy"): frozenset({"aiplatform.endpoints.deploy"}),
    (ENDPOINTS, "undeploy"): frozenset({"aiplatform.endpoints.undeploy"}),
    (ENDPOINTS, "set_traffic"): frozenset({"aiplatform.endpoints.update"}),
    (ENDPOINTS, "operation"): frozenset({"aiplatform.endpoints.get"}),
    (ENDPOINTS, "predict"): frozenset({"aiplatform.endpoints.predict"}),  # trainctl predict only
    # Cloud Monitoring's timeSeries.list (https://cloud.google.com/monitoring/access-control#monitoring-perms).
    (MONITORING, "__init__"): frozenset(),
    (MONITORING, "figures"): frozenset({"monitoring.timeSeries.list"}),
    # The JobService's BatchPredictionJobs (functions/cloud/batch_predictions.py), each method's permission from its
    # REST reference page (cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.batchPredictionJobs…,
    # "IAM Permissions").
    (BATCH, "__init__"): frozenset(),
    (BATCH, "find"): frozenset({"aiplatform.batchPredictionJobs.list"}),  # ListBatchPredictionJobs by label
    (BATCH, "find_or_create"): frozenset(
        {"aiplatform.batchPredictionJobs.list", "aiplatform.batchPredictionJobs.create"}
    ),
    (BATCH, "get"): frozenset({"aiplatform.batchPredictionJobs.get"}),
    (BATCH, "cancel"): frozenset({"aiplatform.batchPredictionJobs.cancel"}),
    # Compute Engine's reservations.get (cloud.google.com/compute/docs/reference/rest/v1/reservations/get, "IAM
    # Permissions"): a reserved rung's reservation, read at admission (issue 43).
    (COMPUTE, "__init__"): frozenset(),  # the session is built on first use
    # The PersistentResourceService (functions/cloud/persistent_resources.py): the teams' warm pools (issue 43), each
    # method's permission from its REST reference page (cloud.google.com/vertex-ai/docs/reference/rest/v1/
    # projects.locations.persistentResources…, "IAM Permissions"; the Vertex AI IAM permissions page).
    (PERSISTENT, "__init__"): frozenset(),
    (PERSISTENT, "resource_name"): frozenset(),  # a name, no call
    (PERSISTENT, "get"): frozenset({"aiplatform.persistentResources.get"}),
    (PERSISTENT, "create"): frozenset({"aiplatform.persistentResources.create"}),
    (PERSISTENT, "delete"): frozenset({"aiplatform.persistentResources.delete"}),
    (COMPUTE, "get"): frozenset({"compute.reservations.get"}),
}

# Which resource each call site touches: "data" (the data bucket and extra_data_buckets), "control" (the
# control bucket: ledger, templates, run outputs) or "events" (the events topic). Keyed by the calling
# function, or by a class for all its methods, and the adapter method ("*": any).
SITE_RESOURCES: dict[tuple[str, str], frozenset[str]] = {
    # Ledger(gcs, settings.control_bucket), built in handlers.controller().
    ("functions.ledger.requests.Ledger", "*"): frozenset({"control"}),
    # QuotaPools(gcs, ledger.bucket): trainctl's GPU holdings live in the control bucket beside the ledger.
    ("functions.capacity.quota_pool.QuotaPools", "*"): frozenset({"control"}),
    # The one EventPublisher is built for settings.events_topic.
    (PUBLISHER, "*"): frozenset({"events"}),
    # GpuQuotas(settings.project, …) reads the project's QuotaInfos.
    (QUOTAS, "*"): frozenset({"project"}),
    # ModelRegistry(settings.project, settings.region, …): the project's models (a project-level grant).
    (REGISTRY, "*"): frozenset({"project"}),
    # VertexJobs(settings.project, settings.region, …): the project's CustomJobs, in any region (a project-level grant).
    (VERTEX, "*"): frozenset({"project"}),
    # Endpoints(settings.project, settings.region, …) and ServingMetrics(settings.project, …): the project's.
    (ENDPOINTS, "*"): frozenset({"project"}),
    (MONITORING, "*"): frozenset({"project"}),
    # VertexBatchPredictions(settings.project, settings.region, …): the project's BatchPredictionJobs.
    (BATCH, "*"): frozenset({"project"}),
    # ComputeReservations reads the deployment's project's reservations (a shared one's owner grants its own).
    (COMPUTE, "*"): frozenset({"project"}),
    # Each batch scoring's record and the index of those unfinished (functions/ledger/scoring_records.py).
    ("functions.ledger.scoring_records.ScoringLedger", "*"): frozenset({"control"}),
    # Each warm pool's record (functions/ledger/pool_records.py).
    ("functions.ledger.pool_records.PoolLedger", "*"): frozenset({"control"}),
    (PERSISTENT, "*"): frozenset({"project"}),
    # A `_SCORE` marker's folder, listed for its CSV files: a watched (data) bucket.
    ("functions.models.scoring.Scorings._new_record", "objects_under"): frozenset({"data"}),
    # Each coalescing rule's windows (issue 42, functions/ledger/window_records.py) beside the ledger.
    ("functions.ledger.window_records.WindowRecords", "*"): frozenset({"control"}),
    # Each served endpoint's record (issue 41) beside the model records.
    ("functions.ledger.endpoint_records.EndpointLedger", "*"): frozenset({"control"}),
    # The per-model records (functions/ledger/model_records.py) live in the control bucket beside the ledger.
    ("functions.ledger.model_records.ModelLedger", "*"): frozenset({"control"}),
    # Each model's charter (issue 38) beside them.
    ("functions.ledger.model_records.ModelCharters", "*"): frozenset({"control"}),
    # Each team's monthly budget records (issue 40) beside them, changed by compare-and-swap.
    ("functions.ledger.budget_records.BudgetRecords", "*"): frozenset({"control"}),
    # The registered copies (functions/models/artifacts.py) are written to the control bucket: a run's model folder
    # (listed where it is: the control bucket or an operator output bucket, both read by the observers), and a
    # reference set from a data bucket (read by the intake functions, function_reads_data) or a version's copy.
    ("functions.models.artifacts.copy_model_folder", "objects_under"): frozenset({"control", "outputs"}),
    ("functions.models.artifacts.copy_model_folder", "copy"): frozenset({"control"}),
    ("functions.models.artifacts.copy_reference", "objects_under"): frozenset({"data"}),
    ("functions.models.artifacts.copy_reference", "copy"): frozenset({"control"}),
    ("functions.models.artifacts.reference_from_version", "copy"): frozenset({"control"}),
    # metrics.json of the run being registered: its output folder (control bucket, or an operator output bucket).
    ("functions.models.promotion.Promotion._metrics", "read"): frozenset({"control", "outputs"}),
    # The marker is read from the bucket its event came from: a watched (data) bucket.
    ("functions.intake.markers.Markers._overrides", "read"): frozenset({"data"}),
    # A schedule tick's or an alert's rule is listed for its newest marker (issue 42): a watched (data) bucket.
    ("functions.intake.rule_triggers.newest_marker", "listing"): frozenset({"data"}),
    # Trigger templates (gs:// in trigger_rules) are kept in the control bucket (terraform/README.md).
    ("functions.intake.markers.Markers.template", "read"): frozenset({"control"}),
    # OutputClaims(gcs, ledger, …): the index of output folders lives in the control bucket beside the ledger.
    ("functions.ledger.output_claims.OutputClaims", "*"): frozenset({"control"}),
    # What the job wrote under output_dir (metrics.json, progress.json, the trainer's failure note), which the
    # guardrails keep in the request's own folder of the control bucket or, for a custom image, in an operator
    # output bucket (var.output_buckets).
    ("functions.lifecycle.observation.Observation._job_output", "read"): frozenset({"control", "outputs"}),
    # Diagnosis lists the dataset (data) and the run's output folder (control or an output bucket).
    ("functions.lifecycle.observation.Observation._diagnose", "any_under"): frozenset({"data", "control", "outputs"}),
    # Admission's preflight lists the request's dataset.
    ("functions.intake.preparation.Preparation._dataset_problem", "objects_under"): frozenset({"data"}),
    # The data check at admission (issue 27): the champion's schema.json, read only from the control bucket (the
    # built-in trainer's runs; functions/data/admission.py leaves a champion elsewhere unchecked), then the
    # dataset's listing and the first data file's header or footer.
    ("functions.data.admission.check_dataset", "read"): frozenset({"control"}),
    ("functions.data.admission._first_header", "objects_under"): frozenset({"data"}),
    ("functions.data.admission._read_header", "read_range"): frozenset({"data"}),
    # Each model's run slot (issue 42, model.concurrency) beside the model records.
    ("functions.ledger.run_slots.RunSlots", "*"): frozenset({"control"}),
    # A model request's dataset fingerprint (issue 42, model.skip_unchanged): one listing of its dataset.
    ("functions.data.fingerprint.dataset_fingerprint", "listing"): frozenset({"data"}),
    # Packages verified at intake (issue 38): admission keeps a package's URIs to the data buckets.
    ("functions.intake.package_check.check_packages", "digest"): frozenset({"data"}),
    # trainctl's secret launcher package (issue 40), written to launchers/ of the control bucket before a package job
    # with secret_env is created (functions/jobs/secret_env.py).
    ("functions.intake.submission.Submission._stage_launcher", "write"): frozenset({"control"}),
}

# The storage and Pub/Sub permissions of the roles Terraform grants the functions
# (https://cloud.google.com/storage/docs/access-control/iam-roles, https://cloud.google.com/pubsub/docs/access-control).
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.objectUser": frozenset(
        {
            "storage.objects.get",
            "storage.objects.list",
            "storage.objects.create",
            "storage.objects.delete",
            "storage.objects.update",
        }
    ),
    "roles/pubsub.publisher": frozenset({"pubsub.topics.publish"}),
    # https://cloud.google.com/docs/quotas/permissions: the viewer role reads quota infos and preferences.
    "roles/cloudquotas.viewer": frozenset({"cloudquotas.quotas.get"}),
}

# How Terraform names the resources of SITE_RESOURCES in a grant.
TERRAFORM_RESOURCES = {
    ("bucket", "${google_storage_bucket.control.name}"): "control",
    ("topic", "${google_pubsub_topic.events.id}"): "events",
    ("project", "${var.project}"): "project",
}
# Grants to some functions on each of a list of buckets: (for_each, the function flag selecting them, the buckets).
PER_BUCKET_GRANTS = {
    "${local.data_readers}": ("reads_data", "data"),
    "${local.output_readers}": ("reads_outputs", "outputs"),
}


def entry_points() -> list[str]:
    tree = ast.parse((FUNCTIONS_DIR / "main.py").read_text())
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]


@pytest.fixture(scope="module")
def graph() -> CallGraph:
    return CallGraph(
        {GCS, PUBLISHER, QUOTAS, REGISTRY, VERTEX, ENDPOINTS, MONITORING, BATCH, COMPUTE, PERSISTENT},
        ports={
            "functions.cloud.ports.Storage": GCS,
            "functions.cloud.ports.Events": PUBLISHER,
            "functions.cloud.ports.Quotas": QUOTAS,
            "functions.cloud.ports.Registry": REGISTRY,
            # Jobs is VertexJobs in the deployed functions (LazyJobs builds one on first use and hands calls to it).
            "functions.cloud.ports.Jobs": VERTEX,
            "functions.cloud.ports.Endpoints": ENDPOINTS,
            "functions.cloud.ports.Metrics": MONITORING,
            "functions.cloud.ports.BatchPredictions": BATCH,
            "functions.cloud.ports.Reservations": COMPUTE,
            "functions.cloud.ports.PersistentResources": PERSISTENT,
        },
    )


def site_resources(site: Site, graph: CallGraph) -> frozenset[str]:
    owner = graph.owner.get(site.caller, "")
    for key in [(site.caller, site.method), (site.caller, "*"), (owner, site.method), (owner, "*")]:
        if key in SITE_RESOURCES:
            return SITE_RESOURCES[key]
    for key in [(site.adapter, site.method), (site.adapter, "*")]:
        if key in SITE_RESOURCES:
            return SITE_RESOURCES[key]
    raise AssertionError(
        f"{site.caller} calls {site.adapter}.{site.method}: add to SITE_RESOURCES which resource it touches"
    )


def needed(function: str, graph: CallGraph) -> dict[tuple[str, str], list[str]]:
    """(resource, permission) -> the call sites that need it, for one entry point."""
    need: dict[tuple[str, str], list[str]] = {}
    for site in graph.reachable_sites(f"functions.main.{function}"):
        permissions = ADAPTER_PERMISSIONS.get((site.adapter, site.method))
        assert permissions is not None, (
            f"{site.adapter}.{site.method} is not in ADAPTER_PERMISSIONS: say which IAM permissions it needs"
        )
        if not permissions:
            continue
        for resource in site_resources(site, graph):
            for permission in permissions:
                need.setdefault((resource, permission), []).append(f"{site.caller} -> {site.method}")
    return need


def granted(tf, function: str) -> set[tuple[str, str]]:
    """(resource, permission) pairs Terraform grants one function's service account on buckets, topics and the
    project (project-level roles outside ROLE_PERMISSIONS, such as Vertex's, are not modelled here)."""
    functions = tf.locals["functions"]
    for local_name, (flag, _) in PER_BUCKET_GRANTS.items():
        assert f" if f.{flag}]" in tf.locals[local_name[8:-1]], f"{local_name} must select functions by {flag}"
    pairs: set[tuple[str, str]] = set()
    for kind in ("google_storage_bucket_iam_member", "google_pubsub_topic_iam_member", "google_project_iam_member"):
        for name, body in tf.of_kind(kind).items():
            if not body["member"].startswith("${google_service_account.function["):
                continue
            if body["role"] == VERTEX_ROLE:  # a custom role per function: its vertex_permissions
                assert body["for_each"] == "${local.functions}", f"{kind}.{name}"
                pairs |= {("project", p) for p in functions[function]["vertex_permissions"]}
                continue
            if kind == "google_project_iam_member" and body["role"] not in ROLE_PERMISSIONS:
                continue
            assert "condition" not in body, f"{kind}.{name}: conditional grants are not modelled here"
            field = next(f for f in ("bucket", "topic", "project") if f in body)
            if body["for_each"] == "${local.functions}":
                holders = set(functions)
                resource = TERRAFORM_RESOURCES.get((field, body[field]))
            elif body["for_each"] in PER_BUCKET_GRANTS:
                flag, resource = PER_BUCKET_GRANTS[body["for_each"]]
                holders = {f for f, spec in functions.items() if spec[flag] is True}
                assert (field, body[field]) == ("bucket", "${each.value.bucket}"), f"{kind}.{name}"
            else:
                raise AssertionError(f"{kind}.{name}: teach this test its for_each {body['for_each']}")
            assert resource is not None, f"{kind}.{name}: teach this test what {field} {body[field]} is"
            if function in holders:
                pairs |= {(resource, p) for p in ROLE_PERMISSIONS[body["role"]]}
    return pairs


def test_every_adapter_method_is_classified():
    """Guards issue 12 point 11: a new Gcs or EventPublisher method must say which permissions it needs."""
    for adapter, path in [
        (GCS, "cloud/gcs.py"),
        (PUBLISHER, "cloud/publisher.py"),
        (QUOTAS, "cloud/quotas.py"),
        (REGISTRY, "cloud/registry.py"),
        (VERTEX, "cloud/vertex.py"),
        (ENDPOINTS, "cloud/endpoints.py"),
        (MONITORING, "cloud/monitoring.py"),
        (BATCH, "cloud/batch_predictions.py"),
        (COMPUTE, "cloud/reservations.py"),
    ]:
        class_name = adapter.rsplit(".", 1)[1]
        tree = ast.parse((FUNCTIONS_DIR / path).read_text())
        (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
        methods = [n.name for n in cls.body if isinstance(n, ast.FunctionDef)]
        public = [m for m in methods if not m.startswith("_") or m == "__init__"]
        unclassified = [m for m in public if (adapter, m) not in ADAPTER_PERMISSIONS]
        assert unclassified == [], f"add {class_name}.{unclassified} to ADAPTER_PERMISSIONS"


def test_the_call_graph_sees_every_adapter_call(graph):
    """Guards issue 12 point 11: a call on something named like an adapter that the graph could not type
    would be a call the grant check silently skips."""
    assert graph.unresolved_adapter_looking_calls(("gcs", "publisher", "quotas", "registry")) == []


def test_the_call_graph_finds_known_paths(graph):
    """The graph is not vacuous: the ledger's writes and the failure diagnosis are reached where expected."""
    assert set(entry_points()) == set(functions.main.__all__)
    sites = graph.reachable_sites("functions.main.on_job_request")
    assert Site("functions.ledger.requests.Ledger.create", GCS, "write") in sites
    assert Site("functions.lifecycle.observation.Observation._diagnose", GCS, "any_under") in graph.reachable_sites(
        "functions.main.reconcile"
    )


@pytest.mark.parametrize("function", functions.main.__all__)
def test_each_function_is_granted_every_call_it_can_reach(tf, graph, function):
    """Guards issue 12 point 11: on_job_state and reconcile list the dataset when they diagnose a user failure,
    and the intake functions read it at admission; a call without its grant is a 403 in the cloud only."""
    assert function in entry_points()
    have = granted(tf, function)
    missing = {f"{resource}: {permission}": sites for (resource, permission), sites in needed(function, graph).items()}
    missing = {key: sites for key, sites in missing.items() if tuple(key.split(": ")) not in have}
    assert missing == {}, f"{function} calls these without a grant in terraform/"


@pytest.mark.parametrize("function", functions.main.__all__)
def test_each_function_may_read_the_gpu_quotas(tf, graph, function):
    """Guards issue 14 item 3: every function builds the Cloud Quotas client (any of them may admit a request:
    intake, resubmission, release from the quota queue), and Terraform grants each one the permission its
    quotaInfos.get needs, so the limit is not unknown (a 403) in the cloud only."""
    sites = graph.reachable_sites(f"functions.main.{function}")
    assert any(site.adapter == QUOTAS for site in sites), f"{function} never builds GpuQuotas"
    assert ("project", "cloudquotas.quotas.get") in granted(tf, function)


@pytest.mark.parametrize("function", functions.main.__all__)
def test_only_the_functions_that_observe_jobs_may_read_the_output_buckets(tf, graph, function):
    """Guards issue 24, point 4: custom images may write to the operator's output buckets; the functions that read
    what a job wrote there (metrics, progress, failure note) are granted it, and no other."""
    reads_outputs = any(resource == "outputs" for resource, _ in needed(function, graph))
    assert tf.locals["functions"][function]["reads_outputs"] is reads_outputs
    assert reads_outputs == (function in ("on_job_state", "reconcile"))


def test_the_model_steps_reach_the_registry_and_it_is_granted(tf, graph):
    """Issue 26, Terraform: the steps after a success (on_job_state and reconcile) upload, read, alias and evaluate
    versions, and the intake functions read the champion; the observers' Vertex roles cover each ModelService call."""
    observed = {(site.method, site.caller) for site in graph.reachable_sites("functions.main.reconcile")}
    assert ("upload", "functions.models.promotion.Promotion._upload") in observed
    assert ("merge_aliases", "functions.models.alias_moves.finish_move") in observed
    assert ("import_evaluation", "functions.models.promotion.Promotion._evaluate") in observed
    intake = graph.reachable_sites("functions.main.on_job_request")
    assert Site("functions.models.intake.ModelIntake._champion", REGISTRY, "get") in intake
    for function in ("on_job_state", "reconcile"):
        assert ("project", "aiplatform.models.upload") in granted(tf, function)
    assert ("project", "aiplatform.models.get") in granted(tf, "on_job_request")


@pytest.mark.parametrize("function", ["on_dataset_upload", "on_job_request"])
def test_the_data_check_reads_are_reached_by_intake_and_granted(tf, graph, function):
    """Issue 27, point 2: the intake functions read the champion's schema.json (control bucket) and the new dataset's
    header (data buckets) before any claim; both reads are in the graph, and granted."""
    sites = graph.reachable_sites(f"functions.main.{function}")
    assert Site("functions.data.admission._read_header", GCS, "read_range") in sites
    assert Site("functions.data.admission.check_dataset", GCS, "read") in sites
    assert {("data", "storage.objects.get"), ("control", "storage.objects.get")} <= granted(tf, function)


@pytest.mark.parametrize("function", functions.main.__all__)
def test_each_function_holds_exactly_the_vertex_permissions_it_can_reach(tf, graph, function):
    """Issue 40, point 6: every function held project-wide roles/aiplatform.user, every Vertex permission a user has
    (endpoints, datasets, pipelines, deleting models …). Each now holds a custom role with the permissions of the
    JobService and ModelService calls it can reach, no more and no fewer: the intake functions create jobs and read the
    champion; only the observers cancel, read jobs and register versions."""
    need = {p for (_, p) in needed(function, graph) if p.startswith(("aiplatform.", "monitoring.", "compute."))}
    assert set(tf.locals["functions"][function]["vertex_permissions"]) == need
    role = tf.resource("google_project_iam_custom_role", "function_vertex")
    assert (role["for_each"], role["permissions"]) == ("${local.functions}", "${each.value.vertex_permissions}")
    grant = tf.resource("google_project_iam_member", "function_uses_vertex")
    assert (grant["role"], grant["member"]) == (VERTEX_ROLE, "${google_service_account.function[each.key].member}")
    predefined = [
        (kind, name) for (kind, name), body in tf.resources.items()
        if kind.endswith("_iam_member") and body["member"].startswith("${google_service_account.function[")
        and body["role"].startswith("roles/aiplatform.")
    ]  # fmt: skip
    assert predefined == []


def test_the_intake_functions_never_cancel_or_register(tf, graph):
    """Issue 40, point 6: what narrowing bought, in words a reviewer can check."""
    intake = ["aiplatform.customJobs.create", "aiplatform.customJobs.list", "aiplatform.models.get"]
    # A reserved rung's reservation, read at admission (issue 43): read only, nothing else of Compute Engine.
    intake.append("compute.reservations.get")
    # A rung's persistent resource, read at admission (issue 43): read only; only reconcile makes and deletes pools.
    intake.append("aiplatform.persistentResources.get")
    # A `_SCORE` marker makes its BatchPredictionJob (issue 41): never cancels it either.
    scoring = [f"aiplatform.batchPredictionJobs.{verb}" for verb in ("create", "get", "list")]
    assert sorted(tf.locals["functions"]["on_dataset_upload"]["vertex_permissions"]) == sorted(intake + scoring)
    assert sorted(tf.locals["functions"]["on_job_request"]["vertex_permissions"]) == sorted(intake)


# Calls on receivers named like the Vertex client that are not JobService calls, each with what it is.
NOT_VERTEX_CALLS = {
    "functions.cloud.vertex.LazyJobs.prepare: threading.Thread": "starting the thread that builds the client",
    "functions.controller.Controller.from_settings: VERTEX_RETRIES.scaled": "a RetryPolicy",
    "functions.intake.submission.Submission._claim: self.jobs.prepare": "LazyJobs, building the client",
    "functions.intake.submission.Submission.submit: self.jobs.find_or_create": "LazyJobs, which hands it to VertexJobs",
    "functions.lifecycle.observation.Observation._job_by_id: self.jobs.parent.split": "a str",
    "functions.lifecycle.sweep.Listing.job_of: self.jobs.get": "a dict of job snapshots",
}


def test_the_call_graph_sees_every_vertex_call(graph):
    """A JobService call the graph could not type would be one the role check silently skips: every call on a receiver
    named like the Vertex client resolves to VertexJobs, or is one of the calls above."""
    calls = graph.unresolved_adapter_looking_calls(("vertex", "_jobs", "self.jobs"))
    assert [call for call in calls if not any(call.startswith(known) for known in NOT_VERTEX_CALLS)] == []
    for function in functions.main.__all__:
        assert Site(
            "functions.cloud.vertex.LazyJobs.find_or_create", VERTEX, "find_or_create"
        ) in graph.reachable_sites(f"functions.main.{function}")
