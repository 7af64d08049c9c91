"""TensorBoard event files of scalars: written synchronously, and read back without TensorBoard.

EventWriter writes WORKDIR/tensorboard/events.out.tfevents.* records as soon as they are given
(tensorboardX's SummaryWriter queues them on a thread and its flush() does not wait for the queue,
so a figure drawn right after an evaluation missed its points). read_scalars reads any storage.

An event file is a TFRecord file of `Event` protos (tensorboardX's copy of TensorFlow's): each
record is an 8-byte little-endian length, a 4-byte masked CRC of it, the proto bytes and a 4-byte
masked CRC of them. A resumed run writes a new file and may repeat steps that a killed run had
logged after its last checkpoint; for each (tag, step) the value written last (by wall time) wins.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Mapping

from etils import epath

Scalars = dict[str, list[tuple[int, float]]]  # tag -> [(step, value)] sorted by step


class EventWriter:
  """scalars(step, {tag: value}) -> one Event record in a new event file in `directory` (local);
  summaries(step, [Summary]) writes prepared Summary protos (tfm/sweep/hparams.py's). suffix: the
  file name's end (TensorBoard reads any file whose name holds 'tfevents')."""

  def __init__(self, directory: str, suffix: str = ""):
    from tensorboardX.record_writer import RecordWriter  # pylint: disable=import-outside-toplevel
    os.makedirs(directory, exist_ok=True)
    name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
            + suffix)
    self.path = os.path.join(directory, name)
    self._records = RecordWriter(self.path)
    self._write(file_version="brain.Event:2")

  def _write(self, **fields) -> None:
    from tensorboardX.proto import event_pb2  # pylint: disable=import-outside-toplevel
    self._records.write(event_pb2.Event(wall_time=time.time(), **fields).SerializeToString())

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    from tensorboardX.proto import summary_pb2  # pylint: disable=import-outside-toplevel
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(v))
                                         for tag, v in values.items()])
    self._write(step=int(step), summary=summary)
    self._records.flush()

  def summaries(self, step: int, summaries) -> None:
    for summary in summaries:
      self._write(step=int(step), summary=summary)
    self._records.flush()

  def close(self) -> None:
    self._records.close()


def _records(data: bytes):
  offset = 0
  while offset + 12 <= len(data):
    (length,) = struct.unpack_from("<Q", data, offset)
    start = offset + 12
    if start + length + 4 > len(data):  # a record still being written
      return
    yield data[start:start + length]
    offset = start + length + 4


def read_scalars(directory: str | epath.Path) -> Scalars:
  """Every scalar of every event file in `directory` (none: {})."""
  from tensorboardX.proto import event_pb2  # pylint: disable=import-outside-toplevel
  directory = epath.Path(directory)
  latest: dict[tuple[str, int], tuple[float, float]] = {}
  files = sorted(directory.glob("events.out.tfevents.*")) if directory.exists() else []
  for path in files:
    for record in _records(path.read_bytes()):
      event = event_pb2.Event.FromString(record)
      for value in event.summary.value:
        if value.HasField("simple_value"):
          number = value.simple_value
        elif value.HasField("tensor") and value.tensor.float_val:
          number = value.tensor.float_val[0]
        else:
          continue
        key = (value.tag, int(event.step))
        if key not in latest or event.wall_time >= latest[key][0]:
          latest[key] = (event.wall_time, float(number))
  scalars: Scalars = {}
  for (tag, step), (_, number) in sorted(latest.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    scalars.setdefault(tag, []).append((step, number))
  return scalars
