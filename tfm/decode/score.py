"""Scoring given translations: log P(Y | X) of a target under the model, teacher-forced.

One forward pass of the whole model over (source, target) pairs, the pass training takes without
dropout: log P(Y | X) = sum_t log_softmax(logits[t])[y_t] over the target's tokens, its EOS
included and its padding not, the log P beam search accumulates token by token (tfm/decode/beam.py
divides it by the length penalty lp(|Y|) for its scores; `tfm translate --score` prints both).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from tfm.model.transformer import Transformer


def make_score_fn(model: Transformer, pad_id: int = 0) -> Callable:
  """Returns jitted score(params, inputs [b, s], targets [b, t]) -> (log P float32[b], lengths
  int32[b]).

  inputs and targets are token ids padded with pad_id; a target holds its tokens then EOS (as
  `tokenizer.encode` gives them and beam search returns them). lengths: |Y|, the target's tokens
  other than padding (EOS included). All-padding rows score 0.
  """

  @jax.jit
  def score(params, inputs, targets):
    logits = model.apply({"params": params}, inputs, targets)  # [b, t, vocab] float32
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logp, targets[:, :, None], axis=-1)[:, :, 0]
    real = targets != pad_id
    return jnp.sum(jnp.where(real, picked, 0.0), axis=-1), jnp.sum(real, axis=-1).astype(jnp.int32)

  return score
