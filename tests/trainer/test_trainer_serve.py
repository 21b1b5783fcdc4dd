"""`python -m trainer.serve` on Vertex AI's custom-container contract: started as a process with the AIP_*
variables Vertex sets, it answers its health route once the model is loaded, and its predictions for posted
instances equal what `python -m trainer.predict` writes for the same rows; a bad request gets a 4xx saying what to
change, and the server goes on serving."""

from __future__ import annotations

import http.client
import json
import math
import random
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
import torch
from trainer_runs import Running, free_port, process_env, run, started, wait_for

from trainer.data.preprocess import Combine, Preprocessor
from trainer.serve import (
    MAX_REQUEST_BYTES,
    PredictionHandler,
    PredictionServer,
    Refused,
    answer,
    instances_features,
)
from trainer.storage.folders import gcs_client

HEALTH_ROUTE = "/v1/endpoints/123/deployedModels/456"
PREDICT_ROUTE = "/v1/endpoints/123/deployedModels/456:predict"


class Client:
    def __init__(self, port: int):
        self.port = port

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict | None = None
    ) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            connection.close()

    def predict(self, request: object) -> tuple[int, dict]:
        return self.request("POST", PREDICT_ROUTE, json.dumps(request).encode())

    def healthy(self) -> bool:
        try:
            return self.request("GET", HEALTH_ROUTE)[0] == 200
        except OSError:
            return False


def serving(model_uri: str, log: Path, **env: str) -> tuple[AbstractContextManager[Running], Client]:
    """Enter the returned context to start `python -m trainer.serve` as Vertex would, with its routes and port."""
    port = free_port()
    variables = {"AIP_HTTP_PORT": str(port), "AIP_HEALTH_ROUTE": HEALTH_ROUTE, "AIP_PREDICT_ROUTE": PREDICT_ROUTE,
                 "AIP_STORAGE_URI": model_uri, "AIP_MODE": "PREDICTION", **env}  # fmt: skip
    return started("trainer.serve", [], process_env(**variables), log), Client(port)


@pytest.fixture(scope="module")
def server(trained_breast_cancer_model, tmp_path_factory) -> Iterator[Client]:
    context, client = serving(str(trained_breast_cancer_model), tmp_path_factory.mktemp("serve") / "serve.log")
    with context as running:
        wait_for(client.healthy, "the health route to answer 200", timeout=120, running=running)
        yield client


def test_served_predictions_equal_what_trainer_predict_writes_for_the_same_rows(
    server, trained_breast_cancer_model, breast_cancer_csv_shards, tmp_path
):
    """issue 26, step 5 (a deployable model): one prediction path for batch and online, so the same rows get the
    same labels and confidences; the target column sent along is ignored, as trainer.predict ignores it."""
    rows = breast_cancer_csv_shards / "part-00001.csv"
    predicted = run(
        "trainer.predict",
        ["--model-dir", str(trained_breast_cancer_model), "--data", str(rows), "--out", str(tmp_path / "p.parquet")],
        process_env(),
        tmp_path / "predict.log",
    )  # fmt: skip
    assert predicted.returncode == 0, predicted.output[-4000:]
    batch = pq.read_table(tmp_path / "p.parquet").select(["prediction", "confidence"]).to_pylist()

    status, response = server.predict({"instances": pa_csv.read_csv(rows).to_pylist()})
    assert status == 200, response
    assert response["predictions"] == batch
    assert len(batch) == 190 and {type(p["prediction"]) for p in batch} == {int}  # the target's own type


def test_the_health_route_answers_200_and_other_routes_say_which_there_are(server):
    assert server.request("GET", HEALTH_ROUTE) == (200, {})
    assert server.request("GET", PREDICT_ROUTE)[0] == 405
    status, body = server.request("POST", "/predict", b"{}")
    assert status == 404 and f"POST {PREDICT_ROUTE}" in body["error"]


@pytest.fixture(scope="module")
def full(breast_cancer_csv_shards) -> dict:
    """One instance with every feature column: the first row of the data without its target."""
    return (
        pa_csv.read_csv(breast_cancer_csv_shards / "part-00000.csv").drop_columns(["target"]).slice(0, 1).to_pylist()[0]
    )


@pytest.mark.parametrize(
    ("make_request", "says"),
    [
        (lambda full: b"{not json", "the request body is not JSON"),
        (lambda full: [full], 'must be a JSON object {"instances"'),
        (lambda full: {"instances": full}, 'must be a JSON object {"instances"'),
        (lambda full: {"instances": []}, "`instances` is empty"),
        (lambda full: {"instances": [list(full.values())]}, "instances[0] is an array; each instance must be an"),
        (lambda full: {"instances": [full, {"mean radius": 1.0}]}, "instances[1] lacks 29 of the columns the model"),
        (lambda full: {"instances": [{**full, "mean area": "large"}]},
         'instances[0]["mean area"] must be a number or null, not a string'),
        (lambda full: {"instances": [{**full, "mean area": [1]}]},
         'instances[0]["mean area"] must be a number or null, not an array'),
        (lambda full: {"instances": [full], "parameters": {"top_k": 2}}, "this model takes no `parameters`"),
        (lambda full: {"instances": [full], "instance": []}, "unknown request fields ['instance']"),
        (lambda full: {"instances": [{**full, "mean area": 10**400}]},
         'instances[0]["mean area"] is a number beyond float64'),
        (lambda full: {"instances": [{column: "1.5" for column in full}]},
         'instances[0]["mean radius"] must be a number or null, not a string'),
        (lambda full: {"instances": [{column: [1.0] for column in full}]},
         'instances[0]["mean radius"] must be a number or null, not an array'),
        (lambda full: b'{"instances": [' + b"1" * 5000 + b"]}", "the request body is not JSON this server reads"),
        (lambda full: b"[" * 100_000, "the request body is not JSON this server reads: RecursionError"),
        # The first value at fault in reading order is named, whichever check finds it.
        (lambda full: {"instances": [{**full, "worst area": "x"}, {"mean radius": 1.0}]},
         'instances[0]["worst area"] must be a number or null, not a string'),
        (lambda full: {"instances": [full, {**full, "mean area": True, "worst area": [], "mean radius": {}}]},
         'instances[1]["mean radius"] must be a number or null, not an object'),
    ],
)  # fmt: skip
def test_a_bad_request_gets_400_saying_what_to_change_and_serving_goes_on(server, full, make_request, says):
    """issue 26, step 5: a bad instance is the caller's to fix (400 naming the instance and column), never a 500."""
    request = make_request(full)
    status, body = server.request(
        "POST", PREDICT_ROUTE, request if isinstance(request, bytes) else json.dumps(request).encode()
    )
    assert status == 400 and says in body["error"], body
    assert server.predict({"instances": [full]})[0] == 200


def test_two_requests_over_one_connection_are_both_answered(server, full):
    """HTTP/1.1 keep-alive: a client (Vertex's proxy, or a caller of the endpoint) need not open a connection per
    prediction; both answers come back over the socket the first request used."""
    body = json.dumps({"instances": [full]}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        answers = []
        for _ in range(2):
            connection.request("POST", PREDICT_ROUTE, body)
            response = connection.getresponse()
            answers.append((response.status, json.loads(response.read())))
            if not answers[1:]:
                first_socket = connection.sock
        assert connection.sock is first_socket and first_socket is not None
    finally:
        connection.close()
    assert answers[0] == answers[1] and answers[0][0] == 200


def test_answers_are_sent_without_waiting_for_the_clients_ack():
    """An answer's headers and body are two writes; with Nagle's algorithm on, the body waited for the client's
    delayed ACK of the headers (40 ms on Linux) and every prediction took 48 ms (issue 41). The handler switches
    it off on each connection it serves."""
    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()):
        accepted, _ = listener.accept()
        with accepted:
            handler = PredictionHandler.__new__(PredictionHandler)  # set up as the server sets one up, not run
            handler.request = accepted
            handler.setup()
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            handler.finish()


def test_a_client_that_resets_its_connection_leaves_no_traceback_and_serving_goes_on(capfd):
    """A load balancer's probe or a client that gives up resets the connection while the handler reads; that is
    no fault of the server's, and socketserver's default printed a traceback for each one (seen in bench runs)."""
    server = PredictionServer(("127.0.0.1", 0), HEALTH_ROUTE, PREDICT_ROUTE)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(b"POST " + PREDICT_ROUTE.encode() + b" HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
        assert Client(port).request("GET", HEALTH_ROUTE)[0] == 503  # still serving (no model loaded here)
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capfd.readouterr().err


def test_a_body_over_the_bound_or_without_a_length_is_refused_unread(server):
    status, body = server.request("POST", PREDICT_ROUTE, b"{}", {"Content-Length": str(MAX_REQUEST_BYTES + 1)})
    assert status == 413 and f"send at most {MAX_REQUEST_BYTES:,}" in body["error"]
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.putrequest("POST", PREDICT_ROUTE)
        connection.endheaders()
        assert connection.getresponse().status == 411
    finally:
        connection.close()


def test_a_chunked_body_is_read_like_a_sized_one(server, full):
    """Nothing documents that Vertex's proxy always sends a Content-Length, so a chunked body is taken too."""
    body = json.dumps({"instances": [full, full]}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", PREDICT_ROUTE, body=iter([body[:100], body[100:]]), encode_chunked=True)
        response = connection.getresponse()
        chunked = (response.status, json.loads(response.read()))
    finally:
        connection.close()
    assert chunked == server.predict({"instances": [full, full]})


def test_the_model_is_read_from_the_cloud_storage_uri_vertex_gives(
    trained_breast_cancer_model, gcs_bucket, fake_gcs_url, full, tmp_path
):
    """issue 26, step 5: AIP_STORAGE_URI is a gs:// folder holding a copy of the model's artifacts."""
    bucket = gcs_client().bucket(gcs_bucket)
    for name in ("model.pt", "metrics.json"):
        bucket.blob(f"artifacts/{name}").upload_from_filename(str(trained_breast_cancer_model / name))
    context, client = serving(
        f"gs://{gcs_bucket}/artifacts", tmp_path / "serve.log", STORAGE_EMULATOR_HOST=fake_gcs_url
    )
    with context as running:
        wait_for(client.healthy, "the health route to answer 200", timeout=120, running=running)
        status, response = client.predict({"instances": [full]})
    assert status == 200 and set(response["predictions"][0]) == {"prediction", "confidence"}


def test_health_and_predictions_wait_for_the_model_and_a_model_that_cannot_load_stops_the_server(tmp_path):
    """Vertex sends traffic only once the health route answers 200: until the model is loaded both routes answer
    503; a model that cannot be loaded ends serve_forever (main then exits 1) rather than answering 503 for ever."""
    server = PredictionServer(("127.0.0.1", 0), "/health", "/predict")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(server.server_address[1])
        assert client.request("GET", "/health") == (503, {"error": "the model is still loading"})
        assert client.request("POST", "/predict", b'{"instances": [{}]}')[0] == 503
        server.load(str(tmp_path / "empty"))
        thread.join(timeout=30)
        assert not thread.is_alive() and server.load_error and "FileNotFoundError" in server.load_error
    finally:
        if thread.is_alive():
            server.shutdown()
        server.server_close()


def test_instances_are_typed_as_a_file_of_the_same_rows_would_be():
    """Numbers become float64 as the trainer reads them; a category sent as a number or a boolean becomes the text
    a file's column of it becomes (5.0 → "5", true → "true"), so it lands in the same one-hot slot."""
    train = pa.table({"x": [1, 2, 3, 4], "code": ["5", "true", "x", "5"], "y": ["a", "b", "a", "b"]})
    prep = Preprocessor.fit(train, "y", "auto", Combine(across_ranks=False))
    sent = [{"x": 2, "code": 5.0}, {"x": 3.5, "code": True}, {"x": None, "code": None}, {"x": 1, "code": "x"}]
    as_file = pa.table({"x": [2.0, 3.5, None, 1.0], "code": ["5", "true", None, "x"]})
    assert torch.equal(instances_features(json.dumps({"instances": sent}).encode(), prep), prep.features(as_file))


def test_instances_get_the_inputs_a_file_of_the_same_rows_gets_value_for_value():
    """Online instances are turned into inputs without a table (issue 41); the inputs equal those of the file path
    bit for bit: missing values, integers, booleans, infinities, numbers sent for a category, unseen categories."""
    rng = random.Random(41)
    rows = 300
    numbers = [None, 0.5, -7, True, False, math.inf, -math.inf, 1e300, 2**53 + 1]
    # (what an instance sends for a category, what a file's column holds for it)
    categories = [(None, None), ("red", "red"), ("blue", "blue"), ("unseen", "unseen"), (5, "5"), (5.0, "5"),
                  (True, "true")]  # fmt: skip
    sent_numbers = [[rng.choice([*numbers, rng.gauss(0, 5)]) for _ in range(4)] for _ in range(rows)]
    sent_categories = [[rng.choice(categories) for _ in range(2)] for _ in range(rows)]
    sent = [
        {**{f"x{j}": n[j] for j in range(4)}, "colour": c[0][0], "size": c[1][0]}
        for n, c in zip(sent_numbers, sent_categories, strict=True)
    ]
    as_file = pa.table({
        **{f"x{j}": pa.array([None if n[j] is None else float(n[j]) for n in sent_numbers]) for j in range(4)},
        "colour": pa.array([c[0][1] for c in sent_categories], pa.string()),
        "size": pa.array([c[1][1] for c in sent_categories], pa.string()),
    })  # fmt: skip
    train = pa.table({
        **{f"x{j}": [rng.gauss(3, 2) for _ in range(rows)] for j in range(4)},
        "colour": [rng.choice(["red", "blue", "5", "true"]) for _ in range(rows)],
        "size": [rng.choice(["1", "2", "5"]) for _ in range(rows)],
        "y": [float(i) for i in range(rows)],
    })  # fmt: skip
    prep = Preprocessor.fit(train, "y", "regression", Combine(across_ranks=False))

    inputs = instances_features(json.dumps({"instances": sent}).encode(), prep)
    assert inputs.shape == (rows, prep.num_features) and not inputs[:, :4].isnan().any()
    assert torch.equal(inputs, prep.features(as_file))

    # Integers alone (numpy reads them as int64, or as objects beyond it), booleans alone: the same again.
    for values in ([7, -3, 2**53 + 1, 2**62], [2**63, 2**64, -(2**63) - 1, 10**300], [True, False, True, True]):
        sent = [{**{f"x{j}": values[j] for j in range(4)}, "colour": "red", "size": "1"}]
        as_file = pa.table({**{f"x{j}": [float(values[j])] for j in range(4)}, "colour": ["red"], "size": ["1"]})
        assert torch.equal(instances_features(json.dumps({"instances": sent}).encode(), prep), prep.features(as_file))


def test_a_refusal_names_the_first_value_at_fault_in_reading_order():
    """Numbers and categories are checked by different code (issue 41); the refusal still names the first value at
    fault instance by instance, column by column, as the model reads them."""
    train = pa.table({"x": [1.0, 2.0], "colour": ["red", "blue"], "size": ["1", "2"], "y": [1.0, 2.0]})
    prep = Preprocessor.fit(train, "y", "regression", Combine(across_ranks=False))
    sent = [{"x": 1, "colour": "red", "size": {}}, {"x": 2, "colour": [], "size": "1"}]
    with pytest.raises(Refused, match=r'^instances\[0\]\["size"\] must be a string, a number or null, not an object'):
        instances_features(json.dumps({"instances": sent}).encode(), prep)
    sent = [{"x": 1, "colour": "red", "size": {}}, {"x": "2", "colour": "red", "size": "1"}]
    with pytest.raises(Refused, match=r'^instances\[0\]\["size"\]'):
        instances_features(json.dumps({"instances": sent}).encode(), prep)
    sent = [{"x": 1, "colour": "red", "size": "1"}, {"x": 2, "colour": "red"}]
    with pytest.raises(Refused, match=r'^instances\[1\] lacks 1 of the columns the model reads: "size"'):
        instances_features(json.dumps({"instances": sent}).encode(), prep)
    sent = [{"x": 1, "colour": 2**64, "size": "1"}]
    with pytest.raises(Refused, match=r'^instances\[0\]\["colour"\] is an integer beyond 64 bits'):
        instances_features(json.dumps({"instances": sent}).encode(), prep)


def test_regression_answers_a_value_and_classification_a_label_with_its_confidence():
    table = pa.table({"x": [0.0, 1.0, 2.0, 3.0], "t": [10.0, 20.0, 30.0, 40.0]})
    body = json.dumps({"instances": [{"x": 1.0}]}).encode()
    regression = Preprocessor.fit(table, "t", "regression", Combine(across_ranks=False))
    assert answer(body, torch.nn.Linear(1, 1), regression)["predictions"][0].keys() == {"prediction"}
    labels = pa.table({"x": [0.0, 1.0], "t": ["no", "yes"]})
    classification = Preprocessor.fit(labels, "t", "auto", Combine(across_ranks=False))
    (only,) = answer(body, torch.nn.Linear(1, 2), classification)["predictions"]
    assert only["prediction"] in ("no", "yes") and 0.5 <= only["confidence"] <= 1.0
