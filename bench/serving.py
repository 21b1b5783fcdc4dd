"""What `python -m trainer.serve` costs over a minimal server calling the same model (issue 41): predictions/s and
p50/p99 latency at batch 1 and batch 64, on one CPU.

    .venv/bin/python bench/serving.py [--rounds 6] [--requests 2000] [--warmup 200] [--write-results]

A 30-feature regression model is trained by the built-in trainer (`python -m trainer.train`, a few thousand
generated rows, one epoch) into a temporary folder. Two servers then load it with `load_model`, each pinned to
CPU 0 with one intra-op thread (OMP_NUM_THREADS=1, as the client and the orchestrator are elsewhere):

- `trainer.serve`, started as Vertex starts it (AIP_HTTP_PORT, AIP_HEALTH_ROUTE, AIP_PREDICT_ROUTE,
  AIP_STORAGE_URI);
- the baseline, this file with `--baseline-server`: the standard library's `http.server` (HTTP/1.1, keep-alive,
  TCP_NODELAY, one thread) whose POST handler parses the JSON instances, standardises the 30 numbers with the
  model's means and standard deviations, calls the model and writes the values back — no contract, no checks, no
  Arrow.

The client is this file with `--client`, another process pinned to CPU 1: closed loop, one request at a time over
one kept-alive HTTP/1.1 connection (both servers keep it alive; the client fails if either closes it), TCP_NODELAY,
request bodies encoded beforehand. Each measurement sends `--warmup` requests, then times `--requests` of them from
sending the request to reading the whole response. Every round measures both servers at both batch sizes, the
order of the two servers alternating between rounds (so load from elsewhere on a shared machine hits both alike);
the figures are medians over the rounds of each round's throughput and percentiles, and the ratios are computed
within each round, then their median taken. The server's CPU time per request (all its threads, from /proc, warm-up
included) is reported beside them: other programs on a shared machine move it less than the wall clock. Before
timing, both servers' answers to the same 64 instances are compared (they must agree to float32 precision).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FEATURES = 30
ROWS = 4000
HEALTH_ROUTE, PREDICT_ROUTE = "/health", "/v1/endpoints/1/deployedModels/2:predict"
SERVER_CPU, CLIENT_CPU = 0, 1
BATCHES = (1, 64)
SIDES = ("trainer.serve", "baseline")
RESULTS = REPO / "bench" / "RESULTS.md"
SECTION = "## Issue 41: serving"


def write_dataset(path: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    rng = np.random.default_rng(41)
    x = rng.normal(size=(ROWS, FEATURES))
    y = x @ rng.normal(size=FEATURES) + np.sin(x[:, 0]) + 0.1 * rng.normal(size=ROWS)
    pa_csv.write_csv(pa.table({**{f"f{i}": x[:, i] for i in range(FEATURES)}, "y": y}), path)


def train_model(tmp: Path) -> Path:
    data = tmp / "data.csv"
    write_dataset(data)
    out = tmp / "run"
    command = [sys.executable, "-m", "trainer.train", "--data", str(data), "--target", "y", "--epochs", "1",
               "--seed", "1", "--model-dir", str(out / "model"), "--checkpoint-dir", str(out / "checkpoints"),
               "--tensorboard-dir", str(out / "logs")]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, env=child_env(), capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"training the model failed:\n{(result.stdout + result.stderr)[-4000:]}")
    return out / "model"


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIP_")}
    env["PYTHONPATH"] = str(REPO)
    env["OMP_NUM_THREADS"] = "1"
    return {**env, **extra}


def pinned(cpu: int) -> Any:
    return lambda: os.sched_setaffinity(0, {cpu})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the baseline server -------------------------------------------------------------------------------------


def baseline_server(model_dir: str, port: int) -> None:
    """The minimal server: the same model, loaded the same way, called directly."""
    import numpy as np
    import torch

    from trainer.outputs.model_folder import load_model

    torch.set_num_threads(1)
    model, prep = load_model(model_dir)
    columns = prep.numeric
    means, stds = np.array(prep.means), np.array(prep.stds)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The headers and the body go out in two writes: without this, Nagle holds the body until the client's
        # delayed ACK of the headers, 40 ms later on Linux.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            self.reply(b"{}")

        def do_POST(self) -> None:
            instances = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["instances"]
            x = (np.array([[i[c] for c in columns] for i in instances], dtype=np.float64) - means) / stds
            with torch.no_grad():
                y = model(torch.from_numpy(x.astype(np.float32))).reshape(-1).double().numpy()
            values = (y * prep.target_std + prep.target_mean).tolist()
            self.reply(json.dumps({"predictions": [{"prediction": v} for v in values]}).encode())

        def reply(self, data: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with HTTPServer(("127.0.0.1", port), Handler) as server:
        server.serve_forever()


# --- the client -----------------------------------------------------------------------------------------------


def instances(batch: int, seed: int) -> list[dict[str, float]]:
    rng = random.Random(seed)
    return [{f"f{j}": rng.gauss(0, 1) for j in range(FEATURES)} for _ in range(batch)]


def client(port: int, route: str, batch: int, requests: int, warmup: int) -> None:
    """Closed loop over one kept-alive connection; prints the timed requests' latencies (seconds) as JSON."""
    bodies = [json.dumps({"instances": instances(batch, seed)}).encode() for seed in range(16)]
    headers = {"Content-Type": "application/json"}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.connect()
    connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    first_socket = connection.sock
    latencies = []
    for n in range(warmup + requests):
        body = bodies[n % len(bodies)]
        started = time.perf_counter()
        connection.request("POST", route, body, headers)
        response = connection.getresponse()
        data = response.read()
        finished = time.perf_counter()
        if response.status != 200:
            sys.exit(f"{route} answered {response.status}: {data[:400]!r}")
        if connection.sock is not first_socket:
            sys.exit(f"the server on port {port} closed the kept-alive connection")
        if n >= warmup:
            latencies.append(finished - started)
    connection.close()
    print(json.dumps(latencies))


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process, all its threads, so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(port: int, route: str, batch: int, args: argparse.Namespace, server_pid: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--client", "--port", str(port), "--route", route, "--batch", str(batch),
               "--requests", str(args.requests), "--warmup", str(args.warmup)]  # fmt: skip
    cpu_before = cpu_seconds(server_pid)
    result = subprocess.run(command, env=child_env(), capture_output=True, text=True, preexec_fn=pinned(CLIENT_CPU))
    server_cpu = cpu_seconds(server_pid) - cpu_before
    if result.returncode:
        sys.exit(f"the client failed: {result.stderr[-2000:]}")
    latencies = json.loads(result.stdout)
    percentiles = statistics.quantiles(latencies, n=100)
    return {
        "predictions_per_second": batch * len(latencies) / sum(latencies),
        "p50_ms": percentiles[49] * 1000,
        "p99_ms": percentiles[98] * 1000,
        # Warm-up requests included; less moved by other programs on a shared machine than the wall clock.
        "server_cpu_ms": server_cpu * 1000 / (args.warmup + args.requests),
    }


def same_answers(ports: dict[str, int], routes: dict[str, str]) -> float:
    """The largest relative difference between the two servers' predictions for the same 64 instances."""
    body = json.dumps({"instances": instances(64, 1000)}).encode()
    answers = {}
    for side in SIDES:
        connection = http.client.HTTPConnection("127.0.0.1", ports[side], timeout=60)
        connection.request("POST", routes[side], body, {"Content-Type": "application/json"})
        answers[side] = [p["prediction"] for p in json.loads(connection.getresponse().read())["predictions"]]
        connection.close()
    pairs = zip(answers["trainer.serve"], answers["baseline"], strict=True)
    return max(abs(a - b) / max(abs(a), abs(b), 1e-9) for a, b in pairs)


def wait_healthy(port: int, route: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"a server exited ({process.returncode}) before answering its health route")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", route)
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"the server on port {port} did not answer its health route in 120 s")


# --- the orchestrator and the report -------------------------------------------------------------------------


def machine() -> str:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    return f"{os.cpu_count()} vCPUs ({cpu}), no GPU; Python {platform.python_version()}, torch {torch.__version__}"


def run(args: argparse.Namespace) -> tuple[list[dict], float]:
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        model_dir = train_model(Path(tmp))
        ports = {side: free_port() for side in SIDES}
        routes = {"trainer.serve": PREDICT_ROUTE, "baseline": "/"}
        logs = {side: open(Path(tmp) / f"{side}.log", "wb") for side in SIDES}  # noqa: SIM115
        serve_env = child_env(AIP_HTTP_PORT=str(ports["trainer.serve"]), AIP_HEALTH_ROUTE=HEALTH_ROUTE,
                              AIP_PREDICT_ROUTE=PREDICT_ROUTE, AIP_STORAGE_URI=str(model_dir))  # fmt: skip
        baseline = ["--baseline-server", "--model-dir", str(model_dir), "--port", str(ports["baseline"])]
        commands = {
            "trainer.serve": [sys.executable, "-m", "trainer.serve"],
            "baseline": [sys.executable, __file__, *baseline],
        }
        servers = {
            side: subprocess.Popen(commands[side], cwd=REPO, env=serve_env if side == "trainer.serve" else child_env(),
                                   stdout=logs[side], stderr=subprocess.STDOUT, preexec_fn=pinned(SERVER_CPU))
            for side in SIDES
        }  # fmt: skip
        try:
            for side in SIDES:
                wait_healthy(ports[side], HEALTH_ROUTE, servers[side])
            difference = same_answers(ports, routes)
            if difference > 1e-5:
                sys.exit(f"the two servers' predictions differ (largest relative difference {difference:.2e})")
            rounds = []
            for round_ in range(args.rounds):
                order = list(SIDES) if round_ % 2 == 0 else list(reversed(SIDES))
                measured: dict[str, Any] = {"order": order}
                for batch in BATCHES:
                    for side in order:
                        measured[f"{side}@{batch}"] = measure(ports[side], routes[side], batch, args, servers[side].pid)
                rounds.append(measured)
                print(f"round {round_ + 1}: " + "; ".join(
                    f"{key} {m['predictions_per_second']:,.0f}/s p50 {m['p50_ms']:.3f} p99 {m['p99_ms']:.3f} ms "
                    f"CPU {m['server_cpu_ms']:.3f} ms"
                    for key, m in measured.items() if key != "order"), flush=True)  # fmt: skip
        finally:
            for side in SIDES:
                servers[side].terminate()
                servers[side].wait(timeout=30)
                logs[side].close()
    return rounds, difference


def table(rounds: list[dict]) -> str:
    def median(key: str, figure: str) -> float:
        return statistics.median(r[key][figure] for r in rounds)

    def ratio(batch: int, figure: str) -> float:
        return statistics.median(r[f"trainer.serve@{batch}"][figure] / r[f"baseline@{batch}"][figure] for r in rounds)

    lines = ["| batch | server | predictions/s | p50 latency | p99 latency | server CPU per request |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for batch in BATCHES:
        for side in SIDES:
            key = f"{side}@{batch}"
            lines.append(f"| {batch} | {side} | {median(key, 'predictions_per_second'):,.0f} | "
                         f"{median(key, 'p50_ms'):.3f} ms | {median(key, 'p99_ms'):.3f} ms | "
                         f"{median(key, 'server_cpu_ms'):.3f} ms |")  # fmt: skip
        throughput, p50, p99, cpu = (ratio(batch, f) for f in ("predictions_per_second", "p50_ms", "p99_ms",
                                                                "server_cpu_ms"))  # fmt: skip
        lines.append(f"| {batch} | **trainer.serve / baseline** | **{throughput:.2f} ×** | {p50:.2f} × | "
                     f"**{p99:.2f} ×** | {cpu:.2f} × |")  # fmt: skip
    goals = [
        ("throughput at batch 64 ≥ 0.8 × the baseline's", ratio(64, "predictions_per_second"), lambda r: r >= 0.8),
        ("p99 latency at batch 1 ≤ 1.5 × the baseline's", ratio(1, "p99_ms"), lambda r: r <= 1.5),
    ]
    lines += ["", "| goal | ratio (median over rounds) | met |", "|---|---|---|"]
    lines += [f"| {goal} | {r:.2f} × | {'yes' if met(r) else 'no'} |" for goal, r, met in goals]
    return "\n".join(lines)


def report(rounds: list[dict], difference: float, args: argparse.Namespace, load_before: tuple) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "trainer"], cwd=REPO, capture_output=True, text=True)
    command = shlex.join(["python", "bench/serving.py", *sys.argv[1:]])
    load_after = os.getloadavg()
    return "\n".join([
        f"### {args.label or 'Run'}, {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, commit "
        f"`{commit.stdout.strip()}`{' (trainer/ with uncommitted changes)' if dirty.stdout.strip() else ''}",
        "",
        f"- command: `.venv/bin/{command}`",
        f"- machine: {machine()}; load average before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in load_after)}",
        f"- {args.rounds} rounds × 2 servers × 2 batch sizes, each {args.requests} timed requests after "
        f"{args.warmup} warm-up ones; servers on CPU {SERVER_CPU}, client on CPU {CLIENT_CPU}, one kept-alive "
        f"connection; largest relative difference between the servers' predictions {difference:.1e}",
        "",
        table(rounds),
        "",
    ])  # fmt: skip


def write_results(text: str) -> None:
    results = RESULTS.read_text()
    if SECTION not in results:
        results = results.rstrip("\n") + f"\n\n{SECTION}\n\n"
    RESULTS.write_text(results.rstrip("\n") + "\n\n" + text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--requests", type=int, default=2000, help="timed requests per server, batch size and round")
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--label", help="the heading of the section written into bench/RESULTS.md")
    p.add_argument("--write-results", action="store_true", help="append the figures to bench/RESULTS.md")
    p.add_argument("--baseline-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--route", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.baseline_server:
        baseline_server(args.model_dir, args.port)
        return
    if args.client:
        client(args.port, args.route, args.batch, args.requests, args.warmup)
        return
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("this benchmark pins the servers and the client to two different CPUs; this process sees one")
    load_before = os.getloadavg()
    rounds, difference = run(args)
    text = report(rounds, difference, args, load_before)
    print(text)
    if args.write_results:
        write_results(text)


if __name__ == "__main__":
    main()
