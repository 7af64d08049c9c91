"""An exponential moving average (EMA) of the parameters (train.ema_decay, train.ema_warmup).

After each applied update t = 0, 1, 2, ... (the optimizer's count before it), with the new
parameters p_{t+1}:

  ema_{t+1} = d_t * ema_t + (1 - d_t) * p_{t+1}      ema_0 = p_0 (the initial parameters)
  d_t = ema_decay                                     ema_warmup = False (fairseq's plain EMA)
  d_t = min(ema_decay, (1 + t) / (10 + t))            ema_warmup = True (Marian's, OpenNMT-py's
                                                      and TensorFlow's ExponentialMovingAverage)

The warm-up makes the early decay small (0.1 at the first update, 0.5 at the 9th), so the random
initial parameters weigh nothing after a few hundred updates whatever ema_decay is; without it
they keep the weight ema_decay^t (0.22 after 1500 updates at 0.999). A skipped update
(train.nonfinite) leaves the EMA as it is, with the parameters: it averages the parameters the run
held, once each.

The EMA is kept in float32 whatever the parameters' dtype (summing (1 - d) * p into it loses the
low bits in bfloat16 once 1 - d is below bfloat16's 2^-8 resolution), in the train state beside the
parameters, sharded as they are (it has their logical axes: tfm/train/state.py), checkpointed and
resumed with them, and evaluated beside them (`dev_ema/...`; `tfm eval --checkpoint ema`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

WARMUP_OFFSET = 10.0  # d_t <= (1 + t) / (10 + t)


@dataclasses.dataclass(frozen=True)
class EmaSettings:
  """train.ema_decay (in (0, 1)) and train.ema_warmup, as the step takes them."""
  decay: float
  warmup: bool = True

  @classmethod
  def of(cls, train) -> "EmaSettings | None":
    """The settings of a `train` config section; None where the EMA is off (ema_decay = 0)."""
    return cls(float(train.ema_decay), bool(train.ema_warmup)) if train.ema_decay > 0 else None


def decay_at(settings: EmaSettings, count: jax.Array) -> jax.Array:
  """d_t (float32 []) for the update whose optimizer count before it is `count` (int [])."""
  decay = jnp.float32(settings.decay)
  if not settings.warmup:
    return decay
  t = jnp.asarray(count, jnp.float32)
  return jnp.minimum(decay, (1.0 + t) / (WARMUP_OFFSET + t))


def init_ema(params: Any) -> Any:
  """ema_0: the parameters in float32 (a tree like params; boxed leaves stay boxed, so the EMA
  takes the parameters' logical axes and shardings)."""
  return jax.tree.map(lambda p: jnp.asarray(p, jnp.float32), params)


def update_ema(ema: Any, params: Any, settings: EmaSettings, count: jax.Array) -> Any:
  """ema_{t+1} = d_t * ema_t + (1 - d_t) * p_{t+1}, float32, leaf by leaf (count = t)."""
  d = decay_at(settings, count)
  return jax.tree.map(lambda e, p: d * e + (1.0 - d) * p.astype(jnp.float32), ema, params)
