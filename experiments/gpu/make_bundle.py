"""Builds the bundle that travels with the checkout to a GPU node that has no network (docs/gpu.md).

  python experiments/gpu/make_bundle.py                      # configs/bible_base.py's corpus
  python experiments/gpu/make_bundle.py --config.data.data_dir=DIR --out=/tmp/bundle

Run it here, in tfm's own environment (TFDS, and the SWORD modules or a prepared dataset); the
node needs none of that. It writes, under --out (default experiments/gpu/bundle/, which git
ignores: the device tool carries it, `carry=["experiments/gpu/bundle"]`):

  wheels/*.whl      the packages of experiments/gpu/node-requirements.txt, for --python_version
                    (the node's 3.12), downloaded with pip (or copied from --wheels_from)
  data/tfm_export/  the config's dataset, every split as text pairs (tfm/data/exported.py): the
                    dev split's verses for dev BLEU, the others so the cache can be rebuilt
  data/vocab/       its SentencePiece vocabulary (data.vocab_size pieces; a language model's,
                    data.text_key, of that text alone)
  data/tfm_cache/   the train split's token cache (tfm/data/cache.py) at data.max_length (a
                    language model's: its texts whole), one host
  manifest.json     the data settings the table must train with (dataset, languages, sizes) and
                    the files with their bytes

The data is prepared where the config says (data.data_dir, data.manual_dir); the export, the
vocabulary and the cache are then made from the export itself, exactly as the node will read them.
The bundle is refused (and removed) when it is over --max_mib together with experiments/flax_wmt/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from absl import app, flags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tfm and configs of this checkout, installed or not

from tfm import config as config_lib  # noqa: E402
from tfm import tasks  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out", str(ROOT / "experiments" / "gpu" / "bundle"), "the bundle's directory "
                    "(replaced)")
flags.DEFINE_string("python_version", "3.12", "the node's Python, for the wheels")
flags.DEFINE_string("wheels_from", None, "copy the wheels from this directory instead of "
                    "downloading them (they must be for --python_version)")
flags.DEFINE_float("max_mib", 30.0, "the most the bundle and experiments/flax_wmt/ may hold")

REQUIREMENTS = ROOT / "experiments" / "gpu" / "node-requirements.txt"
FLAX_WMT = ROOT / "experiments" / "flax_wmt"
# The data keys the node's run must share with the bundle: the vocabulary's file name and the
# token cache's fingerprint depend on them.
DATA_KEYS = ("dataset", "source_lang", "target_lang", "vocab_size", "max_length", "overlong",
             "text_key")  # text_key: a language model's one text (its vocabulary and cache)


def requirements() -> list[str]:
  """`name==version` lines of node-requirements.txt, comments dropped."""
  lines = (line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines())
  return [line for line in lines if line]


def fetch_wheels(directory: Path, python_version: str, wheels_from: str | None) -> None:
  """The node's wheels into `directory`: pip download for CPython `python_version` on
  manylinux x86_64, or a copy of the matching files of `wheels_from`."""
  directory.mkdir(parents=True)
  wanted = requirements()
  if wheels_from is not None:
    names = {w.split("==")[0].lower().replace("-", "_") for w in wanted}
    found = [p for p in Path(wheels_from).glob("*.whl") if p.name.split("-")[0].lower() in names]
    if len(found) != len(names):
      raise app.UsageError(f"--wheels_from={wheels_from}: expected one wheel of each of "
                           f"{sorted(names)}, found {sorted(p.name for p in found)}")
    for path in found:
      shutil.copy(path, directory / path.name)
    return
  platforms = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
               "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]
  command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--implementation", "cp", "--python-version", python_version,
             *(f"--platform={p}" for p in platforms), "-d", str(directory), *wanted]
  subprocess.run(command, check=True)


def build_data(config, data_root: Path) -> dict:
  """Prepares the config's dataset, exports it to data_root, then makes the vocabulary and the
  token cache from the export. Returns the manifest's data settings."""
  # pylint: disable=import-outside-toplevel
  from tfm.data import cache, exported, sources, vocabulary
  data = config.data
  source = sources.DataSource.of(data)
  sources.prepare(source, create_data_dir=data.data_dir is not None)
  splits = {tfds_split: source.open(split) for split, tfds_split in source.splits}
  bundled = data.replace(data_dir=str(data_root), manual_dir=None, vocab_dir=str(data_root / "vocab"),
                         cache_dir=None, cache=True)
  exported.write(exported.export_dir(bundled), data.dataset, splits)
  from_export = sources.DataSource.of(bundled)
  # trained from the export's split: a language model's (data.text_key) from that text alone
  tok = vocabulary.get_tokenizer(bundled, source=from_export, task=tasks.get(config.task))
  cache.open_cache(bundled, from_export, tok)
  if tok.vocab_size != data.vocab_size:
    raise ValueError(f"the vocabulary has {tok.vocab_size} pieces, data.vocab_size is "
                     f"{data.vocab_size}: the corpus is too small for it; lower data.vocab_size")
  return {key: getattr(data, key) for key in DATA_KEYS}


def size_of(path: Path) -> int:
  return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv):
  del argv
  if FLAGS.config is None:
    raise app.UsageError("--config=FILE is required")
  config = config_lib.build(FLAGS.config)
  out = Path(FLAGS.out).resolve()
  tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
  shutil.rmtree(tmp, ignore_errors=True)
  start = time.perf_counter()
  try:
    fetch_wheels(tmp / "wheels", FLAGS.python_version, FLAGS.wheels_from)
    settings = build_data(config, tmp / "data")
    files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*"))
             if p.is_file()}
    manifest = {"python_version": FLAGS.python_version, "data": settings,
                "requirements": requirements(), "files": files}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = size_of(tmp) + size_of(FLAX_WMT)
    if total > FLAGS.max_mib * 2**20:
      raise ValueError(f"the bundle and experiments/flax_wmt/ hold {total / 2**20:.1f} MiB, over "
                       f"--max_mib={FLAGS.max_mib:g}")
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  shutil.rmtree(out, ignore_errors=True)
  os.rename(tmp, out)
  print(f"[make_bundle] {out}: {size_of(out) / 2**20:.1f} MiB ({total / 2**20:.1f} MiB with "
        f"experiments/flax_wmt/) in {time.perf_counter() - start:.0f} s; data {settings}")


if __name__ == "__main__":
  config_lib.define_config_flag(FLAGS, sys.argv, default=str(ROOT / "configs" / "bible_base.py"))
  app.run(main)
