"""The optimizer: train.optimizer = adam (section 5.3, the default) | adamw | adafactor, one chain.

The parts, in order (each optional part is off in the paper's configs):
  1. clip_by_global_norm(train.grad_clip_norm)      when grad_clip_norm > 0, on the raw gradients
  2. the direction u, by train.optimizer:
       adam, adamw  scale_by_adam(b1, b2, eps)      m_t / (sqrt(v_t) + eps), bias-corrected
       adafactor    per layer (below): scale_by_factored_rms (decay_rate, epsilon, factored,
                    min_dim_size_to_factor), clip_by_block_rms(clipping_threshold), then times
                    max(RMS(param), 1e-3) (multiply_by_parameter_scale); then, with
                    adafactor_momentum b > 0, optax.ema(b, debias=False) of that direction
  3. add_decayed_weights(weight_decay)             decoupled weight decay (Loshchilov & Hutter), on
                                                   parameters with 2+ dimensions only (weight matrices
                                                   and embeddings, not biases or LayerNorm scales; a
                                                   scanned stack's layers dimension does not count)
  4. scale_by_learning_rate(schedule)              -lrate(step), step = update count + 1
so every update is  -lrate * (u + weight_decay * param).

adam and adamw are one rule: `adamw` is Adam whose weight decay defaults to 0.01
(config.ADAMW_WEIGHT_DECAY) instead of 0, so train.optimizer='adam' with weight_decay=0.01 is the
same run as 'adamw'. The decay is decoupled (added to Adam's direction, not to the gradient) and
scaled by the learning rate, as optax.adamw's and PyTorch's AdamW's.

Adafactor is optax.adafactor's algorithm (Shazeer & Stern 2018) with t5x's defaults as the
adafactor_* keys' defaults, rearranged so that the learning rate is the chain's last factor for
every optimizer: the schedule, global-norm clipping, the decay mask and a stack's learning-rate
ratio (tfm/train/stack.py) then act the same way on each. Two consequences, where
optax.adafactor differs: its weight_decay_rate is not scaled by the learning rate (tfm's
train.weight_decay is, as for adam), and its momentum averages updates already scaled by the
learning rate (tfm's averages the direction, then scales; the same while the rate is constant).
t5x's schedule, 0.01 then 1/sqrt(step) from step 10,000, is closest to schedule='rsqrt',
learning_rate=0.01, warmup_steps=10000 (a linear warm-up where t5x is flat).

Adafactor's statistics and its two block RMS's are per weight matrix, so under model.scan_layers,
where one array holds every layer's matrix [layers, ...], they are computed layer by layer (vmapped
over the stack's leading dimension): the same updates, and the same optimizer state once stacked
(tfm convert), as the unrolled model's.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import optax

from tfm.model.scan_convert import stacked_dims
from tfm.train.config import decay_rate
from tfm.train.schedules import Schedule, make_schedule

MIN_PARAMETER_SCALE = 1e-3  # Adafactor's floor on RMS(param) (optax's and t5x's epsilon2)


def decay_mask(params):
  """True for parameters that weight decay applies to: those with at least 2 dimensions of their
  own (a scanned stack's leading layers dimension aside, so the mask does not depend on
  model.scan_layers)."""
  return jax.tree_util.tree_map_with_path(lambda path, p: p.ndim - stacked_dims(path) >= 2, params)


def _is_box(x) -> bool:
  return isinstance(x, nn.meta.AxisMetadata)


def _over_layers(fn, dims: int):
  """fn vmapped over `dims` leading dimensions of every argument (a scanned stack's layers)."""
  for _ in range(dims):
    fn = jax.vmap(fn)
  return fn


def per_layer(inner: optax.GradientTransformation) -> optax.GradientTransformation:
  """`inner` applied to each parameter alone, and to each layer's slice alone inside a scanned
  stack: for transformations that reduce over a whole array (Adafactor's factored statistics,
  its block RMS's), which must see one layer's matrix whatever model.scan_layers is.

  The state mirrors the parameter tree, each leaf replaced by inner's state of that parameter
  (vmapped: with a leading layers dimension in a scanned stack). Given boxed parameters (the
  state's shardings are derived so: tfm/train/state.py), a state array of the parameter's own
  shape takes its box (its logical axes); the others (factored row and column statistics, counts)
  are small and stay unboxed, replicated."""

  def init(params):
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_box)
    states = []
    for path, leaf in leaves:
      value = leaf.unbox() if _is_box(leaf) else leaf
      state = _over_layers(inner.init, stacked_dims(path))(value)
      if _is_box(leaf):
        state = jax.tree.map(lambda s, box=leaf, v=value: box.replace_boxed(s)
                             if s.shape == v.shape else s, state)
      states.append(state)
    return jax.tree_util.tree_unflatten(treedef, states)

  def update(updates, state, params=None):
    if params is None:
      raise ValueError(optax.NO_PARAMS_MSG)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(updates)
    states = treedef.flatten_up_to(state)
    params = treedef.flatten_up_to(params)

    out = [_over_layers(inner.update, stacked_dims(path))(u, s, p)
           for (path, u), s, p in zip(leaves, states, params)]
    return (jax.tree_util.tree_unflatten(treedef, [u for u, _ in out]),
            jax.tree_util.tree_unflatten(treedef, [s for _, s in out]))

  return optax.GradientTransformation(init, update)


def _adafactor_direction(train) -> optax.GradientTransformation:
  """Adafactor's direction (module docstring, part 2) before its momentum, per layer."""
  parts = [optax.scale_by_factored_rms(
      factored=train.adafactor_factored, decay_rate=train.adafactor_decay_rate,
      min_dim_size_to_factor=train.adafactor_min_dim_size_to_factor,
      epsilon=train.adafactor_epsilon)]
  if train.adafactor_clipping_threshold > 0:
    parts.append(optax.clip_by_block_rms(train.adafactor_clipping_threshold))
  if train.adafactor_multiply_by_parameter_scale:
    parts.append(optax.scale_by_param_block_rms(MIN_PARAMETER_SCALE))
  return per_layer(optax.chain(*parts))


def make_optimizer(train, d_model: int) -> tuple[optax.GradientTransformation, Schedule]:
  """Builds the optimizer from a `train` config section; returns (optimizer, schedule).

  The schedule maps the optimizer's update count (0 on the first update) to the learning rate it uses.
  """
  schedule = make_schedule(train, d_model)
  clip = optax.clip_by_global_norm(train.grad_clip_norm) if train.grad_clip_norm > 0 else None
  # The parts that keep a state, by name (opt_state = {name: its state, ..., learning_rate:
  # (count,)}); clipping and weight decay keep none, so a resume may turn either on or off
  # (optax.chain would renumber every array).
  if train.optimizer == "adafactor":
    stateful = {"adafactor": _adafactor_direction(train)}
    if train.adafactor_momentum > 0:
      stateful["momentum"] = optax.ema(train.adafactor_momentum, debias=False)
  else:
    stateful = {"adam": optax.scale_by_adam(b1=train.adam_b1, b2=train.adam_b2, eps=train.adam_eps)}
  weight_decay = decay_rate(train)
  decay = (optax.add_decayed_weights(weight_decay, mask=decay_mask) if weight_decay > 0 else None)
  rate = optax.scale_by_learning_rate(schedule)

  def init(params):
    return {**{name: part.init(params) for name, part in stateful.items()},
            "learning_rate": rate.init(params)}

  def update(grads, state, params=None):
    if clip is not None:
      grads, _ = clip.update(grads, clip.init(params))
    updates, new_state = grads, {}
    for name, part in stateful.items():
      updates, new_state[name] = part.update(updates, state[name], params)
    if decay is not None:
      updates, _ = decay.update(updates, decay.init(params), params)
    updates, new_state["learning_rate"] = rate.update(updates, state["learning_rate"], params)
    return updates, new_state

  return optax.GradientTransformation(init, update), schedule
