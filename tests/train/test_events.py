"""TensorBoard event files: what EventWriter writes, TensorFlow's own reader reads, and
read_scalars reads back (the last write of a step wins across files)."""

import time
import types

import pytest

from tfm.train.trackers import events
from tfm.train.trackers.events import EventWriter, read_scalars


def test_written_scalars_read_back_by_tensorflow_and_by_us(tmp_path):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel  (seconds to import; tfm never does)
  writer = EventWriter(str(tmp_path))
  writer.scalars(1, {"train/loss": 5.5, "train/learning_rate": 1e-3})
  writer.scalars(2, {"train/loss": 4.25})
  writer.close()
  (path,) = tmp_path.glob("events.out.tfevents.*")
  seen = [(e.step, v.tag, v.simple_value) for e in tf.compat.v1.train.summary_iterator(str(path))
          for v in e.summary.value]  # checks the records' CRCs too
  assert seen == [(1, "train/loss", 5.5), (1, "train/learning_rate", pytest.approx(1e-3)),
                  (2, "train/loss", 4.25)]
  assert read_scalars(tmp_path) == {"train/loss": [(1, 5.5), (2, 4.25)],
                                    "train/learning_rate": [(1, pytest.approx(1e-3))]}


def test_a_resumed_run_overrides_repeated_steps_and_a_torn_record_is_ignored(tmp_path,
                                                                              monkeypatch):
  first = EventWriter(str(tmp_path))
  first.scalars(3, {"dev/nll": 2.0})
  first.scalars(6, {"dev/nll": 1.5})  # logged, then the run was killed before checkpointing 6
  first.close()
  # A later run: a later wall time and file name (the writer's clock 2 s on, not a wait).
  later = time.time() + 2
  monkeypatch.setattr(events, "time", types.SimpleNamespace(time=lambda: later))
  second = EventWriter(str(tmp_path))
  second.scalars(6, {"dev/nll": 1.25})
  second.close()
  newest = max(tmp_path.glob("events.out.tfevents.*"), key=lambda p: p.name)
  with open(newest, "ab") as f:
    f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00partial")  # a record being written
  assert read_scalars(tmp_path) == {"dev/nll": [(3, 2.0), (6, 1.25)]}
  assert read_scalars(tmp_path / "missing") == {}
