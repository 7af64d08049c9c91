"""Checkpoint averaging (paper section 6.1): the mean of the parameters of the last N checkpoints.

The base model averages the last 5 checkpoints, the big model the last 20 (config key
`train.average_checkpoints`; the checkpoints are written every `train.checkpoint_every` steps and
`train.keep_checkpoints` must keep at least that many).

Memory: the checkpoints are never all in memory at once. A float32 running sum, laid out on the
shardings of the target parameters, is created first; each checkpoint's parameters are then restored
(only the params, each host reading only its shards), added into the sum by a jitted add that donates
the sum (so the new sum reuses its buffers) and dropped before the next one is read. The peak is the
sum plus one restored checkpoint (twice the parameters at float32), whatever N is. The sum is divided
by N at the end, in float32.

Which checkpoints: the newest `num` of the periodic series (steps that are multiples of
train.checkpoint_every, and the final step), so extra checkpoints written at a preemption never enter
the mean. A checkpoint that cannot be read or fails its checksums is skipped with a warning and the
next older one is taken. Too few: none at all raises; fewer than `num` (e.g. a short run, or
keep_checkpoints lowered after training) logs a warning and averages those. Explicit `steps` must
all exist and be readable.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from etils import epath

from tfm.train import checkpoint as ckpt_lib

log = logging.getLogger(__name__)

KEY = "train.average_checkpoints"


def select_steps(workdir: str | epath.Path, num: int, steps: Sequence[int] | None = None,
                 period: int | None = None, final_step: int | None = None) -> tuple[list[int], bool]:
  """(candidate steps, newest first; whether every one must be used).

  Explicit `steps` must all exist and are all used. Otherwise the candidates are the checkpoints of
  the periodic series (multiples of `period` = train.checkpoint_every, and `final_step` =
  train.steps; every checkpoint if there is no such step), of which the newest `num` readable ones
  are averaged. Raises ValueError if num < 1 (without steps), if workdir has no checkpoint, or if an
  explicit step is missing or repeated.
  """
  directory = ckpt_lib.checkpoint_dir(workdir)
  available = ckpt_lib.available_steps(workdir)
  if steps is not None:
    chosen = [int(s) for s in steps]
    if not chosen:
      raise ValueError(f"no checkpoint steps given to average (workdir {workdir}); "
                       f"available: {available}")
    repeated = sorted({s for s in chosen if chosen.count(s) > 1})
    if repeated:
      raise ValueError(f"checkpoint steps {repeated} given more than once: each checkpoint is "
                       f"averaged once")
    missing = sorted(set(chosen) - set(available))
    if missing:
      raise ValueError(f"checkpoint steps {missing} not found in {directory}; available: {available}")
    return sorted(chosen, reverse=True), True
  if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
    raise ValueError(f"config key {KEY}: expected a positive integer (1 = the latest checkpoint "
                     f"only), got {num!r}")
  if not available:
    raise ValueError(f"no finished checkpoint in {directory} (workdir {workdir}): nothing to average "
                     f"({KEY}={num}); train first")
  series = ckpt_lib.periodic(available, period, final_step) or available
  return sorted(series, reverse=True), False


def _shardings(abstract_params: Any) -> Any:
  def sharding(path, x):
    if getattr(x, "sharding", None) is None:
      raise ValueError(f"abstract_params{jax.tree_util.keystr(path)} has no sharding: pass the params "
                       "of tfm.train.state.abstract_train_state(...)[0] (ShapeDtypeStructs with "
                       "shardings)")
    return x.sharding
  return jax.tree_util.tree_map_with_path(sharding, abstract_params)


def average_params(workdir: str | epath.Path, abstract_params: Any, num: int,
                   steps: Sequence[int] | None = None, period: int | None = None,
                   final_step: int | None = None) -> tuple[Any, list[int]]:
  """(mean params, steps averaged): the mean of the parameters of the last `num` good checkpoints.

  workdir: a training workdir (checkpoints in workdir/checkpoints/<step>/state).
  abstract_params: the target tree of jax.ShapeDtypeStruct with shardings, e.g.
    `Experiment.abstract_params`; each checkpoint is restored onto it.
  num: how many of the latest checkpoints of the periodic series (see select_steps; period =
    train.checkpoint_every, final_step = train.steps) to average (train.average_checkpoints; 1 = the
    latest only). A checkpoint that cannot be restored or fails its checksums is skipped with a
    warning and the next older one taken; fewer good ones than `num`: all of them, with a warning;
    none: RuntimeError naming the newest failure. Ignored when `steps` is given.
  steps: explicit checkpoint steps to average instead (all must exist and restore, none repeated).

  Returns the mean as a tree of float32 arrays with the structure and shapes of abstract_params, on
  its shardings, and the steps used, ascending. Each checkpoint is restored in abstract_params'
  dtypes (a bfloat16 target reads bfloat16 values) and summed in float32. Every process must call
  this (the restores and the jitted sums are collective on a multi-host mesh).
  """
  candidates, strict = select_steps(workdir, num, steps, period, final_step)
  want = len(candidates) if strict else int(num)
  shardings = _shardings(abstract_params)
  tree_map = jax.tree_util.tree_map

  def zeros_fn():
    return tree_map(lambda x: jnp.zeros(x.shape, jnp.float32), abstract_params)

  def add_fn(total, params):  # total float32, params in the checkpoint's (target's) dtype
    return tree_map(lambda t, p: t + p.astype(jnp.float32), total, params)

  def divide_fn(total, n):
    return tree_map(lambda t: t / n, total)

  # Every output lies on the params' shardings; the running sum is donated (updated in place).
  zeros = jax.jit(zeros_fn, out_shardings=shardings)
  add = jax.jit(add_fn, out_shardings=shardings, donate_argnums=0)
  divide = jax.jit(divide_fn, out_shardings=shardings, donate_argnums=0)

  directory = ckpt_lib.checkpoint_dir(workdir)
  total, chosen, failures = zeros(), [], []
  for step in candidates:
    if len(chosen) == want:
      break
    try:
      params = ckpt_lib.restore_params(workdir, step, abstract_params)
    except Exception as error:  # noqa: BLE001 -- a bad checkpoint is skipped, loudly
      message = f"checkpoint {directory}/{step} cannot be restored for averaging: " \
                f"{type(error).__name__}: {error}"
      if strict:
        raise ckpt_lib.CheckpointError(message) from error
      failures.append(message)
      continue
    total = add(total, params)
    chosen.append(step)
    del params
    # Done before the next restore starts, so this checkpoint's arrays are freed first.
    jax.block_until_ready(total)
  if not chosen:
    raise ckpt_lib.CheckpointError(f"no checkpoint in {directory} can be restored for averaging; "
                                   f"the newest: {failures[0]}")
  for message in failures:  # one warning per skipped checkpoint, now that others were good
    log.warning("%s; skipped", message)
  if len(chosen) < want:
    log.warning("%s=%d but %s holds only %d good checkpoint(s) of the series (steps %s): averaging "
                "those", KEY, want, directory, len(chosen), sorted(chosen))
  mean = divide(total, np.float32(len(chosen)))
  log.info("averaged the parameters of %d checkpoint(s) in %s: steps %s", len(chosen), directory,
           sorted(chosen))
  return mean, sorted(chosen)
