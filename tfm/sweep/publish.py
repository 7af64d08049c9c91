"""Finished runs kept outside a sweep's root (`tfm sweep --publish=DIR`), so that a sweep on another
machine, or after the root is gone, goes on from them.

DIR has a sweep root's layout without the checkpoints: DIR/NAME/ holds a finished run's
sweep_result.json, its dev evaluation (eval_dev_*.json) and sweep.log (what training and evaluation
printed); DIR/vocab/ the sweep's vocabulary; DIR/results.jsonl, table.md and the figure are the
report over every published run, rewritten as each run finishes. `tfm sweep --report --root=DIR`
rebuilds that report from DIR alone. A directory committed under experiments/results/ is meant.

Before a sweep starts its runs, the published vocabulary is copied into the root (where the root has
none), and a run without a finished result in the root takes its published one when that matches:
status ok, the same step count and the same fingerprint, which is the sha256 of the run's config
(less the paths that differ between machines and the per-platform choices of how it is computed) and of its vocabulary. Any other published result is
left alone, and the run trains.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
from typing import Iterable

from tfm import config as config_lib
from tfm.sweep import execute

EVAL_RESULTS = "eval_dev_*.json"
# How the same run executes, chosen per platform: the same run on a CPU and on a GPU may differ in
# them. The results agree to float rounding, or, for train.dropout_prng, are two draws of the same
# experiment's dropout masks, as two platforms' runs are. Left out of the fingerprint (as are the
# paths).
COMPUTATION_KEYS = ("model.layer_norm_grad", "train.input", "train.saves", "train.guard",
                    "train.dropout_prng")


def fingerprint(config: config_lib.Config, vocab_sha256: str, eval_limit: int) -> str:
  """sha256 of the config's values (less execute.MACHINE_KEYS, COMPUTATION_KEYS and the keys of
  config_lib.ADDED_LATER at their earlier value), the vocabulary model's sha256 and the number of
  dev pairs BLEU is scored on."""
  values = config.to_dict()
  for key in execute.MACHINE_KEYS + COMPUTATION_KEYS:
    section, name = key.split(".")
    values[section].pop(name, None)
  for key, earlier in config_lib.ADDED_LATER.items():
    section, _, name = key.rpartition(".")  # a top-level key (task) has no section
    holder = values[section] if section else values
    if holder.get(name) == earlier:
      del holder[name]
  text = json.dumps(values, sort_keys=True, default=str) + f"\n{vocab_sha256}\n{eval_limit}"
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _copy(paths: Iterable[str], directory: str, replace: bool) -> list[str]:
  """Copies each file into `directory` (through a temporary name, so never half written); an
  existing file is kept unless `replace`. Returns the names copied."""
  copied = []
  for path in paths:
    target = os.path.join(directory, os.path.basename(path))
    if replace or not os.path.exists(target):
      os.makedirs(directory, exist_ok=True)
      shutil.copyfile(path, target + ".tmp")
      os.replace(target + ".tmp", target)
      copied.append(os.path.basename(path))
  return copied


def restore_vocab(publish: str, vocab_dir: str) -> list[str]:
  """Copies DIR/vocab/* into vocab_dir where it lacks them; returns the names copied."""
  return _copy(sorted(glob.glob(os.path.join(publish, "vocab", "*"))), vocab_dir, replace=False)


def publish_vocab(vocab_dir: str, publish: str) -> None:
  """Copies the sweep's vocabulary models to DIR/vocab/ where it lacks them."""
  _copy(sorted(glob.glob(os.path.join(vocab_dir, "*.model"))), os.path.join(publish, "vocab"),
        replace=False)


def publish_run(workdir: str, publish: str) -> None:
  """Copies a finished run's result, dev evaluation and log to DIR/NAME/ (the result last, so a
  published result always has its files beside it)."""
  target = os.path.join(publish, os.path.basename(workdir.rstrip(os.sep)))
  files = glob.glob(os.path.join(workdir, EVAL_RESULTS)) + [os.path.join(workdir, execute.LOG)]
  _copy([f for f in files if os.path.exists(f)], target, replace=True)
  _copy([os.path.join(workdir, execute.RESULT)], target, replace=True)


def take_published(names_and_fingerprints: Iterable[tuple[str, str, int]], root: str,
                   publish: str) -> list[str]:
  """For each (name, fingerprint, steps) without a finished result under root, the published run
  that matches is copied into ROOT/NAME; returns the names taken."""
  taken = []
  for name, print_, steps in names_and_fingerprints:
    source, workdir = os.path.join(publish, name), os.path.join(root, name)
    if execute.is_finished(workdir, steps) or not execute.is_finished(source, steps):
      continue
    if execute.read_result(source).fingerprint != print_:
      continue
    _copy(sorted(glob.glob(os.path.join(source, "*"))), workdir, replace=True)
    taken.append(name)
  return taken
