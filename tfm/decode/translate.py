"""Translation with a trained Transformer: encode once, then search with the decoder's cache.

`make_translate_fn` returns one jitted function params, inputs -> best hypotheses, for beam search
(section 6.1: beam 4, alpha 0.6, maximum output length input length + 50), greedy decoding, or
sampling (temperature, top-k, top-p).
`uncached_step` is the reference the tests compare the cache against: it reruns the decoder over
the whole prefix at every step.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from tfm.decode.beam import beam_search
from tfm.decode.common import cache_lengths, input_length_limits
from tfm.decode.sampling import greedy, sample
from tfm.model import masks
from tfm.model.attention import grow_cache
from tfm.model.scan_convert import unstack_layers
from tfm.model.transformer import Transformer


def cached_step(model: Transformer, params) -> Callable:
  """tokens_to_logits over the decoder's key/value cache: ids [rows, 1], cache -> logits [rows, vocab]."""

  def step(ids, cache):
    logits, state = model.apply({"params": params, "cache": cache}, ids, method=Transformer.decode_step,
                                mutable=["cache"])
    return logits, state["cache"]

  return step


def init_cache(model: Transformer, params, inputs: jax.Array, max_decode_len: int):
  """Encodes inputs [b, s] and builds the decode cache for outputs of up to max_decode_len tokens."""
  segmentation = masks.segments_from_tokens(inputs)
  encoded = model.apply({"params": params}, inputs, segmentation, method=Transformer.encode)
  _, state = model.apply({"params": params}, encoded, segmentation, inputs.shape[0], max_decode_len,
                         method=Transformer.init_cache, mutable=["cache"])
  return state["cache"]


def uncached_step(model: Transformer, params) -> tuple[Callable, Callable]:
  """A cache-free tokens_to_logits: the 'cache' is the prefix so far and the encoder output.

  Returns (make_state(inputs, max_decode_len) -> state, step(ids, state) -> (logits, state)).
  """

  def make_state(inputs, max_decode_len):
    segmentation = masks.segments_from_tokens(inputs)
    encoded = model.apply({"params": params}, inputs, segmentation, method=Transformer.encode)
    b = inputs.shape[0]
    return dict(prefix=jnp.zeros((b, max_decode_len), jnp.int32), index=jnp.zeros((b,), jnp.int32),
                encoded=encoded, segmentation=segmentation)

  def step(ids, state):
    index = state["index"]
    rows = jnp.arange(ids.shape[0])
    prefix = state["prefix"].at[rows, index].set(ids[:, 0])  # decoder inputs: start token, y1, y2, ...
    # decode() shifts its targets right, so pass the prefix shifted left: targets[t] = prefix[t + 1].
    targets = jnp.pad(prefix[:, 1:], ((0, 0), (0, 1)), constant_values=3)
    logits = model.apply({"params": params}, state["encoded"], targets, state["segmentation"],
                         jnp.ones_like(targets), None, method=Transformer.decode)
    return logits[rows, index], dict(state, prefix=prefix, index=index + 1)

  return make_state, step


def decoding_twin(model: Transformer) -> tuple[Transformer, Callable]:
  """(the model the decoders run, params -> its parameters). A scanned model (model.scan_layers)
  decodes as its unrolled twin, its parameters unstacked once per call: a scan over the layers
  inside a decoder's loop, with the cache stacked, made beam search slower on CPU (see
  experiments/SPEED.md). Any other model decodes as itself."""
  if not getattr(getattr(model, "cfg", None), "scan_layers", False):
    return model, lambda params: params
  return Transformer(dataclasses.replace(model.cfg, scan_layers=False)), unstack_layers


# Decoder cache entries that are the same in every beam of an example and that the decoder reads
# once per example (cross-attention multiplies an example's beams with them in one product): the
# projected encoder output and the encoder's padding. (The decode position is the same in every
# beam too, but it is read per row.)
_BEAM_INVARIANT = frozenset({"cross_key", "cross_value", "encoder_segmentation"})


def beam_invariant_cache(path) -> bool:
  """True for the Transformer decode-cache leaves beam search keeps once per example (not tiled
  over the beams, never reordered)."""
  last = path[-1]
  return getattr(last, "key", None) in _BEAM_INVARIANT


def make_translate_fn(model: Transformer, *, beam_size: int = 4, alpha: float = 0.6,
                      max_extra_length: int = 50, eos_id: int = 1, temperature: float | None = None,
                      top_k: int = 0, top_p: float = 1.0, cache_phases: int = 1,
                      n_best: int | None = None) -> Callable:
  """Returns jitted translate(params, inputs [b, s], rng=None, alpha_arg=None) -> (tokens
  [b, s + extra], scores [b]).

  The best hypothesis per example (beam search; beam_size 1 is greedy), or with `temperature` set
  one sample per example from the processed distribution (top_k, top_p; see tfm.decode.sampling),
  drawn with `rng`. Tokens end at EOS and are padded with 0; scores are the search's scores (log P
  over the length penalty) or the model's log P of the greedy / sampled output.
  cache_phases: the decoder runs in this many loops, its self-attention caches growing from about
  1/cache_phases of the longest output to all of it (`cache_lengths`), so a step reads a cache
  about as long as its prefix: the same outputs up to float rounding, one compiled loop body per
  phase, and at the last growth the old and the new caches briefly both in memory. 1 here (one
  loop, as a plain library call); `Experiment.translate_fn` and the commands pass
  eval.cache_phases (3).
  alpha: the length penalty, a constant of the compiled search; translate's alpha_arg (a float32
  scalar) replaces it by a traced one, so one compiled beam search serves every alpha
  (tfm eval's grid; greedy search and sampling read none).
  n_best: with beam search, the n_best <= beam_size best finished hypotheses instead, best first:
  tokens [b, n_best, s + extra] and scores [b, n_best] (a slot the search did not fill, when it
  stopped early with fewer, has score -inf and no tokens).
  """
  if isinstance(cache_phases, bool) or not (isinstance(cache_phases, int) and cache_phases >= 1):
    raise ValueError(f"cache_phases: expected a positive integer, got {cache_phases!r}")
  if temperature is None and not (isinstance(beam_size, int) and beam_size >= 1):
    raise ValueError(f"beam_size: expected a positive integer, got {beam_size!r}")
  if n_best is not None and (temperature is not None or not 1 <= n_best <= beam_size):
    raise ValueError(f"n_best: expected 1 <= n_best <= beam_size={beam_size} with beam search "
                     f"(not sampling), got {n_best!r}")
  model, unstack = decoding_twin(model)

  @jax.jit
  def translate(params, inputs, rng=None, alpha_arg=None):
    params = unstack(params)
    max_decode_len = inputs.shape[1] + max_extra_length
    # The paper's limit (input length + 50); 1 for all-padding rows that fill up a last batch, so
    # they finish at the first step instead of keeping the search running.
    limits = jnp.where(inputs[:, 0] == 0, 1, input_length_limits(inputs, extra=max_extra_length))
    lengths = cache_lengths(max_decode_len, cache_phases)
    cache = init_cache(model, params, inputs, lengths[0])
    step = cached_step(model, params)
    growth = dict(cache_lengths=lengths, grow_cache=grow_cache)
    if temperature is not None:
      result = sample(step, cache, rng, max_decode_len=max_decode_len, max_lengths=limits,
                      temperature=temperature, top_k=top_k, top_p=top_p, eos_id=eos_id, **growth)
      return result.sequences, result.log_probs
    if beam_size == 1:
      result = greedy(step, cache, max_decode_len=max_decode_len, max_lengths=limits, eos_id=eos_id,
                      **growth)
      if n_best is not None:  # greedy's one hypothesis; its score is log P (lp(|Y|) ** 0 = 1)
        return result.sequences[:, None], result.log_probs[:, None]
      return result.sequences, result.log_probs
    sequences, scores = beam_search(step, cache, beam_size=beam_size,
                                    alpha=alpha if alpha_arg is None else alpha_arg,
                                    max_decode_len=max_decode_len, max_lengths=limits, eos_id=eos_id,
                                    beam_invariant=beam_invariant_cache, **growth)
    if n_best is not None:
      return sequences[:, :n_best], scores[:, :n_best]
    return sequences[:, 0], scores[:, 0]

  return translate
