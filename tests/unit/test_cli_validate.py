"""`trainctl validate` and `trainctl schema`, run as a user would."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def trainctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainctl", *args], capture_output=True, text=True, cwd=ROOT)


def test_examples_validate():
    result = trainctl("validate", *sorted(str(p) for p in (ROOT / "examples").glob("*.*")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": ok") == len(list((ROOT / "examples").glob("*.*")))


def test_a_file_with_three_errors_prints_all_three_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "api_version: trainctl/v1\n"
        "request_id: Bad_ID\n"
        "dataset: {uri: 's3://elsewhere/data', target: y}\n"
        "trainer: {builtin: tabular}\n"
        "resources: {machine_type: a2-highgpu-2g, accelerator_count: 4}\n"
    )
    result = trainctl("validate", str(bad))
    assert result.returncode == 2
    assert f"{bad}: invalid (3 errors)" in result.stdout
    assert "  request_id: must be 1-128 lowercase letters" in result.stdout
    assert "  dataset.uri: must be a gs://bucket/path URI, got 's3://elsewhere/data'" in result.stdout
    assert "  resources.accelerator_count: a2-highgpu-2g has exactly 2 NVIDIA_TESLA_A100, got 4" in result.stdout


def test_one_invalid_file_among_valid_ones_fails_the_run(tmp_path):
    missing = tmp_path / "missing.yaml"
    result = trainctl("validate", str(ROOT / "examples" / "spot-2xl4.json"), str(missing))
    assert result.returncode == 2
    assert "spot-2xl4.json: ok" in result.stdout
    assert f"{missing}: invalid (1 error)" in result.stdout
    assert "cannot read the file" in result.stdout


def test_schema_prints_the_request_and_event_schemas():
    assert json.loads(trainctl("schema").stdout)["title"] == "TrainingJobRequest"
    assert json.loads(trainctl("schema", "event").stdout)["title"] == "JobEvent"


def test_a_file_naming_an_id_reserved_for_markers_is_invalid(tmp_path):
    """Guards issue 24, point 7: `gcs.` ids belong to marker uploads; a request file names its own id, so
    validate (and submit, which shares the check) refuses the prefix as the controller would."""
    request = json.loads((ROOT / "examples" / "spot-2xl4.json").read_text()) | {"request_id": "gcs.churn-d1-42"}
    path = tmp_path / "reserved.json"
    path.write_text(json.dumps(request))
    result = trainctl("validate", str(path))
    assert result.returncode == 2
    assert f"{path}: invalid (1 error)" in result.stdout
    assert "  request_id: ids starting with 'gcs.' are reserved for requests started by a marker" in result.stdout
