"""Is the built-in trainer's model worth keeping? Its default settings against scikit-learn's
`HistGradientBoosting*` on the same train/validation split, on datasets scikit-learn ships (breast cancer,
wine, digits; diabetes for regression) and two generated ones. Goal (issue 17 item 8): within 1 point of
accuracy, or within 5 % of RMSE. Figures are appended to bench/RESULTS.md.

    python bench/model_quality.py [--epochs N] [--only NAME ...]

The trainer runs as `python -m trainer.train` (a world of one process) with the flags a request's default
hyperparameters plan into (`TabularHyperparameters()` through `functions.jobs.planning.hyperparameter_args`, so
what is measured is what a request that sets none gets), then any `--trainer-args`; the split is the
trainer's own (`trainer.data.tables._split`, seeded per shard), reproduced here for the baseline, so both are scored
on the same validation rows.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import REPO_ROOT, Figure, load_average, record

SEED = 0
VALIDATION_FRACTION = 0.2  # the trainer's default
ACCURACY_POINTS = 0.01
RMSE_RATIO = 1.05


def datasets() -> dict[str, tuple[pa.Table, str]]:
    """name → (table with a `target` column, task)."""
    from sklearn import datasets as sk

    def table(x: np.ndarray, y: np.ndarray) -> pa.Table:
        return pa.table({**{f"f{i}": x[:, i] for i in range(x.shape[1])}, "target": y})

    found = {}
    for name, loader in (("breast_cancer", sk.load_breast_cancer), ("wine", sk.load_wine), ("digits", sk.load_digits)):
        bunch = loader()
        found[name] = (table(bunch.data, bunch.target), "classification")
    bunch = sk.load_diabetes()
    found["diabetes"] = (table(bunch.data, bunch.target), "regression")
    x, y = sk.make_classification(n_samples=5000, n_features=20, n_informative=8, n_classes=3, random_state=SEED)
    found["generated_classification"] = (table(x, y), "classification")
    x, y = sk.make_friedman1(n_samples=5000, n_features=10, noise=0.5, random_state=SEED)
    found["generated_regression"] = (table(x, y), "regression")
    return found


def baseline(train: pa.Table, validation: pa.Table, task: str) -> float:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    def xy(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        x = np.stack([t[c].to_numpy() for c in t.column_names if c != "target"], axis=1)
        return x, t["target"].to_numpy()

    (x_train, y_train), (x_val, y_val) = xy(train), xy(validation)
    if task == "classification":
        model = HistGradientBoostingClassifier(random_state=SEED).fit(x_train, y_train)
        return float((model.predict(x_val) == y_val).mean())
    model = HistGradientBoostingRegressor(random_state=SEED).fit(x_train, y_train)
    return math.sqrt(float(((model.predict(x_val) - y_val) ** 2).mean()))


def trainer_metric(path: Path, out: Path, task: str, extra: list[str]) -> dict:
    from functions.jobs.planning import hyperparameter_args
    from schemas.request import TabularHyperparameters

    defaults = hyperparameter_args(TabularHyperparameters(seed=SEED))
    command = [sys.executable, "-m", "trainer.train", "--data", str(path), "--target", "target", *defaults,
               "--model-dir", str(out / "model"), "--checkpoint-dir", str(out / "ckpt"),
               "--tensorboard-dir", str(out / "logs"), *extra]  # fmt: skip
    subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True)
    return json.loads((out / "model" / "metrics.json").read_text())


def main() -> None:
    from trainer.data.tables import _split

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=None, help="dataset names to run (default: all)")
    p.add_argument("--trainer-args", default="", help="extra trainer flags, e.g. '--epochs 50' (default: none)")
    args = p.parse_args()
    load_before = load_average()
    figures, notes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (table, task) in datasets().items():
            if args.only and name not in args.only:
                continue
            path = Path(tmp) / f"{name}.csv"
            pa_csv.write_csv(table, path)
            train, validation = _split(table, 0, SEED, VALIDATION_FRACTION)
            reference = baseline(train, validation, task)
            metrics = trainer_metric(path, Path(tmp) / name, task, args.trainer_args.split())
            if task == "classification":
                ours = metrics["val_accuracy"]
                value = f"trainer {ours:.4f} vs HistGradientBoosting {reference:.4f} (epoch {metrics['best_epoch']})"
                figures.append(Figure(f"{name}: validation accuracy", value, "≥ HGB − 0.01",
                                      ours >= reference - ACCURACY_POINTS))  # fmt: skip
            else:
                ours = metrics["val_rmse"]
                value = f"trainer {ours:.4f} vs HistGradientBoosting {reference:.4f} (epoch {metrics['best_epoch']})"
                figures.append(Figure(f"{name}: validation RMSE", value, "≤ HGB × 1.05",
                                      ours <= reference * RMSE_RATIO))  # fmt: skip
            print(figures[-1].row(), flush=True)
    flags = args.trainer_args or "none"
    notes.append(f"the request's default hyperparameters, then these trainer flags: `{flags}`; validation fraction "
                 f"{VALIDATION_FRACTION}, seed {SEED}, the trainer's own split for both")  # fmt: skip
    record("model_quality", figures, load_before, notes)


if __name__ == "__main__":
    main()
