"""Dropout whose rate may be an array: one module for every dropout of the model.

`Dropout(rate, kind)` masks as flax's nn.Dropout does, with the same random bits (the same module
name, the same `make_rng("dropout")`, keep = 1 - rate, x / keep where kept): a run computes what it
computed with nn.Dropout, to the bit. `kind` names the config key the rate comes from
(model.dropout_rate, attention_dropout_rate or ffn_dropout_rate).

A stack of runs that differ in their dropout rates (tfm/train/stack.py) traces the model once for
all of them, vmapped over the members: inside `member_keep(keeps)` each Dropout of a kind that
`keeps` holds takes its keep probability from there, a member's traced value, instead of its own
rate (the kinds the members share keep their rate). The model's
structure (which dropouts exist, which attention kernel runs) is then the stack's: built from the
largest rate of each kind, so that a member whose rate is 0 keeps every value (keep = 1: the mask
is all ones and x / 1 = x exactly).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

RESIDUAL, ATTENTION, FFN = "dropout_rate", "attention_dropout_rate", "ffn_dropout_rate"
KINDS = (RESIDUAL, ATTENTION, FFN)

_KEEP: contextvars.ContextVar[Mapping[str, jax.Array] | None] = contextvars.ContextVar(
    "tfm_member_keep", default=None)


@contextlib.contextmanager
def member_keep(keeps: Mapping[str, jax.Array]):
  """While tracing a stack's member: {kind: keep probability} for the Dropouts of each kind."""
  token = _KEEP.set(dict(keeps))
  try:
    yield
  finally:
    _KEEP.reset(token)


class Dropout(nn.Module):
  """x -> x masked with probability `rate` (of config key `kind`), kept values / (1 - rate)."""

  rate: float
  kind: str = RESIDUAL

  @nn.compact
  def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
    member = (_KEEP.get() or {}).get(self.kind)  # a stack member's, where the members differ
    if deterministic or (member is None and self.rate == 0.0):
      return x
    keep = 1.0 - self.rate if member is None else member
    mask = jax.random.bernoulli(self.make_rng("dropout"), p=keep, shape=x.shape)
    # A member's keep is a float32 array: divided in x's dtype, as the solo run's Python float is
    # (bfloat16 activations stay bfloat16; the same quotients, 1 - rate rounded once either way).
    scale = keep if member is None else keep.astype(x.dtype)
    return jax.lax.select(mask, x / scale, jnp.zeros_like(x))
