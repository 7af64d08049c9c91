"""Greedy decoding and ancestral sampling (temperature, top-k, top-p) over a cached step function.

Same interface as `tfm.decode.beam`: tokens_to_logits(ids int32[batch, 1], cache) ->
(logits [batch, vocab], cache), cache leaves [batch, ...]; start token 0, EOS 1. Each row decodes
until it emits EOS or reaches its limit max_lengths[row] (tokens counted with the EOS); after that
it emits 0. The padding token (`pad_id`, 0) is never generated, so 0 only means padding (None
allows it). The loop is a `jax.lax.while_loop` that stops when every row is finished, so the
decoders jit-compile (one loop per cache length with `cache_lengths` / `grow_cache`, see
`tfm.decode.common`). For several samples per example, tile the cache with `tile_beams` first.

Sampling draws step t's token with the key `jax.random.fold_in(rng, t)`: the same key gives the
same output. `rng` may also hold one key per row (`[batch]` typed keys or uint32[batch, 2]): row r
then draws with fold_in(rng[r], t), so its tokens do not depend on the other rows of its batch
(`tfm.decode.generate` streams one prompt and batches several with the same samples). The logits
are processed in this order: drop pad_id, divide by the temperature, keep the top_k largest, keep
the nucleus (top_p), renormalise. The returned log-probability is
that of the *model* (the unprocessed log-softmax), summed over the generated tokens, EOS included.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from tfm.decode.common import (PyTree, TokensToLogits, check_cache_lengths, infer_batch_size,
                               resolve_max_lengths, while_phases)

NEG_INF = float("-inf")


def top_k_filter(logits: jax.Array, k: int) -> jax.Array:
  """Sets every logit below the k-th largest of its row to -inf ([..., vocab]; k static, 0 = off).

  Ties with the k-th value are all kept.
  """
  if k <= 0 or k >= logits.shape[-1]:
    return logits
  kth = jax.lax.top_k(logits, k)[0][..., -1:]
  return jnp.where(logits < kth, NEG_INF, logits)


def top_p_filter(logits: jax.Array, p: float | jax.Array) -> jax.Array:
  """Nucleus filter (Holtzman et al. 2020): keeps the smallest set of most likely tokens whose
  probability mass is >= p, sets the rest to -inf ([..., vocab]; a Python p >= 1 = off; p may
  be a traced scalar, then the filter always runs).

  A token is kept when the mass of the tokens strictly more likely than it (in sorted order) is
  < p, so the most likely token is always kept. Ties with the last kept value are all kept.
  """
  if isinstance(p, (int, float)) and p >= 1.0:
    return logits
  sorted_logits = -jnp.sort(-logits, axis=-1)  # descending
  probs = jax.nn.softmax(sorted_logits, axis=-1)
  mass_before = jnp.cumsum(probs, axis=-1) - probs
  keep = (mass_before < p) | (p >= 1.0)  # p = 1 keeps all, even past float32 rounding of the sum
  n_keep = jnp.maximum(jnp.sum(keep, axis=-1, keepdims=True), 1)
  threshold = jnp.take_along_axis(sorted_logits, n_keep - 1, axis=-1)
  return jnp.where(logits < threshold, NEG_INF, logits)


def process_logits(logits: jax.Array, *, temperature: float | jax.Array = 1.0, top_k: int = 0,
                   top_p: float | jax.Array = 1.0) -> jax.Array:
  """Temperature, then top-k, then top-p, on float32 logits [..., vocab] (temperature > 0)."""
  logits = logits.astype(jnp.float32) / temperature
  return top_p_filter(top_k_filter(logits, top_k), top_p)


def drop_pad(logits: jax.Array, pad_id: int | None) -> jax.Array:
  """float32 logits [batch, vocab] with pad_id's set to -inf (never generated; None = allowed)."""
  logits = logits.astype(jnp.float32)
  return logits if pad_id is None else logits.at[:, pad_id].set(NEG_INF)


def _per_row(rng: jax.Array) -> bool:
  """Whether rng holds one key per row: typed keys [batch] or raw uint32 keys [batch, 2]."""
  typed = jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key)
  return jnp.ndim(rng) == (1 if typed else 2)


def choose_tokens(logits: jax.Array, step: jax.Array, rng: jax.Array | None, *,
                  temperature: float | jax.Array = 1.0, top_k: int = 0,
                  top_p: float | jax.Array = 1.0) -> jax.Array:
  """Step `step`'s tokens int32[batch] from float32 logits [batch, vocab] (pad dropped already,
  `drop_pad`): the argmax for the Python temperature 0, else a draw from
  softmax(process_logits(logits)) with the key fold_in(rng, step), or fold_in(rng[r], step) for
  row r when rng holds a key per row. The one token choice of `sample` and of any loop that
  drives the model step by step itself (`tfm.decode.generate`'s streaming)."""
  if isinstance(temperature, (int, float)) and temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  processed = process_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
  if _per_row(rng):
    draw = lambda key, row: jax.random.categorical(jax.random.fold_in(key, step), row)
    return jax.vmap(draw)(rng, processed).astype(jnp.int32)
  return jax.random.categorical(jax.random.fold_in(rng, step), processed, axis=-1).astype(jnp.int32)


class DecodeResult(NamedTuple):
  """sequences int32[batch, max_decode_len] (tokens, EOS, then 0); log_probs float32[batch]
  (model log P of the generated tokens); lengths int32[batch]; num_steps int32[]."""

  sequences: jax.Array
  log_probs: jax.Array
  lengths: jax.Array
  num_steps: jax.Array


def _decode(tokens_to_logits: TokensToLogits, cache: PyTree,
            choose: Callable[[jax.Array, jax.Array], jax.Array], *, max_decode_len: int,
            max_lengths, eos_id: int, start_id, batch_size, pad_id,
            cache_lengths: Sequence[int], grow_cache: Callable | None) -> DecodeResult:
  """The loop shared by greedy and sampling; choose(logits f32[batch, vocab], step) -> [batch]."""
  ends = check_cache_lengths(cache_lengths, grow_cache, max_decode_len)
  batch = infer_batch_size(cache, max_lengths, batch_size)
  limits = resolve_max_lengths(max_lengths, batch, max_decode_len)

  def cond(s, end):
    step, _, _, _, _, done, _ = s
    return (step < end) & ~jnp.all(done)

  def body(s):
    step, last, seqs, logp, lengths, done, c = s
    logits, c = tokens_to_logits(last[:, None], c)
    logits = logits.astype(jnp.float32)
    allowed = drop_pad(logits, pad_id)
    tokens = jnp.where(done, 0, choose(allowed, step).astype(jnp.int32))
    token_logp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), tokens[:, None], axis=-1)
    logp = logp + jnp.where(done, 0.0, token_logp[:, 0])
    lengths = lengths + (~done).astype(jnp.int32)
    seqs = seqs.at[:, step].set(tokens)
    done = done | (tokens == eos_id) | (step + 1 >= limits)
    return step + 1, tokens, seqs, logp, lengths, done, c

  init = (jnp.array(0, jnp.int32), jnp.broadcast_to(jnp.asarray(start_id, jnp.int32), (batch,)),
          jnp.zeros((batch, max_decode_len), jnp.int32), jnp.zeros((batch,), jnp.float32),
          jnp.zeros((batch,), jnp.int32), jnp.zeros((batch,), bool), cache)
  step, _, seqs, logp, lengths, _, _ = while_phases(
      cond, body, init, ends, lambda s, length: s[:-1] + (grow_cache(s[-1], length),))
  return DecodeResult(sequences=seqs, log_probs=logp, lengths=lengths, num_steps=step)


def greedy(tokens_to_logits: TokensToLogits, cache: PyTree, *, max_decode_len: int,
           max_lengths: jax.Array | None = None, eos_id: int = 1, start_id: int | jax.Array = 0,
           batch_size: int | None = None, pad_id: int | None = 0, cache_lengths: Sequence[int] = (),
           grow_cache: Callable[[PyTree, int], PyTree] | None = None) -> DecodeResult:
  """Greedy decoding: the argmax token (other than pad_id) at every step, lowest id on ties.

  cache leaves [batch, ...]; max_lengths int32[batch] limits |Y| (EOS included), None =
  max_decode_len (static). start_id: the first step's input, one id or int32[batch] (a
  prompt's last token when the cache holds the rest of it, `tfm.decode.generate`).
  cache_lengths / grow_cache: a cache that grows with the output (see `tfm.decode.common`); () =
  one loop over the cache as given. Returns a `DecodeResult` with sequences
  int32[batch, max_decode_len].
  """
  return _decode(tokens_to_logits, cache, lambda logits, step: jnp.argmax(logits, axis=-1),
                 max_decode_len=max_decode_len, max_lengths=max_lengths, eos_id=eos_id,
                 start_id=start_id, batch_size=batch_size, pad_id=pad_id,
                 cache_lengths=cache_lengths, grow_cache=grow_cache)


def sample(tokens_to_logits: TokensToLogits, cache: PyTree, rng: jax.Array, *,
           max_decode_len: int, max_lengths: jax.Array | None = None,
           temperature: float | jax.Array = 1.0, top_k: int = 0, top_p: float | jax.Array = 1.0,
           eos_id: int = 1, start_id: int | jax.Array = 0, batch_size: int | None = None,
           pad_id: int | None = 0, cache_lengths: Sequence[int] = (),
           grow_cache: Callable[[PyTree, int], PyTree] | None = None) -> DecodeResult:
  """Ancestral sampling from the processed distribution (see `process_logits`).

  temperature: > 0, or the Python number 0 for greedy decoding (argmax; the top-k / top-p filters
  cannot change it); may be a traced scalar (> 0) to avoid recompiling per temperature.
  top_k: static int, 0 = off. top_p in (0, 1], 1 = off; may be traced. rng: a PRNG key; step t
  uses fold_in(rng, t); or one key per row (see the module docstring). Other arguments and the
  result as in `greedy`.
  """
  static_t = isinstance(temperature, (int, float))
  if static_t and temperature < 0:
    raise ValueError(f"temperature must be >= 0, got {temperature}")
  if isinstance(top_p, (int, float)) and not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_p must be in (0, 1], got {top_p}")

  def choose(logits, step):
    return choose_tokens(logits, step, rng, temperature=temperature, top_k=top_k, top_p=top_p)

  return _decode(tokens_to_logits, cache, choose, max_decode_len=max_decode_len,
                 max_lengths=max_lengths, eos_id=eos_id, start_id=start_id,
                 batch_size=batch_size, pad_id=pad_id, cache_lengths=cache_lengths,
                 grow_cache=grow_cache)
