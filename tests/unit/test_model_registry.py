"""The local Model Registry's rules (local/jobservice/model_registry.py), without a server: uploads as
operations, versions and their ids, aliases and `default`, names with @version and @alias, listing, evaluations,
the project spelled by its number in every answer, and the refusals Vertex gives, each with the field it names."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import grpc
import pytest
from google.cloud.aiplatform_v1.types import (
    ImportModelEvaluationRequest,
    ListModelEvaluationsRequest,
    ListModelsRequest,
    ListModelVersionsRequest,
    MergeVersionAliasesRequest,
    UploadModelRequest,
    UploadModelResponse,
)

from local.jobservice.model_registry import ModelRegistry
from local.jobservice.model_rules import (
    CONTAINER_SPEC_REQUIRED,
    RegistryError,
    derived_project_number,
    project_numbers,
)
from local.jobservice.model_store import ModelStore

PARENT = "projects/p/locations/us-central1"
CHURN = f"{PARENT}/models/churn"
# Vertex answers with the project's number whichever spelling a request used; the tests pin project p's.
NUMBER = "123456789012"
NUMBERS = project_numbers({"p": NUMBER})
ANSWERED_PARENT = f"projects/{NUMBER}/locations/us-central1"
ANSWERED_CHURN = f"{ANSWERED_PARENT}/models/churn"
# Every upload names its serving container: Vertex requires one for any model but AutoML's (issue 40, point 13).
SERVING = {"image_uri": "us-docker.pkg.dev/p/serving/churn:1"}


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture
def registry() -> ModelRegistry:
    return ModelRegistry(upload_seconds=0, numbers=NUMBERS)


def upload(registry: ModelRegistry, model_id: str = "churn", parent_model: str = "", **model: object) -> str:
    """Upload a version; returns its version id (the registry's operation is done at once here)."""
    request = UploadModelRequest(
        parent=PARENT,
        model_id="" if parent_model else model_id,
        parent_model=parent_model,
        model={"display_name": model_id, "container_spec": SERVING, **model},
    )
    operation = registry.upload(request)
    assert operation.done
    return UploadModelResponse.deserialize(operation.response.value).model_version_id


def aliases(registry: ModelRegistry, model: str = CHURN) -> dict[str, list[str]]:
    listed = registry.list_versions(ListModelVersionsRequest(name=model))
    return {version.version_id: list(version.version_aliases) for version in listed.models}


def merge(registry: ModelRegistry, name: str, *entries: str) -> None:
    registry.merge_version_aliases(MergeVersionAliasesRequest(name=name, version_aliases=list(entries)))


def refusal(call, *args) -> RegistryError:
    with pytest.raises(RegistryError) as raised:
        call(*args)
    return raised.value


def test_the_first_version_gets_the_default_alias_and_later_ones_only_when_they_ask(registry: ModelRegistry):
    """Issue 26, the local stack: "the first version automatically gets assigned the default alias";
    a later upload moves it only with `default` in version_aliases (the SDK's is_default_version)."""
    assert upload(registry) == "1"
    assert upload(registry, parent_model=CHURN, version_aliases=["challenger"]) == "2"
    assert aliases(registry) == {"1": ["default"], "2": ["challenger"]}

    assert upload(registry, parent_model=CHURN, version_aliases=["default"]) == "3"

    assert aliases(registry) == {"1": [], "2": ["challenger"], "3": ["default"]}
    assert registry.get(CHURN).version_id == "3"


def test_an_upload_is_an_operation_and_its_version_exists_once_the_operation_is_done():
    """Issue 26, the local stack: UploadModel is a long-running operation named models/M/operations/ID; the
    version cannot be read (nor the new model listed) until it is done."""
    clock = Clock()
    registry = ModelRegistry(now=clock, upload_seconds=2, numbers=NUMBERS)
    operation = registry.upload(
        UploadModelRequest(parent=PARENT, model_id="churn", model={"display_name": "c", "container_spec": SERVING})
    )

    assert operation.name.startswith(f"{ANSWERED_CHURN}/operations/")
    assert not operation.done
    assert refusal(registry.get, CHURN).code == grpc.StatusCode.NOT_FOUND
    assert registry.list_models(ListModelsRequest(parent=PARENT)).models == []
    assert refusal(
        registry.upload,
        UploadModelRequest(parent=PARENT, model_id="churn", model={"display_name": "c", "container_spec": SERVING}),
    )

    clock.advance(2)
    done = registry.get_operation(operation.name)

    assert done.done
    response = UploadModelResponse.deserialize(done.response.value)
    assert (response.model, response.model_version_id) == (ANSWERED_CHURN, "1")
    assert registry.get(CHURN).version_aliases == ["default"]


def test_a_name_reads_the_default_version_a_version_id_or_an_alias(registry: ModelRegistry):
    """Issue 26, the local stack: GetModel reads `M` (default), `M@2` (version id) and `M@champion` (alias)."""
    upload(registry, artifact_uri="gs://bucket/one")
    upload(registry, parent_model=CHURN, artifact_uri="gs://bucket/two", version_aliases=["champion"])

    assert registry.get(CHURN).artifact_uri == "gs://bucket/one"
    assert registry.get(f"{CHURN}@2").artifact_uri == "gs://bucket/two"
    assert registry.get(f"{CHURN}@champion").version_id == "2"
    assert registry.get(f"{CHURN}@champion").name == ANSWERED_CHURN  # the name without the version
    for unknown in (f"{PARENT}/models/nope", f"{CHURN}@3", f"{CHURN}@golden"):
        assert refusal(registry.get, unknown).code == grpc.StatusCode.NOT_FOUND, unknown


def test_an_alias_names_one_version_and_giving_it_to_another_moves_it(registry: ModelRegistry):
    """Issue 26, the local stack: "If you apply an existing alias that is used in another model version, the
    alias is removed from that version"; the default alias moves the same way."""
    upload(registry)
    upload(registry, parent_model=CHURN, version_aliases=["champion"])
    upload(registry, parent_model=CHURN)

    merge(registry, f"{CHURN}@3", "champion", "default")

    assert aliases(registry) == {"1": [], "2": [], "3": ["champion", "default"]}


def test_the_default_alias_cannot_be_removed_only_moved(registry: ModelRegistry):
    """Issue 26, the local stack: one version carries `default` at all times."""
    upload(registry)
    upload(registry, parent_model=CHURN)

    refused = refusal(merge, registry, f"{CHURN}@1", "-default")

    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.violations[0][0] == "version_aliases[0]"
    assert aliases(registry) == {"1": ["default"], "2": []}


def test_removing_an_alias_the_version_lacks_is_refused_and_add_with_remove_cancel_out(registry: ModelRegistry):
    """Issue 26, the local stack: "Adding and deleting the same alias in the request ... will be cancelled out"."""
    upload(registry)
    upload(registry, parent_model=CHURN, version_aliases=["champion"])

    assert refusal(merge, registry, f"{CHURN}@1", "-champion").code == grpc.StatusCode.FAILED_PRECONDITION
    merge(registry, f"{CHURN}@1", "golden", "-golden")
    merge(registry, f"{CHURN}@2", "-champion", "staging")

    assert aliases(registry) == {"1": ["default"], "2": ["staging"]}


@pytest.mark.parametrize("alias", ["1", "12", "a", "Champion", "champ_ion", "champion-", "-x", "x" * 129])
def test_an_alias_vertex_would_not_take_is_refused_naming_the_field(registry: ModelRegistry, alias: str):
    """Issue 26, the local stack: an alias is [a-z][a-z0-9-]{0,126}[a-z0-9]: never read as a version id."""
    upload(registry)

    refused = refusal(merge, registry, f"{CHURN}@1", alias)
    uploaded = refusal(lambda: upload(registry, "other", version_aliases=[alias]))

    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.violations[0][0] == "version_aliases[0]"
    assert "List of found errors" in refused.message
    assert uploaded.code == grpc.StatusCode.INVALID_ARGUMENT


def test_merge_and_delete_take_a_version_id_not_an_alias(registry: ModelRegistry):
    """Issue 26, the local stack: DeleteModelVersion and MergeVersionAliases name "a version ID explicitly"."""
    upload(registry)
    upload(registry, parent_model=CHURN, version_aliases=["champion"])

    for call in (lambda: merge(registry, f"{CHURN}@champion", "golden"), lambda: registry.delete_version(CHURN)):
        refused = refusal(call)
        assert (refused.code, refused.violations[0][0]) == (grpc.StatusCode.INVALID_ARGUMENT, "name")


@pytest.mark.parametrize("model_id", ["churn", "_churn", "c", "churn_model-2", "c" * 63])
def test_a_model_id_by_vertex_rules_is_taken(registry: ModelRegistry, model_id: str):
    """Issue 26, the local stack: a model_id Vertex accepts becomes the last part of the model's name."""
    upload(registry, model_id)

    assert registry.get(f"{PARENT}/models/{model_id}").display_name == model_id


@pytest.mark.parametrize("model_id", ["1churn", "-churn", "Churn", "churn.v2", "c" * 64])
def test_a_model_id_vertex_would_not_take_is_refused_naming_the_field(registry: ModelRegistry, model_id: str):
    """Issue 26, the local stack: model_id is up to 63 of [a-z0-9_-], not starting with a digit or '-'."""
    refused = refusal(upload, registry, model_id)

    assert (refused.code, refused.violations[0][0]) == (grpc.StatusCode.INVALID_ARGUMENT, "model_id")


def test_a_model_id_in_use_is_already_exists_and_an_unknown_parent_model_not_found(registry: ModelRegistry):
    """Issue 26, the local stack: a second model under one id is ALREADY_EXISTS; a version of a model that does
    not exist is NOT_FOUND."""
    upload(registry)

    assert refusal(upload, registry).code == grpc.StatusCode.ALREADY_EXISTS
    assert refusal(upload, registry, "x", f"{PARENT}/models/nope").code == grpc.StatusCode.NOT_FOUND


def test_a_model_without_a_model_id_gets_a_numeric_one(registry: ModelRegistry):
    """Issue 26, the local stack: without model_id, Vertex names the model with a numeric id."""
    operation = registry.upload(
        UploadModelRequest(parent=PARENT, model={"display_name": "anonymous", "container_spec": SERVING})
    )

    model = UploadModelResponse.deserialize(operation.response.value).model
    assert model.startswith(f"{ANSWERED_PARENT}/models/") and model.rsplit("/", 1)[1].isdigit()


def test_the_only_version_and_the_default_one_cannot_be_deleted_and_ids_are_never_reused(registry: ModelRegistry):
    """Issue 26, the local stack: "Deleting the only version in the Model is not allowed"; the version carrying
    `default` is refused too (FAILED_PRECONDITION), and a deleted version's id is not given again."""
    upload(registry)
    only = refusal(registry.delete_version, f"{CHURN}@1")
    assert only.code == grpc.StatusCode.FAILED_PRECONDITION and "delete the model instead" in only.message
    upload(registry, parent_model=CHURN)
    default = refusal(registry.delete_version, f"{CHURN}@1")
    assert default.code == grpc.StatusCode.FAILED_PRECONDITION and "carries the default alias" in default.message

    deleted = registry.delete_version(f"{CHURN}@2")

    assert deleted.done and deleted.name.startswith(f"{ANSWERED_CHURN}/operations/")
    assert registry.get_operation(deleted.name) == deleted
    assert upload(registry, parent_model=CHURN) == "3"
    assert aliases(registry) == {"1": ["default"], "3": []}
    registry.delete_model(CHURN)
    assert refusal(registry.get, CHURN).code == grpc.StatusCode.NOT_FOUND


def test_upload_refusals_name_each_field(registry: ModelRegistry):
    """Issue 26, the local stack: one INVALID_ARGUMENT lists every bad field of an upload, each by its path."""
    request = UploadModelRequest(
        parent=PARENT,
        model_id="churn",
        model={
            "labels": {"Bad": "x"},
            "artifact_uri": "/tmp/model",
            "container_spec": {"args": ["serve"]},
            "version_aliases": ["champion", "champion"],
        },
    )

    fields = [field for field, _ in refusal(registry.upload, request).violations]

    assert fields == [
        "model.display_name",
        "model.version_aliases[1]",
        "model.labels.Bad",
        "model.artifact_uri",
        "model.container_spec.image_uri",
    ]
    both = UploadModelRequest(
        parent=PARENT, model_id="x", parent_model=CHURN, model={"display_name": "x", "container_spec": SERVING}
    )
    assert [field for field, _ in refusal(registry.upload, both).violations] == ["model_id"]


def test_an_upload_without_a_container_spec_is_refused_as_vertex_refuses_one_for_a_model_not_automls(registry):
    """Issue 40, point 13: model.proto's Model.container_spec is "Not required for AutoML Models", and UploadModel
    never makes an AutoML model, so an upload without one is INVALID_ARGUMENT naming the field; nothing is stored."""
    bare = UploadModelRequest(
        parent=PARENT, model_id="churn", model={"display_name": "churn", "artifact_uri": "gs://bucket/m"}
    )

    refused = refusal(registry.upload, bare)

    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.violations == [("model.container_spec", CONTAINER_SPEC_REQUIRED)]
    assert (
        refused.message == f"List of found errors:\t1.Field: model.container_spec; Message: {CONTAINER_SPEC_REQUIRED}\t"
    )
    assert refusal(registry.get, CHURN).code == grpc.StatusCode.NOT_FOUND
    version = UploadModelRequest(parent=PARENT, parent_model=CHURN, model={"display_name": "churn"})
    upload(registry)
    assert [field for field, _ in refusal(registry.upload, version).violations] == ["model.container_spec"]


def test_list_versions_names_each_version_by_its_id_and_filters_by_labels(registry: ModelRegistry):
    """Issue 26, the local stack: ListModelVersions returns "version ID instead of revision tag" in names."""
    upload(registry, labels={"request": "a"})
    upload(registry, parent_model=CHURN, labels={"request": "b"})

    listed = registry.list_versions(ListModelVersionsRequest(name=CHURN, filter='labels.request="b"'))

    assert [model.name for model in listed.models] == [f"{ANSWERED_CHURN}@2"]
    refused = refusal(registry.list_versions, ListModelVersionsRequest(name=CHURN, filter="display_name=churn"))
    assert refused.violations[0][0] == "filter"


def test_a_hyphenated_label_key_in_a_filter_is_refused_as_whether_vertex_reads_it_is_not_documented(
    registry: ModelRegistry,
):
    """Issue 25, point 3, for the Model Registry: ListModelVersions documents `labels.myKey="myValue"` only, and AIP-160
    reads '-' as NOT, so the local registry refuses a hyphenated key — what passes here cannot fail there for it —
    and trainctl's version labels are spelled with underscores."""
    upload(registry, labels={"trainctl-key": "a"})
    refused = refusal(registry.list_versions, ListModelVersionsRequest(name=CHURN, filter='labels.trainctl-key="a"'))
    assert refused.violations[0][0] == "filter" and "underscores" in refused.violations[0][1]


def test_list_models_reads_each_default_version_filters_and_pages(registry: ModelRegistry):
    """Issue 26, the local stack: ListModels lists a model as its default version (GetModel without @) and filters
    on `model`, `display_name` and labels."""
    for model_id in ("alpha", "beta", "gamma"):
        upload(registry, model_id, labels={"team": "ml" if model_id != "beta" else "ops"})
    upload(registry, parent_model=f"{PARENT}/models/alpha", display_name="alpha v2", version_aliases=["default"])

    def names(**request: object) -> list[str]:
        return [
            model.name.rsplit("/", 1)[1]
            for model in registry.list_models(ListModelsRequest(parent=PARENT, **request)).models
        ]

    assert names() == ["alpha", "beta", "gamma"]
    assert names(filter="labels.team=ml") == ["gamma"]  # alpha's default version (2) has no labels
    assert names(filter="model!=beta AND NOT labels:team") == ["alpha"]
    assert names(filter='displayName="alpha v2"') == ["alpha"]
    first = registry.list_models(ListModelsRequest(parent=PARENT, page_size=2))
    rest = registry.list_models(ListModelsRequest(parent=PARENT, page_size=2, page_token=first.next_page_token))
    assert [len(first.models), len(rest.models), rest.next_page_token] == [2, 1, ""]


def test_an_evaluation_belongs_to_the_version_it_was_imported_into(registry: ModelRegistry):
    """Issue 26, the local stack: evaluations of `M@V` (default without @) listed per version, named
    models/M/evaluations/ID."""
    upload(registry)
    upload(registry, parent_model=CHURN, version_aliases=["champion"])
    evaluation = {"display_name": "run", "metrics": {"val_accuracy": 0.9}}

    imported = registry.import_evaluation(
        ImportModelEvaluationRequest(parent=f"{CHURN}@2", model_evaluation=evaluation)
    )

    assert imported.name.startswith(f"{ANSWERED_CHURN}/evaluations/") and imported.create_time
    listed = registry.list_evaluations(ListModelEvaluationsRequest(parent=f"{CHURN}@champion"))
    assert [e.name for e in listed.model_evaluations] == [imported.name]
    assert registry.list_evaluations(ListModelEvaluationsRequest(parent=CHURN)).model_evaluations == []
    assert registry.get_evaluation(imported.name).metrics["val_accuracy"] == 0.9


def test_a_registry_on_the_same_store_knows_every_model_version_alias_and_evaluation(tmp_path: Path):
    """Issue 26, the local stack: the registry is kept in the state folder, as the job store is."""
    first = ModelRegistry(ModelStore(tmp_path), upload_seconds=0, numbers=NUMBERS)
    upload(first)
    upload(first, parent_model=CHURN, version_aliases=["champion"], labels={"request": "r1"})
    first.import_evaluation(ImportModelEvaluationRequest(parent=f"{CHURN}@2", model_evaluation={"display_name": "e"}))

    again = ModelRegistry(ModelStore(tmp_path), upload_seconds=0, numbers=NUMBERS)

    assert aliases(again) == {"1": ["default"], "2": ["champion"]}
    assert again.get(f"{CHURN}@champion").labels == {"request": "r1"}
    assert len(again.list_evaluations(ListModelEvaluationsRequest(parent=f"{CHURN}@2")).model_evaluations) == 1
    assert upload(again, parent_model=CHURN) == "3"


def test_every_name_is_answered_with_the_project_number_whichever_spelling_the_request_used(registry: ModelRegistry):
    """Issue 38, point 7: Vertex takes a project's id or its number in a request and answers with the number (the
    upload's operation and response, GetModel, ListModelVersions, evaluations); so does the local registry."""
    upload(registry)
    upload(registry, parent_model=ANSWERED_CHURN, version_aliases=["champion"])  # the number, as Vertex answered

    by_id, by_number = registry.get(f"{CHURN}@champion"), registry.get(f"{ANSWERED_CHURN}@champion")

    assert by_id.name == by_number.name == ANSWERED_CHURN and by_id.version_id == by_number.version_id == "2"
    merge(registry, f"{ANSWERED_CHURN}@2", "default")
    assert aliases(registry, CHURN) == aliases(registry, ANSWERED_CHURN) == {"1": [], "2": ["champion", "default"]}
    listed = registry.list_models(ListModelsRequest(parent=PARENT)).models
    assert [model.name for model in listed] == [ANSWERED_CHURN]
    evaluation = registry.import_evaluation(ImportModelEvaluationRequest(parent=f"{CHURN}@2", model_evaluation={}))
    assert registry.get_evaluation(evaluation.name.replace(NUMBER, "p")).name == evaluation.name


def test_a_project_without_a_pinned_number_gets_a_stable_derived_one_and_the_old_behaviour_stays_available():
    """Issue 38, point 7: any project id is answered with a 12-digit number that does not change between runs; a
    number stays itself; `derive=False` answers as asked (the registry before issue 38)."""
    number = derived_project_number("trainctl-local")
    assert number == derived_project_number("trainctl-local") and len(number) == 12 and number.isdigit()
    assert derived_project_number(number) == number and derived_project_number("other") != number
    derived = ModelRegistry(upload_seconds=0)
    upload(derived)
    assert derived.get(CHURN).name == f"projects/{derived_project_number('p')}/locations/us-central1/models/churn"
    as_asked = ModelRegistry(upload_seconds=0, numbers=project_numbers(derive=False))
    upload(as_asked)
    assert as_asked.get(CHURN).name == CHURN


def test_a_model_kept_under_the_project_id_is_renamed_to_the_number_when_the_registry_starts(tmp_path: Path):
    """Issue 38, point 7: a state folder from before the registry answered with numbers keeps its models: they are
    renamed (versions, operations, evaluations) and kept again under the number."""
    before = ModelRegistry(ModelStore(tmp_path), upload_seconds=0, numbers=project_numbers(derive=False))
    upload(before)
    before.import_evaluation(ImportModelEvaluationRequest(parent=f"{CHURN}@1", model_evaluation={"display_name": "e"}))

    after = ModelRegistry(ModelStore(tmp_path), upload_seconds=0, numbers=NUMBERS)

    assert after.get(CHURN).name == ANSWERED_CHURN
    [evaluation] = after.list_evaluations(ListModelEvaluationsRequest(parent=CHURN)).model_evaluations
    assert evaluation.name.startswith(f"{ANSWERED_CHURN}/evaluations/")
    assert [path.parent.parent.name for path in (tmp_path / "models").glob("*/*/*.json")] == [NUMBER]
    assert upload(after, parent_model=CHURN) == "2"


CLASSIFICATION = "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml"
REGRESSION = "gs://google-cloud-aiplatform/schema/modelevaluation/regression_metrics_1.0.0.yaml"
FITTING = {
    CLASSIFICATION: {"logLoss": 0.3, "auRoc": 0.8, "confidenceMetrics": [{"recall": 1}], "confusionMatrix": {}},
    REGRESSION: {"rootMeanSquaredError": 1.5, "meanAbsoluteError": 1, "rSquared": 0.7},
}


@pytest.mark.parametrize(
    ("schema", "metrics", "fields"),
    [
        (CLASSIFICATION, {"val_accuracy": 0.9, "logLoss": 0.3}, ["model_evaluation.metrics.val_accuracy"]),
        (
            CLASSIFICATION,
            {"logLoss": "low", "confusionMatrix": [1]},
            ["model_evaluation.metrics.confusionMatrix", "model_evaluation.metrics.logLoss"],
        ),
        (REGRESSION, {"val_rmse": 1.0, "rootMeanSquaredError": 1.0}, ["model_evaluation.metrics.val_rmse"]),
        (REGRESSION, {"rSquared": True}, ["model_evaluation.metrics.rSquared"]),
    ],
)
def test_an_evaluation_under_googles_schema_holds_only_that_schemas_fields(
    registry: ModelRegistry, schema: str, metrics: dict, fields: list[str]
):
    """Issue 38, point 7: metrics imported under classification_metrics_1.0.0.yaml or regression_metrics_1.0.0.yaml
    are that schema's fields (auPrc, auRoc, logLoss, confidenceMetrics, confusionMatrix; rootMeanSquaredError,
    meanAbsoluteError, …), each of its kind; another schema, or none, is not checked."""
    upload(registry)
    request = ImportModelEvaluationRequest(
        parent=f"{CHURN}@1", model_evaluation={"metrics_schema_uri": schema, "metrics": metrics}
    )

    refused = refusal(registry.import_evaluation, request)

    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    assert sorted(field for field, _ in refused.violations) == fields
    for fitting in (FITTING[schema], {}):
        evaluation = {"metrics_schema_uri": schema, "metrics": fitting}
        registry.import_evaluation(ImportModelEvaluationRequest(parent=f"{CHURN}@1", model_evaluation=evaluation))
    for free in ({"metrics": metrics}, {"metrics_schema_uri": "gs://my-bucket/my_metrics.yaml", "metrics": metrics}):
        registry.import_evaluation(ImportModelEvaluationRequest(parent=f"{CHURN}@1", model_evaluation=free))
