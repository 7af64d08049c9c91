"""Learning-rate schedules, as functions of the optimizer's update count.

Optax calls a schedule with the number of updates already applied: 0 on the first update. The paper's
formula (section 5.3) is written for step numbers starting at 1 (at step 0 it would be 0 * inf), so every
schedule here evaluates its formula at step = count + 1: the first update uses step 1.

  rsqrt_warmup   lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)       (the paper)
                 Linear warmup, then decay with the inverse square root of the step; the peak is
                 scale * (d_model * warmup)^-0.5 at step = warmup (6.99e-4 for 512 and 4000).
  linear_cosine  peak * step / warmup during warmup, then a half cosine from peak down to
                 end_fraction * peak at `total_steps`, constant afterwards.
  constant       peak * min(1, step / warmup): linear warmup (none when warmup = 0), then constant.
  rsqrt          peak * min(step / warmup, sqrt(warmup / step)): linear warmup to the peak, then
                 inverse-square-root decay; with warmup = 0 it is peak * step^-0.5.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

Schedule = Callable[[jnp.ndarray], jnp.ndarray]


def _step(count) -> jnp.ndarray:
  """Optax update count (0-based) -> the step number of the formulas (1-based), float32."""
  return jnp.asarray(count, jnp.float32) + 1.0


def _warmup(step, warmup_steps: int):
  return jnp.minimum(1.0, step / warmup_steps) if warmup_steps > 0 else jnp.ones_like(step)


def rsqrt_warmup(d_model: int, warmup_steps: int, scale: float = 1.0) -> Schedule:
  """The paper: scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5); warmup_steps >= 1."""

  def schedule(count):
    step = _step(count)
    return scale * d_model**-0.5 * jnp.minimum(step**-0.5, step * warmup_steps**-1.5)

  return schedule


def linear_cosine(peak: float, warmup_steps: int, total_steps: int,
                  end_fraction: float = 0.0) -> Schedule:
  """Linear warmup to `peak`, then a cosine decay to end_fraction * peak at total_steps
  (> warmup_steps)."""

  def schedule(count):
    step = _step(count)
    progress = jnp.clip((step - warmup_steps) / (total_steps - warmup_steps), 0.0, 1.0)
    cosine = end_fraction + (1.0 - end_fraction) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    return peak * jnp.where(step < warmup_steps, _warmup(step, warmup_steps), cosine)

  return schedule


def constant(peak: float, warmup_steps: int = 0) -> Schedule:
  """peak * min(1, step / warmup_steps): constant after an optional linear warmup."""

  def schedule(count):
    return peak * _warmup(_step(count), warmup_steps)

  return schedule


def rsqrt(peak: float, warmup_steps: int = 0) -> Schedule:
  """peak * min(step / warmup, sqrt(warmup / step)); peak * step^-0.5 when warmup_steps = 0."""

  def schedule(count):
    step = _step(count)
    if warmup_steps == 0:
      return peak * step**-0.5
    return peak * jnp.minimum(step / warmup_steps, jnp.sqrt(warmup_steps / step))

  return schedule


def make_schedule(train, d_model: int) -> Schedule:
  """The schedule named by `train.schedule` (a validated TrainConfig)."""
  if train.schedule == "rsqrt_warmup":
    return rsqrt_warmup(d_model, train.warmup_steps, train.learning_rate)
  if train.schedule == "linear_cosine":
    return linear_cosine(train.learning_rate, train.warmup_steps, train.steps,
                         train.end_learning_rate_fraction)
  if train.schedule == "constant":
    return constant(train.learning_rate, train.warmup_steps)
  return rsqrt(train.learning_rate, train.warmup_steps)
