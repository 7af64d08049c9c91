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

Too few checkpoints: none at all raises ValueError; fewer than `num` (e.g. a short run, or
keep_checkpoints lowered after training) logs a warning and averages all of those that exist. Explicit
`steps` must all exist.
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


def select_steps(workdir: str | epath.Path, num: int, steps: Sequence[int] | None = None) -> list[int]:
  """The checkpoint steps to average, ascending: the last `num` finished ones in workdir, or `steps`.

  Raises ValueError if num < 1 (without steps), if workdir has no checkpoint, or if an explicit step
  is missing or repeated. Fewer than `num` checkpoints: all of them, with a warning.
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
    return sorted(chosen)
  if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
    raise ValueError(f"config key {KEY}: expected a positive integer (1 = the latest checkpoint "
                     f"only), got {num!r}")
  if not available:
    raise ValueError(f"no finished checkpoint in {directory} (workdir {workdir}): nothing to average "
                     f"({KEY}={num}); train first")
  if len(available) < num:
    log.warning("%s=%d but %s holds only %d finished checkpoint(s) (steps %s): averaging those",
                KEY, num, directory, len(available), available)
  return available[-int(num):]


def _shardings(abstract_params: Any) -> Any:
  def sharding(path, x):
    if getattr(x, "sharding", None) is None:
      raise ValueError(f"abstract_params{jax.tree_util.keystr(path)} has no sharding: pass the params "
                       "of tfm.train.state.abstract_train_state(...)[0] (ShapeDtypeStructs with "
                       "shardings)")
    return x.sharding
  return jax.tree_util.tree_map_with_path(sharding, abstract_params)


def average_params(workdir: str | epath.Path, abstract_params: Any, num: int,
                   steps: Sequence[int] | None = None) -> tuple[Any, list[int]]:
  """(mean params, steps averaged): the mean of the parameters of the last `num` checkpoints.

  workdir: a training workdir (checkpoints in workdir/checkpoints/<step>/state).
  abstract_params: the target tree of jax.ShapeDtypeStruct with shardings, e.g.
    `abstract_train_state(model, tx, mesh, rules)[0].params`; each checkpoint is restored onto it.
  num: how many of the latest checkpoints to average (train.average_checkpoints; 1 = the latest
    only). Fewer available: all of them, with a warning; none: ValueError. Ignored when `steps` is
    given.
  steps: explicit checkpoint steps to average instead (all must exist, none repeated).

  Returns the mean as a tree of float32 arrays with the structure and shapes of abstract_params, on
  its shardings, and the steps used, ascending. Each checkpoint is restored in abstract_params'
  dtypes (a bfloat16 target reads bfloat16 values) and summed in float32. A checkpoint that cannot be
  restored onto abstract_params raises RuntimeError naming it. Every process must call this (the
  restores and the jitted sums are collective on a multi-host mesh).
  """
  chosen = select_steps(workdir, num, steps)
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

  total = zeros()
  for step in chosen:
    try:
      params = ckpt_lib.restore_params(workdir, step, abstract_params)
    except Exception as error:
      raise RuntimeError(f"checkpoint {ckpt_lib.checkpoint_dir(workdir)}/{step} cannot be restored "
                         f"for averaging: {type(error).__name__}: {error}") from error
    total = add(total, params)
    del params
    # Done before the next restore starts, so this checkpoint's arrays are freed first.
    jax.block_until_ready(total)
  mean = divide(total, np.float32(len(chosen)))
  log.info("averaged the parameters of %d checkpoint(s) in %s: steps %s", len(chosen),
           ckpt_lib.checkpoint_dir(workdir), chosen)
  return mean, chosen
