"""`trainctl curve ID` on the local stack: a run's model folder read through the storage emulator, as the command
reads a deployment's (issue 44, point 5)."""

from __future__ import annotations

import json

from tests.integration.deployment import fake_node_request
from trainctl.cli import main


def test_curve_draws_what_a_run_left_and_says_why_when_it_left_nothing(deployment, monkeypatch, tmp_path, capsys):
    """Guards issue 44, point 5: only `make demo` drew a loss curve; any run's is drawn from its metrics.jsonl."""
    events = deployment.events()
    request = fake_node_request("curve-a", "--sleep", "0.5", "--metrics", '{"val_accuracy": 0.9}')
    assert deployment.request(request) == 200
    events.wait_for("curve-a", "succeeded", timeout=120, act=deployment.reconcile)
    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "curve.png"

    # Its own image wrote metrics.json and no metrics.jsonl: a sentence saying so, exit 3, no file.
    assert main(["curve", "curve-a", "--out", str(out)]) == 3
    said = capsys.readouterr().out
    assert "curve-a's program wrote no metrics.jsonl" in said and "$AIP_MODEL_DIR/metrics.jsonl" in said
    assert not out.exists()

    # The lines the built-in trainer writes, written into the run's model folder: drawn.
    model_dir = deployment.record("request:curve-a")["artifacts"]["model_dir"]
    bucket, _, folder = model_dir.removeprefix("gs://").partition("/")
    history = [{"epoch": e, "train_loss": 1 / e, "val_loss": 1.2 / e, "val_accuracy": 0.9 + e / 100} for e in (1, 2, 3)]
    lines = "".join(json.dumps(h) + "\n" for h in history)
    deployment.storage().bucket(bucket).blob(f"{folder}metrics.jsonl").upload_from_string(lines)
    assert main(["curve", "curve-a", "--out", str(out)]) == 0
    assert f"curve: {out} (3 evaluations, epoch 1–3)" in capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert main(["curve", "no-such-run"]) == 3
    assert "no request 'no-such-run' in the ledger" in capsys.readouterr().out
