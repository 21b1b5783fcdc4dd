"""Predictions from a trained model: `python -m trainer.predict --model-dir URI --data URI --out URI`.

Reads `model.pt` from the model folder, applies its preprocessing to every row of the data (a file or a folder
of shards; a target column, if present, is ignored), and writes the rows with a `prediction` column added —
the class label in the target's own type, or the value in the target's units — plus `confidence` (the
predicted class's probability) for classification. The output is CSV, or Parquet when `--out` ends in .parquet.
"""

from __future__ import annotations

import argparse
import io
import sys

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import torch
from torch import nn

from trainer import logs
from trainer.data.preprocess import Preprocessor
from trainer.data.tables import FORMATS, list_shards, read_table
from trainer.outputs.model_folder import load_model
from trainer.storage.folders import read_uri, write_uri

CHUNK_ROWS = 8192


def predict(model_dir: str, data_uri: str, data_format: str = "auto") -> pa.Table:
    model, prep = load_model(model_dir)
    shards = list_shards(data_uri, data_format)
    tables = [read_table(read_uri(s.uri), s.format) for s in shards]
    return predict_rows(model, prep, pa.concat_tables(tables, promote_options="permissive"))


def predict_rows(model: nn.Module, prep: Preprocessor, table: pa.Table) -> pa.Table:
    """`table` with `prediction` (and `confidence`) appended: the one prediction path, for batch files here and
    (from `model_outputs` on, the inputs made by `Preprocessor.features_of_values`) for online instances in
    trainer/serve.py."""
    for name, column in prediction_columns(prep, model_outputs(model, prep, prep.features(table))).items():
        table = table.append_column(name, column)
    return table


def model_outputs(model: nn.Module, prep: Preprocessor, features: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if 0 < len(features) <= CHUNK_ROWS:  # one chunk, as every online request is: no copy
            return model(features)
        return torch.cat(
            [model(features[i : i + CHUNK_ROWS]) for i in range(0, len(features), CHUNK_ROWS)]
            or [torch.zeros((0, prep.num_outputs))]
        )


def prediction_columns(prep: Preprocessor, outputs: torch.Tensor) -> dict[str, pa.Array]:
    """`prediction` (the label in the target's own type, or the value in its units) and, for classification,
    `confidence` (the predicted class's probability)."""
    columns = {"prediction": prep.decode(outputs)}
    if prep.task == "classification":
        confidence = torch.softmax(outputs.float(), dim=1).max(dim=1).values.double().numpy()
        columns["confidence"] = pa.array(confidence)
    return columns


def encode(table: pa.Table, out_uri: str) -> bytes:
    buffer = io.BytesIO()
    if out_uri.endswith((".parquet", ".pq")):
        pq.write_table(table, buffer)
    else:
        pa_csv.write_csv(table, buffer)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.predict", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="the folder holding model.pt ($AIP_MODEL_DIR of the run)")
    p.add_argument("--data", required=True, help="gs://…, /gcs/… or local: a CSV/Parquet file or a folder of them")
    p.add_argument("--out", required=True, help="file to write; a URI ending in / gets predictions.csv inside")
    p.add_argument("--format", default="auto", choices=FORMATS)
    args = p.parse_args(argv)
    out_uri = args.out + "predictions.csv" if args.out.endswith("/") else args.out
    from google.auth.exceptions import DefaultCredentialsError

    try:
        table = predict(args.model_dir, args.data, args.format)
        write_uri(out_uri, encode(table, out_uri))
    except DefaultCredentialsError:
        # A person's mistake, not a bug: say what to set rather than print the client library's traceback.
        print(
            f"{p.prog}: no Google credentials to read or write gs://: for the local stack, run "
            '`eval "$(trainctl local env)"` in this shell first (it points gs:// at the stack); for a project, sign '
            "in with `gcloud auth application-default login`",
            file=sys.stderr,
        )
        return 1
    except FileNotFoundError as exc:
        print(f"{p.prog}: {exc.filename or exc}: no such file or folder", file=sys.stderr)
        return 1
    logs.log("predictions written", rows=table.num_rows, out=out_uri, model_dir=args.model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
