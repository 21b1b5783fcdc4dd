"""The hand-written TensorBoard event files decode with the real protobuf runtime and carry valid TFRecord
checksums (checked with google-crc32c, an implementation independent of the trainer's)."""

from __future__ import annotations

import struct

import google_crc32c
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from trainer.outputs.tensorboard import ScalarWriter, crc32c


def event_class():
    """tensorflow's Event/Summary messages, cut down to the fields a scalar uses, with their real numbers."""
    f = descriptor_pb2.FileDescriptorProto(name="event_subset.proto", package="tensorboard", syntax="proto3")
    value = f.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=9, label=1)
    value.field.add(name="simple_value", number=2, type=2, label=1)
    summary = f.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=11, label=3, type_name=".tensorboard.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=1, label=1)
    event.field.add(name="step", number=2, type=3, label=1)
    event.field.add(name="file_version", number=3, type=9, label=1)
    event.field.add(name="summary", number=5, type=11, label=1, type_name=".tensorboard.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorboard.Event"))


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(data: bytes) -> list[bytes]:
    records, offset = [], 0
    while offset < len(data):
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        assert length_crc == masked(google_crc32c.value(header))
        payload = data[offset + 12 : offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[offset + 12 + length : offset + 16 + length])
        assert payload_crc == masked(google_crc32c.value(payload))
        records.append(payload)
        offset += 16 + length
    return records


def test_crc32c_matches_the_reference_implementation():
    for data in (b"", b"a", b"123456789", bytes(range(256)) * 3):
        assert crc32c(data) == google_crc32c.value(data)


def test_scalars_round_trip_through_protobuf(tmp_path):
    writer = ScalarWriter(str(tmp_path))
    writer.add_scalars(10, {"train/loss": 0.5, "train/samples_per_second": 1234.0})
    writer.add_scalars(20, {"val/val_accuracy": 0.875})
    writer.flush()

    [path] = tmp_path.glob("events.out.tfevents.*")
    Event = event_class()
    events = [Event.FromString(r) for r in read_records(path.read_bytes())]

    assert events[0].file_version == "brain.Event:2"
    scalars = [(e.step, v.tag, v.simple_value) for e in events[1:] for v in e.summary.value]
    assert scalars == [
        (10, "train/loss", 0.5),
        (10, "train/samples_per_second", 1234.0),
        (20, "val/val_accuracy", 0.875),
    ]
    assert all(e.wall_time > 1.6e9 for e in events)


def test_a_flush_rewrites_the_whole_file(tmp_path):
    writer = ScalarWriter(str(tmp_path))
    writer.add_scalars(1, {"a": 1.0})
    writer.flush()
    writer.add_scalars(2, {"a": 2.0})
    writer.flush()
    [path] = tmp_path.glob("events.out.tfevents.*")
    assert len(read_records(path.read_bytes())) == 3


@pytest.mark.parametrize("step", [0, 1, 127, 128, 2**40])
def test_steps_of_any_size_decode(tmp_path, step):
    writer = ScalarWriter(str(tmp_path))
    writer.add_scalars(step, {"x": 1.0})
    writer.flush()
    [path] = tmp_path.glob("events.out.tfevents.*")
    assert event_class().FromString(read_records(path.read_bytes())[1]).step == step
