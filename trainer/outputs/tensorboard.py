"""TensorBoard scalars without the tensorboard package. An event file is a TFRecord stream of `Event` protocol
buffers; a scalar needs only four fields, so they are encoded by hand here:

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }

TFRecord framing: uint64 length, masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes. Cloud
Storage objects cannot be appended to, so the whole file is rewritten on every flush (scalars stay small).
"""

from __future__ import annotations

import os
import socket
import struct
import time

from trainer.storage.folders import open_folder


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 is sent as its two's complement
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def encode_event(wall_time: float, step: int, scalars: dict[str, float] | None = None, file_version: str = "") -> bytes:
    event = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3 | 0) + _varint(step)
    if file_version:
        event += _length_delimited(3, file_version.encode())
    if scalars:
        values = b"".join(
            _length_delimited(1, _length_delimited(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value))
            for tag, value in scalars.items()
        )
        event += _length_delimited(5, values)
    return event


def frame_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked_crc(length)) + data + struct.pack("<I", _masked_crc(data))


class DiscardedScalars:
    """What every rank but 0 writes TensorBoard scalars to: nothing (rank 0 alone logs and saves)."""

    def add_scalars(self, step: int, scalars: dict[str, float]) -> None:
        pass

    def flush(self) -> None:
        pass


class ScalarWriter:
    def __init__(self, log_dir: str):
        self.folder = open_folder(log_dir)
        self.name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.trainctl"
        self.records = bytearray(frame_record(encode_event(time.time(), 0, file_version="brain.Event:2")))

    def add_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self.records += frame_record(encode_event(time.time(), step, scalars))

    def flush(self) -> None:
        self.folder.write_bytes(self.name, bytes(self.records))
