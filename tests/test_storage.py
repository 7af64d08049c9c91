"""Whole-file writes (tfm/storage.write_atomically): the target holds all of the data or is as it
was, and a failed write leaves nothing beside it."""

import pytest

from tfm import storage


def test_a_write_replaces_the_target_whole(tmp_path):
  target = tmp_path / "out" / "file.json"
  storage.write_atomically(target, "old")
  storage.write_atomically(target, "new")
  assert target.read_text() == "new" and sorted(p.name for p in target.parent.iterdir()) == [
      "file.json"]


@pytest.mark.parametrize("files", [(), ("keep",)])
def test_a_failed_write_leaves_no_temporary_file(tmp_path, files):
  """The target is a directory (empty, or not): the rename fails after the data was written."""
  target = tmp_path / "out.png"
  target.mkdir()
  for name in files:
    (target / name).write_text("x")
  before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
  with pytest.raises(OSError):
    storage.write_atomically(target, b"png")
  assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
