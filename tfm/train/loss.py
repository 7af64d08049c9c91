"""Label-smoothed cross-entropy (section 5.4) and the unsmoothed NLL, as sums over real target tokens.

For a target token y over a vocabulary of V entries, label smoothing with eps replaces the one-hot
target by the distribution (the tensor2tensor convention)

    q(v) = 1 - eps          for v = y
    q(v) = eps / (V - 1)    for every other v (the padding id included)

and the training loss of the token is the cross-entropy  H(q, p) = -sum_v q(v) log p(v),  with p the
model's softmax. We report exactly that, without subtracting the constant entropy H(q): its minimum is
H(q) > 0, not 0, when eps > 0. Next to it we report the plain negative log-likelihood -log p(y) (no
smoothing), whose exponential is the per-token perplexity.

Padding is excluded: a position counts only where the target id is not 0 (and, if segmentation is
given, its segment id is not 0). Functions return sums; the caller divides by the number of real
target tokens of the whole global batch, so that k microbatches give exactly the loss and gradient of
one batch k times larger.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def target_weights(targets: jax.Array, segmentation: jax.Array | None = None) -> jax.Array:
  """1.0 on real target tokens, 0.0 on padding. targets, segmentation [b, t] -> float32 [b, t]."""
  real = targets != 0
  if segmentation is not None:
    real = real & (segmentation != 0)
  return real.astype(jnp.float32)


def smoothed_cross_entropy(logits: jax.Array, targets: jax.Array, label_smoothing: float
                           ) -> tuple[jax.Array, jax.Array]:
  """Per-token losses. logits [b, t, V] (float32), targets [b, t] int.

  Returns (smoothed [b, t], nll [b, t]): H(q, p) with q as in the module docstring, and -log p(y).
  """
  vocab = logits.shape[-1]
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  nll = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
  if label_smoothing == 0.0:
    return nll, nll
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  # -sum_v q(v) log p(v) = -(confidence - low) log p(y) - low * sum_v log p(v)
  smoothed = (confidence - low) * nll - low * jnp.sum(log_probs, axis=-1)
  return smoothed, nll


def loss_sums(logits: jax.Array, targets: jax.Array, weights: jax.Array, label_smoothing: float
              ) -> dict[str, jax.Array]:
  """Sums over the real tokens of a batch: {'loss', 'nll', 'correct', 'tokens'} (float32 scalars).

  logits [b, t, V]; targets [b, t]; weights [b, t] from `target_weights`.
  'loss' is the label-smoothed cross-entropy, 'nll' the unsmoothed one, 'correct' counts tokens whose
  argmax prediction is the target.
  """
  smoothed, nll = smoothed_cross_entropy(logits, targets, label_smoothing)
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  return {
      "loss": jnp.sum(smoothed * weights),
      "nll": jnp.sum(nll * weights),
      "correct": jnp.sum(correct * weights),
      "tokens": jnp.sum(weights),
  }


def per_token(sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """Sums from `loss_sums` (possibly accumulated over batches) -> per-token loss, nll, perplexity,
  accuracy. A batch without real tokens gives 0 rather than NaN."""
  tokens = jnp.maximum(sums["tokens"], 1.0)
  nll = sums["nll"] / tokens
  return {"loss": sums["loss"] / tokens, "nll": nll, "perplexity": jnp.exp(nll),
          "accuracy": sums["correct"] / tokens, "tokens": sums["tokens"]}
