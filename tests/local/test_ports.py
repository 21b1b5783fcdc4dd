"""A server started on a port that another process took first must not be taken for ready because *something*
answers there (a test once talked to the wrong function that way); the start moves to another port."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from local import processes
from local.fake_gcs import start_fake_gcs
from local.processes import PortTaken, free_port, group_listens_on


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        yield squatter.getsockname()[1]


def test_free_ports_are_never_handed_out_twice_and_lie_below_the_ephemeral_range():
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(port < 32768 for port in ports)


def test_a_port_someone_else_listens_on_is_reported_taken(tmp_path: Path, taken_port: int):
    with pytest.raises(PortTaken, match="fake-gcs-server"):
        start_fake_gcs(tmp_path, port=taken_port, timeout=15)


def test_a_start_on_a_free_port_moves_on_when_the_port_was_taken_meanwhile(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
):
    offered = iter([taken_port, free_port()])
    monkeypatch.setattr(processes, "free_port", lambda: next(offered))
    server = start_fake_gcs(tmp_path)
    try:
        assert server.url != f"http://127.0.0.1:{taken_port}"
        assert group_listens_on(server.process.pid, int(server.url.rsplit(":", 1)[1]))
        assert not group_listens_on(server.process.pid, taken_port)
    finally:
        server.stop()
