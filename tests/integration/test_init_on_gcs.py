"""`trainctl init gs://…` (issue 44, point 2): the sample is read from Cloud Storage (fake-gcs-server) with a ranged
read of a CSV's head, the folder's first data file chosen as the trainer chooses it."""

from __future__ import annotations

import os
import random
import uuid

import pytest
import yaml

from functions.cloud.gcs import Gcs
from local.fake_gcs import create_bucket
from local.names import LOCAL_PROJECT
from trainctl import init_request
from trainctl.cli import main


@pytest.fixture
def bucket(fake_gcs, monkeypatch) -> str:
    monkeypatch.setenv("TRAINCTL_PROJECT", LOCAL_PROJECT)  # the project alone: no other setting is needed
    name = f"init-{uuid.uuid4().hex[:8]}"
    create_bucket(os.environ["STORAGE_EMULATOR_HOST"], LOCAL_PROJECT, name)
    return name


def churn_csv(rows: int) -> bytes:
    rng = random.Random(2)
    lines = ["customer_id,age,country,churned"]
    lines += [f"C{rng.getrandbits(40):x},{rng.randint(18, 80)},NL,{rng.randint(0, 1)}" for _ in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def test_a_gcs_folder_is_sampled_from_its_first_data_file(bucket, monkeypatch, capsys):
    monkeypatch.setattr(init_request, "SAMPLE_BYTES", 2048)  # the object is ~100 KiB: a head of it only
    gcs = Gcs(LOCAL_PROJECT)
    gcs.write(bucket, "churn/_SUCCESS", b"", 0)
    gcs.write(bucket, "churn/part-0.csv", churn_csv(4000), 0)
    gcs.write(bucket, "churn/part-1.csv", b"other,columns\n1,2\n", 0)

    assert main(["init", f"gs://{bucket}/churn/"]) == 0
    shown = capsys.readouterr()
    request = yaml.safe_load(shown.out)
    assert request["dataset"] == {"uri": f"gs://{bucket}/churn/", "target": "churned", "features": ["age"]}
    assert f"sampled rows of gs://{bucket}/churn/part-0.csv" in " ".join(shown.out.split())
    assert int(shown.out.split("from ")[1].split()[0]) < 2048 // 20  # the head only, not 4,000 rows
    assert "left out customer_id: ID-like" in shown.err and "left out country: constant" in shown.err


def test_a_gcs_folder_without_data_says_so(bucket, capsys):
    Gcs(LOCAL_PROJECT).write(bucket, "empty/_SUCCESS", b"", 0)
    assert main(["init", f"gs://{bucket}/empty/"]) == 3
    assert "no .csv or .parquet object there" in capsys.readouterr().err
