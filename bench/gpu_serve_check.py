"""A GPU-trained model served the way a CPU serving node serves it: `python3 bench/gpu_serve_check.py MODEL_DIR DATA`
starts `python -m trainer.serve` with no GPU visible (CUDA_VISIBLE_DEVICES empty, AIP_* set as Vertex sets them),
posts the first 64 rows of DATA (a Parquet file), and compares the answers with `trainer.predict` on the same rows.
Run by bench/gpu_checks.sh (check `serve`); prints one line and exits 1 when they differ."""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import subprocess
import sys
import time

import pyarrow.parquet as pq

from trainer.outputs.model_folder import load_model
from trainer.predict import predict_rows

HEALTH, PREDICT = "/health", "/predict"


def main() -> int:
    model_dir, data = sys.argv[1], sys.argv[2]
    table = pq.read_table(data).slice(0, 64)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "AIP_HTTP_PORT": str(port), "AIP_HEALTH_ROUTE": HEALTH,
           "AIP_PREDICT_ROUTE": PREDICT, "AIP_STORAGE_URI": model_dir}  # fmt: skip
    server = subprocess.Popen([sys.executable, "-m", "trainer.serve"], env=env)
    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                print(f"serve: not healthy (exit {server.poll()})")
                return 1
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", HEALTH)
                healthy = connection.getresponse().status == 200
                connection.close()
                if healthy:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        features = [c for c in table.column_names if c not in ("y", "label")]
        instances = [{c: row[c] for c in features} for row in table.to_pylist()]
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("POST", PREDICT, json.dumps({"instances": instances}), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        body = json.loads(answer.read())
        connection.close()
        if answer.status != 200:
            print(f"serve: {answer.status} {body}")
            return 1
        served = [p["prediction"] for p in body["predictions"]]
    finally:
        server.terminate()
        server.wait(30)
    model, prep = load_model(model_dir)
    batch = predict_rows(model, prep, table)["prediction"].to_pylist()
    differ = sum(
        not (a == b or (isinstance(a, float) and math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)))
        for a, b in zip(served, batch, strict=True)
    )
    print(f"serve: {len(served)} instances answered with no GPU visible; {differ} differ from trainer.predict")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
