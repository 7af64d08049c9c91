"""Gradient accumulation over microbatches, inside one compiled step.

A batch of B rows is cut into k microbatches of B / k rows; a `lax.scan` computes the gradient of each
and sums them, so memory holds one microbatch's activations while an update still sees the whole batch
(how a small machine reaches the paper's ~25000 + 25000 tokens per update). The gradient function is
expected to return gradients of loss_sum / N, with N the real target tokens of the *whole* batch: the
sum over microbatches is then exactly the gradient of the whole batch's per-token loss.

Microbatch i takes rows i, i + k, i + 2k, ...: each device's contiguous block of rows contributes
equally to every microbatch, so the split moves no data between devices.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

from tfm.model.partitioning import constrain

GradFn = Callable[[Any, Mapping[str, jax.Array], jax.Array], tuple[Any, dict[str, jax.Array]]]


def split_microbatches(batch: Mapping[str, jax.Array], k: int) -> dict[str, jax.Array]:
  """Every [B, ...] array -> [k, B / k, ...]; slice i holds rows i, i + k, i + 2k, ..."""

  def split(x):
    if x.shape[0] % k:
      raise ValueError(f"config key train.microbatches: {k} does not divide the batch of "
                       f"{x.shape[0]} rows")
    x = x.reshape(x.shape[0] // k, k, *x.shape[1:]).swapaxes(0, 1)
    return constrain(x, (None, "act_batch") + (None,) * (x.ndim - 2))

  return {name: split(x) for name, x in batch.items()}


def _add(a, b):
  return jax.tree_util.tree_map(jnp.add, a, b)


def accumulate_gradients(grad_fn: GradFn, params: Any, batch: Mapping[str, jax.Array], k: int,
                         key: jax.Array, grad_shardings: Any = None) -> tuple[Any, dict[str, jax.Array]]:
  """Sum of grad_fn over k microbatches of `batch`; returns (grads, sums).

  grad_fn(params, microbatch, key) -> (grads, sums) where sums is a dict of scalars. Microbatch i gets
  the dropout key fold_in(key, i). grad_shardings (optional, a tree like params) pins the accumulator
  and the result to the parameters' sharding (sharded gradients under FSDP).
  """

  def pin(grads):
    if grad_shardings is None:
      return grads
    return jax.lax.with_sharding_constraint(grads, grad_shardings)

  if k == 1:
    grads, sums = grad_fn(params, batch, jax.random.fold_in(key, 0))
    return pin(grads), sums
  micro = split_microbatches(batch, k)
  first = jax.tree_util.tree_map(lambda x: x[0], micro)
  shapes = jax.eval_shape(grad_fn, params, first, key)
  zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  zeros = (pin(zeros[0]), zeros[1])

  def body(carry, xs):
    index, microbatch = xs
    grads, sums = grad_fn(params, microbatch, jax.random.fold_in(key, index))
    return _add(carry, (pin(grads), sums)), None

  (grads, sums), _ = jax.lax.scan(body, zeros, (jnp.arange(k), micro))
  return pin(grads), sums
