"""Tiny deterministic "models" for the decoder tests, each with a JAX step function over a cache
and an independent numpy version of its next-token distribution, plus jitted runners.

MarkovToy: logits = table[row, step, previous token]; the cache counts the steps.
PrefixToy: logits = table[row, h] + eos_bias[row, step] on EOS, where h is a running hash of the
  whole prefix kept in the cache, so a decoder that reorders the cache wrongly gets other logits.
The tables travel in the cache (leaves [batch, ...]) and the step functions are static, so one
compilation serves every seed of a given shape (XLA compiles take ~1.5 s each on CPU).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from tfm.decode import beam, sampling

START, PAD, EOS = 0, 0, 1
HASH_MOD = 1021


def np_log_softmax(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, np.float64)
  m = x.max()
  return x - m - np.log(np.exp(x - m).sum())


def _eos_bias(eos_bias, steps: int) -> np.ndarray:
  """bias float32[steps]: eos_bias per step, its last value held beyond its end (None = 0)."""
  given = np.atleast_1d(np.asarray(0.0 if eos_bias is None else eos_bias, np.float32))
  return given[np.minimum(np.arange(steps), len(given) - 1)]


class MarkovToy:
  """table float32[batch, steps, vocab (previous token), vocab]; later steps reuse the last."""

  def __init__(self, seed: int, batch: int, vocab: int, steps: int = 40, scale: float = 2.0,
               eos_bias=None):
    rng = np.random.default_rng(seed)
    self.table = (scale * rng.standard_normal((batch, steps, vocab, vocab))).astype(np.float32)
    self.table[:, :, :, EOS] += _eos_bias(eos_bias, steps)[None, :, None]
    self.batch, self.steps, self.vocab = batch, steps, vocab

  @classmethod
  def from_rule(cls, rule, batch: int, vocab: int, steps: int = 40, floor: float = -30.0):
    """A hand-made model: rule(step, prev) -> {token: probability}; other tokens get logit floor."""
    model = cls(0, batch, vocab, steps)
    for step in range(steps):
      for prev in range(vocab):
        logits = np.full(vocab, floor, np.float32)
        for tok, prob in rule(step, prev).items():
          logits[tok] = np.log(prob)
        model.table[:, step, prev] = logits
    return model

  def init_cache(self):
    return {"table": jnp.asarray(self.table), "step": jnp.zeros((self.batch,), jnp.int32)}

  @staticmethod
  def tokens_to_logits(ids, cache):
    table, step = cache["table"], cache["step"]
    rows = jnp.arange(ids.shape[0])
    logits = table[rows, jnp.minimum(step, table.shape[1] - 1), ids[:, 0]]
    return logits, {"table": table, "step": step + 1}

  def np_logits(self, row: int, prefix: tuple[int, ...]) -> np.ndarray:
    prev = prefix[-1] if prefix else START
    return self.table[row, min(len(prefix), self.steps - 1), prev]


class PrefixToy:
  """table float32[batch, HASH_MOD, vocab]; h_0 = 0, h' = (h * 37 + 11 * token + 3) mod HASH_MOD."""

  def __init__(self, seed: int, batch: int, vocab: int, steps: int = 40, scale: float = 2.0,
               eos_bias=None):
    rng = np.random.default_rng(seed)
    self.table = (scale * rng.standard_normal((batch, HASH_MOD, vocab))).astype(np.float32)
    self.eos_bias = np.tile(_eos_bias(eos_bias, steps), (batch, 1))
    self.batch, self.steps, self.vocab = batch, steps, vocab

  @classmethod
  def constant(cls, logits: np.ndarray, batch: int, steps: int = 40):
    """A model with the same next-token logits [vocab] after every prefix."""
    model = cls(0, batch, len(logits), steps)
    model.table[:] = np.asarray(logits, np.float32)
    return model

  def init_cache(self):
    zeros = jnp.zeros((self.batch,), jnp.int32)
    return {"table": jnp.asarray(self.table), "eos_bias": jnp.asarray(self.eos_bias), "h": zeros,
            "step": zeros}

  @staticmethod
  def tokens_to_logits(ids, cache):
    h = (cache["h"] * 37 + 11 * ids[:, 0] + 3) % HASH_MOD
    rows = jnp.arange(ids.shape[0])
    bias = cache["eos_bias"][rows, jnp.minimum(cache["step"], cache["eos_bias"].shape[1] - 1)]
    logits = cache["table"][rows, h].at[:, EOS].add(bias)
    return logits, dict(cache, h=h, step=cache["step"] + 1)

  def np_logits(self, row: int, prefix: tuple[int, ...]) -> np.ndarray:
    h = 0
    for tok in (START,) + tuple(prefix):
      h = (h * 37 + 11 * tok + 3) % HASH_MOD
    logits = self.table[row, h].copy()
    logits[EOS] += self.eos_bias[row, min(len(prefix), self.steps - 1)]
    return logits


# ---- independent numpy reference pieces ----

def np_sequence_logp(model, row: int, seq) -> float:
  """log P(seq) under the numpy version of `model` (seq = generated tokens, EOS included)."""
  total, prefix = 0.0, ()
  for tok in seq:
    total += np_log_softmax(model.np_logits(row, prefix))[tok]
    prefix += (int(tok),)
  return total


def np_lp(length: int, alpha: float) -> float:
  """GNMT length penalty, written out independently of tfm.decode."""
  return ((5.0 + length) / 6.0) ** alpha


def exhaustive_search(model, row: int, max_len: int, alpha: float, pad_id: int | None = PAD):
  """The hypotheses the paper's search would return with unlimited beams, best first, as
  (score, tokens) with score = log P / lp(|Y|): every hypothesis without pad_id that ends in EOS
  within max_len tokens (of non-zero probability); only if there is none, every truncated one of
  max_len tokens."""
  ended, truncated = [], []

  def grow(prefix, logp):
    next_logp = np_log_softmax(model.np_logits(row, prefix))
    for tok in range(model.vocab):
      if tok == pad_id or next_logp[tok] == -np.inf:
        continue
      seq, s = prefix + (tok,), logp + next_logp[tok]
      if tok == EOS:
        ended.append((s / np_lp(len(seq), alpha), seq))
      elif len(seq) == max_len:
        truncated.append((s / np_lp(len(seq), alpha), seq))
      else:
        grow(seq, s)

  grow((), 0.0)
  return sorted(ended or truncated, key=lambda x: -x[0])


def trim(seq_row: np.ndarray, length: int) -> tuple[int, ...]:
  return tuple(int(x) for x in seq_row[:length])


# ---- jitted runners, compiled once per (step function, static arguments, shapes) ----

def _limits(model, max_lengths, max_decode_len):
  if max_lengths is None:
    max_lengths = np.full(model.batch, max_decode_len)
  return jnp.asarray(max_lengths, jnp.int32)


@functools.lru_cache(maxsize=None)
def _beam_fn(step_fn, beam_size, max_decode_len, early_stopping, pad_id):
  return jax.jit(lambda cache, alpha, limits: beam.beam_search_result(
      step_fn, cache, beam_size=beam_size, alpha=alpha, max_decode_len=max_decode_len,
      max_lengths=limits, early_stopping=early_stopping, pad_id=pad_id))


def run_beam(model, *, beam_size, alpha, max_decode_len, max_lengths=None, early_stopping=True,
             pad_id=PAD):
  fn = _beam_fn(model.tokens_to_logits, beam_size, max_decode_len, early_stopping, pad_id)
  out = fn(model.init_cache(), jnp.float32(alpha), _limits(model, max_lengths, max_decode_len))
  return jax.tree.map(np.asarray, out)


@functools.lru_cache(maxsize=None)
def _sample_fn(step_fn, max_decode_len, mode, top_k):
  if mode == "greedy":
    return jax.jit(lambda cache, rng, limits: sampling.greedy(
        step_fn, cache, max_decode_len=max_decode_len, max_lengths=limits))
  if mode == "zero_temperature":
    return jax.jit(lambda cache, rng, limits: sampling.sample(
        step_fn, cache, rng, max_decode_len=max_decode_len, max_lengths=limits, temperature=0.0,
        top_k=top_k))
  return jax.jit(lambda cache, rng, limits, temperature, top_p: sampling.sample(
      step_fn, cache, rng, max_decode_len=max_decode_len, max_lengths=limits,
      temperature=temperature, top_k=top_k, top_p=top_p))


def run_greedy(model, *, max_decode_len, max_lengths=None):
  fn = _sample_fn(model.tokens_to_logits, max_decode_len, "greedy", 0)
  out = fn(model.init_cache(), jax.random.key(0), _limits(model, max_lengths, max_decode_len))
  return jax.tree.map(np.asarray, out)


def run_sample(model, rng, *, max_decode_len, max_lengths=None, temperature=1.0, top_k=0,
               top_p=1.0):
  """Temperature and top_p are traced (one compilation for all values) except temperature 0."""
  limits = _limits(model, max_lengths, max_decode_len)
  if temperature == 0:
    fn = _sample_fn(model.tokens_to_logits, max_decode_len, "zero_temperature", top_k)
    out = fn(model.init_cache(), rng, limits)
  else:
    fn = _sample_fn(model.tokens_to_logits, max_decode_len, "sample", top_k)
    out = fn(model.init_cache(), rng, limits, jnp.float32(temperature), jnp.float32(top_p))
  return jax.tree.map(np.asarray, out)
