"""`trainctl init DATA` (issue 44, point 2): a request or marker proposed from a bounded sample of a CSV or Parquet
file or folder, that `trainctl validate` accepts, with ID-like and constant columns left out and said why."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from functions.intake.marker_policy import MAY_SET_KEY
from local.stack import DEFAULT_TEMPLATE
from schemas.errors import parse_request
from trainctl import init_request
from trainctl.cli import main
from trainctl.validate import load_request_file


def write_churn(path, rows=4000):
    rng = random.Random(1)
    lines = ["customer_id,age,plan,country,monthly,churned"]
    lines += [f"C{rng.getrandbits(40):x},{rng.randint(18, 80)},{rng.choice('abc')},NL,{rng.random() * 100:.2f},"
              f"{rng.randint(0, 1)}" for _ in range(rows)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_request_leaves_out_id_and_constant_columns_and_validates(tmp_path, capsys):
    """Guards issue 44 point 2: an ID column of 4,000 unique strings was used as a feature without a word."""
    out = tmp_path / "request.yaml"
    assert main(["init", str(write_churn(tmp_path / "churn.csv")), "--out", str(out)]) == 0

    request = load_request_file(out)  # what `trainctl validate` reads
    assert request.dataset.target == "churned"  # the last column
    assert request.dataset.features == ["age", "plan", "monthly"]
    assert request.dataset.uri.startswith("gs://")
    text = out.read_text()
    assert "#   customer_id: ID-like: 4000 of 4000 sampled values are distinct" in text
    assert "#   country: constant" in text
    assert "left out customer_id: ID-like" in capsys.readouterr().err
    assert main(["validate", str(out)]) == 0


def test_a_target_by_name_or_by_flag(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("label,x,z\n" + "".join(f"{i % 2},{i * 0.37 % 5},{i % 3}\n" for i in range(50)))
    main(["init", str(data)])
    assert yaml.safe_load(capsys.readouterr().out)["dataset"]["target"] == "label"
    main(["init", str(data), "--target", "z"])
    assert yaml.safe_load(capsys.readouterr().out)["dataset"]["features"] == ["label", "x"]
    assert main(["init", str(data), "--target", "nope"]) == 2
    assert "--target 'nope' is not a column" in capsys.readouterr().err


def test_the_marker_merged_onto_the_local_rule_is_a_valid_request(tmp_path, capsys):
    main(["init", str(write_churn(tmp_path / "churn.csv", rows=300)), "--marker"])
    overrides = yaml.safe_load(capsys.readouterr().out)
    assert set(overrides) == {"dataset"}  # markers may set `dataset` under every rule
    request = copy.deepcopy(DEFAULT_TEMPLATE)
    request.pop(MAY_SET_KEY)
    request["dataset"] |= overrides["dataset"] | {"uri": "gs://bucket/churn/"}
    parsed = parse_request({"api_version": "trainctl/v1", "request_id": "gcs.x", **request})
    assert parsed.dataset.features == ["age", "plan", "monthly"]


def test_a_parquet_folder_is_read_from_its_first_data_file(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "_SUCCESS").write_text("")
    rows = 100
    pq.write_table(pa.table({"uuid": [f"u-{i}" for i in range(rows)], "x": [i * 0.5 % 7 for i in range(rows)],
                             "target": [i % 2 for i in range(rows)]}), folder / "part-0.parquet")  # fmt: skip
    assert main(["init", str(folder), "--uri", "gs://b/data/"]) == 0
    request = yaml.safe_load(capsys.readouterr().out)
    assert request["dataset"] | {} == {"uri": "gs://b/data/", "target": "target", "features": ["x"],
                                       "format": "parquet"}  # fmt: skip


def test_only_a_bounded_sample_of_a_large_file_is_read(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(init_request, "SAMPLE_BYTES", 4096)
    asked: list[int] = []
    opened = Path.open

    class Counted:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.stream.close()

        def read(self, size=-1):
            asked.append(size)
            return self.stream.read(size)

    data = write_churn(tmp_path / "churn.csv")
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: Counted(opened(self, *a, **k)))
    main(["init", str(data)])
    assert asked and all(0 < size <= 4097 for size in asked)  # never the whole file
    header = capsys.readouterr().out.splitlines()[0]
    sampled = int(header.split("from ")[1].split()[0])
    assert 0 < sampled < 4096 // 20  # rows of ~30 bytes within 4 KiB, not the file's 4000


def test_mistakes_say_what_to_do_without_a_traceback(tmp_path, capsys):
    assert main(["init", str(tmp_path / "missing.csv")]) == 3
    assert "no such file or folder" in capsys.readouterr().err
    out = tmp_path / "request.yaml"
    out.write_text("mine")
    data = write_churn(tmp_path / "churn.csv", rows=50)
    assert main(["init", str(data), "--out", str(out)]) == 4
    assert "pass --force" in capsys.readouterr().err and out.read_text() == "mine"
    assert main(["init", str(data), "--out", str(out), "--force"]) == 0
    (tmp_path / "notes.txt").write_text("x")
    assert main(["init", str(tmp_path / "notes.txt")]) == 2
    one = tmp_path / "one.csv"
    one.write_text("id,target\n" + "".join(f"{i},1\n" for i in range(40)))
    assert main(["init", str(one)]) == 2
    assert "no column but 'target' is usable" in capsys.readouterr().err
    (tmp_path / "header.csv").write_text("a,b,target\n")
    assert main(["init", str(tmp_path / "header.csv")]) == 2
    assert "no rows after its header" in capsys.readouterr().err


@pytest.mark.parametrize("uri", ["s3://b/x/", "data/"])
def test_uri_must_be_cloud_storage(tmp_path, capsys, uri):
    assert main(["init", str(write_churn(tmp_path / "c.csv", rows=30)), "--uri", uri]) == 2
    assert "gs://" in capsys.readouterr().err


def test_validate_warns_of_a_feature_named_like_an_id_and_still_accepts_it(tmp_path, capsys):
    """Guards issue 44 point 2 (admission warns too): without the data, a feature's name is what can be known."""
    data = write_churn(tmp_path / "churn.csv", rows=50)
    out = tmp_path / "request.yaml"
    main(["init", str(data), "--out", str(out)])
    text = out.read_text().replace('    - "age"\n', '    - "age"\n    - "customer_id"\n')
    out.write_text(text)
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "ok" in shown and "warning: dataset.features: 'customer_id' is named like an ID" in shown


def test_a_local_files_request_names_the_data_bucket_in_use(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRAINCTL_DATA_BUCKET", "acme-data")
    main(["init", str(write_churn(tmp_path / "Churn Q3.csv", rows=30))])
    assert yaml.safe_load(capsys.readouterr().out)["dataset"]["uri"] == "gs://acme-data/churn-q3/"
