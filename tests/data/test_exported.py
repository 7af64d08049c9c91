"""A dataset exported as text pairs (tfm/data/exported.py) reads as its TFDS splits do, finds the
same token cache, and is read without importing TFDS or TensorFlow."""

import gzip
import os
import subprocess
import sys

import pytest

import tfm_data_testlib as testlib
from tfm.data import cache, exported, pipeline, sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def export_cfg(bible_env, tmp_path_factory):
  """The fake Bible's splits exported into a data.data_dir of their own."""
  cfg = bible_env["cfg"]
  data_dir = tmp_path_factory.mktemp("export")
  source = sources.DataSource.of(cfg)
  splits = {name: source.open(split) for split, name in source.splits}
  exported_cfg = cfg.replace(data_dir=str(data_dir), manual_dir=None)
  exported.write(exported.export_dir(exported_cfg), cfg.dataset, splits)
  return exported_cfg


def test_export_reads_as_the_tfds_splits(cfg, export_cfg):
  for split in sources.SPLITS:
    want = sources.DataSource.of(cfg).open(split)
    got = sources.DataSource.of(export_cfg).open(split)
    assert isinstance(got, exported.ExportedSplit) and len(got) == len(want) > 0
    assert got.version == want.version and got.version
    assert [got[i] for i in range(len(got))] == [
        tuple(bytes(v).decode("utf-8") for v in want[i]) for i in range(len(want))]
  from_export = sources.DataSource.of(export_cfg)
  assert from_export.export == exported.export_dir(export_cfg)
  assert pipeline.eval_text_pairs(export_cfg, from_export, "dev") == pipeline.eval_text_pairs(
      cfg, sources.DataSource.of(cfg), "dev")
  assert sources.prepare(from_export) is None  # ready as it is: no TFDS builder


def test_export_finds_the_token_cache_built_from_tfds(cfg, export_cfg, tok, tmp_path):
  """The cache's fingerprint (records, TFDS version) is the same from either, so a cache built
  from the TFDS split serves the export, and their batches are the same."""
  from_tfds = cfg.replace(cache=True, cache_dir=str(tmp_path), overlong="truncate")
  from_export = export_cfg.replace(cache=True, cache_dir=str(tmp_path), overlong="truncate")
  built = cache.open_cache(from_tfds, sources.DataSource.of(from_tfds), tok)
  found = cache.open_cache(from_export, sources.DataSource.of(from_export), tok)
  assert found.directory == built.directory and os.listdir(tmp_path) == [
      os.path.basename(os.path.dirname(built.directory))]
  want = pipeline.train_iterator(from_tfds, sources.DataSource.of(from_tfds), tok)
  got = pipeline.train_iterator(from_export, sources.DataSource.of(from_export), tok)
  try:
    assert testlib.same_batches([next(got) for _ in range(5)], [next(want) for _ in range(5)])
  finally:
    want.close()
    got.close()


def test_export_is_read_without_tfds_or_tensorflow(export_cfg):
  """In a fresh process where importing either fails, the export's splits and batches read."""
  code = f"""
import sys
for name in ("tensorflow", "tensorflow_datasets"):
  sys.modules[name] = None  # importing it raises ModuleNotFoundError
from tfm.data.config import DataConfig
from tfm.data import pipeline, sources
cfg = DataConfig(dataset={export_cfg.dataset!r}, source_lang="en", target_lang="es",
                 data_dir={export_cfg.data_dir!r}, vocab_size=300)
source = sources.DataSource.of(cfg)
sources.prepare(source)
print(len(source.open("train")), len(pipeline.eval_text_pairs(cfg, source, "dev")))
"""
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                        env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  train, dev = map(int, done.stdout.split())
  assert train > 100 and dev > 0


def test_a_partial_export_is_refused_in_one_line(export_cfg, tmp_path):
  directory = exported.export_dir(export_cfg)
  copy = tmp_path / "copy"
  os.makedirs(copy)
  for name in os.listdir(directory):
    with open(os.path.join(directory, name), "rb") as f:
      data = f.read()
    if name == "validation.jsonl.gz":
      data = gzip.compress(b"".join(gzip.decompress(data).splitlines(keepends=True)[:-1]))
    (copy / name).write_bytes(data)
  with pytest.raises(ValueError, match=r"validation\.jsonl\.gz: \d+ pairs, meta\.json says \d+"):
    exported.ExportedSplit(str(copy), "validation", "en", "es")
  with pytest.raises(FileNotFoundError, match="the export has no split 'dev'"):
    exported.ExportedSplit(str(copy), "dev", "en", "es")
