"""The optimizer (section 5.3): Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 and a schedule.

The parts, in order (each optional part is off in the paper's configs):
  1. clip_by_global_norm(train.grad_clip_norm)      when grad_clip_norm > 0
  2. scale_by_adam(b1, b2, eps)                    m_t / (sqrt(v_t) + eps), bias-corrected
  3. add_decayed_weights(train.weight_decay)       decoupled weight decay (Loshchilov & Hutter), on
                                                   parameters with 2+ dimensions only (weight matrices
                                                   and embeddings, not biases or LayerNorm scales; a
                                                   scanned stack's layers dimension does not count)
  4. scale_by_learning_rate(schedule)              -lrate(step), step = update count + 1
so an update is  -lrate * (adam_direction + weight_decay * param).
"""

from __future__ import annotations

import jax
import optax

from tfm.model.scan_convert import stacked_dims
from tfm.train.schedules import Schedule, make_schedule


def decay_mask(params):
  """True for parameters that weight decay applies to: those with at least 2 dimensions of their
  own (a scanned stack's leading layers dimension aside, so the mask does not depend on
  model.scan_layers)."""
  return jax.tree_util.tree_map_with_path(lambda path, p: p.ndim - stacked_dims(path) >= 2, params)


def make_optimizer(train, d_model: int) -> tuple[optax.GradientTransformation, Schedule]:
  """Builds the optimizer from a `train` config section; returns (optimizer, schedule).

  The schedule maps the optimizer's update count (0 on the first update) to the learning rate it uses.
  """
  schedule = make_schedule(train, d_model)
  clip = optax.clip_by_global_norm(train.grad_clip_norm) if train.grad_clip_norm > 0 else None
  adam = optax.scale_by_adam(b1=train.adam_b1, b2=train.adam_b2, eps=train.adam_eps)
  decay = (optax.add_decayed_weights(train.weight_decay, mask=decay_mask)
           if train.weight_decay > 0 else None)
  rate = optax.scale_by_learning_rate(schedule)

  # The state holds only the parts that keep one, by name: opt_state = {adam: (count, mu, nu),
  # learning_rate: (count,)}, whichever optional parts are on. Clipping and weight decay keep no
  # state, so a resume may turn either on or off (optax.chain would renumber every array).
  def init(params):
    return {"adam": adam.init(params), "learning_rate": rate.init(params)}

  def update(grads, state, params=None):
    if clip is not None:
      grads, _ = clip.update(grads, clip.init(params))
    updates, adam_state = adam.update(grads, state["adam"], params)
    if decay is not None:
      updates, _ = decay.update(updates, decay.init(params), params)
    updates, rate_state = rate.update(updates, state["learning_rate"], params)
    return updates, {"adam": adam_state, "learning_rate": rate_state}

  return optax.GradientTransformation(init, update), schedule
