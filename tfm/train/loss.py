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

import functools

import jax
import jax.numpy as jnp

from tfm.model.platform import target_platform

# The longest row XLA:CPU reduces at full speed when the reduction has an elementwise prologue
# (exp(l - m), a masked max): over rows of 37000 such reductions ran several times slower than
# over rows of 18500 or less (see experiments/SPEED.md).
CPU_ROW = 16384


def target_weights(targets: jax.Array, segmentation: jax.Array | None = None) -> jax.Array:
  """1.0 on real target tokens, 0.0 on padding. targets, segmentation [b, t] -> float32 [b, t]."""
  real = targets != 0
  if segmentation is not None:
    real = real & (segmentation != 0)
  return real.astype(jnp.float32)


def row_chunks(vocab: int, platform: str | None = None) -> int:
  """Into how many equal parts the loss cuts a vocabulary row for its reductions: on CPUs the fewest
  (at most 64) whose width is at most CPU_ROW; 1 elsewhere (a TPU would relayout the split
  logits), for rows that short already, and where no such part divides the row."""
  if (platform or target_platform()) != "cpu" or vocab <= CPU_ROW:
    return 1
  return next((c for c in range(2, 65) if vocab % c == 0 and vocab // c <= CPU_ROW), 1)


def _vocab_statistics(logits: jax.Array, targets: jax.Array):
  """Reductions over the vocabulary: (log-sum-exp, sum_v l_v, l_y, correct), each [b, t].

  Each row of V logits is reduced as `row_chunks(V)` parts of V / c (c = 1: the row whole, the same
  arithmetic as a plain reduction): chunk maxima m_c and m = max_c m_c, and
  sum_v exp(l_v - m) = sum_c exp(m_c - m) sum_{v in c} exp(l_v - m_c), the same sum to float rounding.
  correct is 1.0 where argmax_v l_v == y with argmax's tie rule (the lowest index of the maximum):
  l_y == m and every v < y has l_v < l_y, a max over the masked logits. argmax's (value, index)
  reduction, or a min over the indices of the maximum, cost more on CPUs (an int32 [b, t, V]
  materialised and reduced; see experiments/SPEED.md).
  """
  vocab = logits.shape[-1]
  c = row_chunks(vocab)
  chunks = logits.reshape(*logits.shape[:-1], c, vocab // c)
  chunk_max = jnp.max(chunks, axis=-1)
  m = jnp.max(chunk_max, axis=-1)
  chunk_sums = jnp.sum(jnp.exp(chunks - chunk_max[..., None]), axis=-1)
  lse = m + jnp.log(jnp.sum(jnp.exp(chunk_max - m[..., None]) * chunk_sums, axis=-1))
  total = jnp.sum(jnp.sum(chunks, axis=-1), axis=-1)
  target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  index = (jax.lax.broadcasted_iota(jnp.int32, chunks.shape, chunks.ndim - 1)
           + jax.lax.broadcasted_iota(jnp.int32, chunks.shape, chunks.ndim - 2) * (vocab // c))
  masked = jnp.where(index < targets[..., None, None], chunks, -jnp.inf)
  earlier = jnp.max(jnp.max(masked, axis=-1), axis=-1)
  correct = ((target_logit == m) & (earlier < target_logit)).astype(jnp.float32)
  return lse, total, target_logit, correct


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _token_losses(logits, targets, label_smoothing):
  return _token_losses_fwd(logits, targets, label_smoothing)[0]


def _token_losses_fwd(logits, targets, label_smoothing):
  vocab = logits.shape[-1]
  lse, total, target_logit, correct = _vocab_statistics(logits, targets)
  nll = lse - target_logit
  confidence, low = 1.0 - label_smoothing, label_smoothing / (vocab - 1)
  # sum_v log p(v) = sum_v l_v - V lse
  smoothed = (confidence - low) * nll - low * (total - vocab * lse)
  return (smoothed, nll, correct), (logits, targets, lse)


def _token_losses_bwd(label_smoothing, residuals, cotangents):
  """d/dl_v for cotangents (g_s, g_n) of (smoothed, nll), with p = softmax(l), y the target:
  g_s ((1 - eps - low)(p_v - [v = y]) - low (1 - V p_v)) + g_n (p_v - [v = y]), one fused pass."""
  logits, targets, lse = residuals
  g_s, g_n, _ = cotangents
  vocab = logits.shape[-1]
  confidence, low = 1.0 - label_smoothing, label_smoothing / (vocab - 1)
  on_p = g_s * (confidence - low + vocab * low) + g_n  # coefficient of p_v
  on_target = g_s * (confidence - low) + g_n  # coefficient of [v = y]
  p = jnp.exp(logits - lse[..., None])
  index = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
  d = (p * on_p[..., None] - jnp.where(index == targets[..., None], on_target[..., None], 0.0)
       - (g_s * low)[..., None])
  return d.astype(logits.dtype), None


_token_losses.defvjp(_token_losses_fwd, _token_losses_bwd)


# The same with label smoothing an array (a stack's member's, traced: tfm/train/stack.py): a primal
# input whose cotangent is zero. Python floats keep the form above, whose constants are computed in
# double precision once: the published runs' numbers.
@jax.custom_vjp
def _token_losses_traced(logits, targets, label_smoothing):
  return _token_losses_fwd(logits, targets, label_smoothing)[0]


def _traced_fwd(logits, targets, label_smoothing):
  out, residuals = _token_losses_fwd(logits, targets, label_smoothing)
  return out, (residuals, label_smoothing)


def _traced_bwd(saved, cotangents):
  residuals, label_smoothing = saved
  d_logits, _ = _token_losses_bwd(label_smoothing, residuals, cotangents)
  return d_logits, None, jnp.zeros_like(label_smoothing)


_token_losses_traced.defvjp(_traced_fwd, _traced_bwd)


def token_losses(logits: jax.Array, targets: jax.Array, label_smoothing: float
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Per-token (smoothed [b, t], nll [b, t], correct [b, t]) from logits [b, t, V], targets [b, t].

  smoothed = H(q, p) with q as in the module docstring, nll = -log p(y) = lse - l_y, correct = 1.0
  where argmax_v l_v == y. Computed from one pass of reductions over the vocabulary (log p is never
  materialised: sum_v log p(v) = sum_v l_v - V lse), and differentiated by hand: the gradient
  g_s dH/dl + g_n dnll/dl = p (g_s (1 - eps + (V - 1) low) + g_n) - [v = y] (g_s (1 - eps - low)
  + g_n) - g_s low is one elementwise pass (no scatter of the target's gradient, no second softmax).
  """
  logits = logits.astype(jnp.float32)
  if isinstance(label_smoothing, jax.Array):  # a stack member's: traced
    return _token_losses_traced(logits, targets.astype(jnp.int32),
                                label_smoothing.astype(jnp.float32))
  return _token_losses(logits, targets.astype(jnp.int32), float(label_smoothing))


def loss_sums(logits: jax.Array, targets: jax.Array, weights: jax.Array, label_smoothing: float
              ) -> dict[str, jax.Array]:
  """Sums over the real tokens of a batch: {'loss', 'nll', 'correct', 'tokens'} (float32 scalars).

  logits [b, t, V]; targets [b, t]; weights [b, t] from `target_weights`.
  'loss' is the label-smoothed cross-entropy, 'nll' the unsmoothed one, 'correct' counts tokens whose
  argmax prediction is the target.
  """
  smoothed, nll, correct = token_losses(logits, targets, label_smoothing)
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
