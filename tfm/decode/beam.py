"""Beam search with the GNMT length penalty and early termination (paper section 6.1).

The paper decodes with beam size 4, length penalty alpha = 0.6 and a maximum output length of
input length + 50, "terminating early when possible". This module implements that search over the
model-agnostic step function of `tfm.decode.common` (ids [batch*beam, 1], cache -> logits
[batch*beam, vocab], cache), as one `jax.lax.while_loop`, so the whole search jit-compiles.

Scoring (Wu et al. 2016, GNMT, eq. 14, without the coverage term):
  lp(Y) = ((5 + |Y|) / 6) ** alpha,      score(Y) = log P(Y | X) / lp(Y).
|Y| counts the generated tokens *including* the EOS that ends Y (the start token is not counted).

The search, per batch row, step t = 0, 1, ... (the sequences then hold t + 1 tokens):
  1. every live beam is extended by every token; the `beam_size` best extensions by log P (EOS
     included) are selected, so a beam of size 1 is exactly greedy decoding;
  2. selected extensions that end in EOS leave the beam and are merged, by score, into the row's
     `beam_size` finished hypotheses; the others stay live (a step in which e of them end in EOS
     continues with beam_size - e live beams; the next step refills the beam);
  3. the per-example limit: when t + 1 reaches max_lengths[row], every selected extension counts
     as finished, those without EOS as truncated hypotheses of |Y| = max_lengths[row] (no EOS is
     forced), and the row is done;
  4. early termination: for alpha >= 0 a live beam's final score is at most its current log P
     divided by the largest reachable lp (lp(max_lengths[row]); for alpha < 0, lp of the next
     length). Once the best such bound is <= the worst of the row's `beam_size` finished scores,
     no live beam can enter them and the row is done. The loop stops when every row is done.
The cache is reordered along the beam axis after each step (it is never rebuilt from the prefix).
Sequences hold the generated tokens (no start token) followed by 0 padding. The padding token is
never generated (`pad_id`; its candidates are dropped without renormalising, so scores stay the
model's log P), which keeps 0 unambiguous as padding; pad_id=None allows it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from tfm.decode.common import PyTree, TokensToLogits, infer_batch_size, resolve_max_lengths

NEG_INF = float("-inf")


def length_penalty(length: jax.Array | int, alpha: float | jax.Array) -> jax.Array:
  """GNMT length penalty ((5 + length) / 6) ** alpha, as float32 (any shape)."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def tile_beams(tree: PyTree, beam_size: int) -> PyTree:
  """Repeats every batch-leading leaf beam_size times: [batch, ...] -> [batch*beam, ...].

  Row b*beam_size + k holds copy k of example b (the layout `beam_search` uses for the cache).
  Use it for anything a `tokens_to_logits` closure holds per example (e.g. an encoder output).
  """
  return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0), tree)


def gather_beams(tree: PyTree, parents: jax.Array) -> PyTree:
  """Reorders beams: leaves [batch, beam, ...] -> out[b, k] = leaf[b, parents[b, k]].

  parents: int32[batch, new_beam]. The gather stays inside each batch row (a batched gather),
  so it partitions along a sharded batch axis.
  """
  return jax.tree.map(lambda x: jax.vmap(lambda row, idx: row[idx])(x, parents), tree)


def _gather_flat(tree: PyTree, parents: jax.Array, beam_invariant: Callable | None = None) -> PyTree:
  """`gather_beams` for leaves laid out [batch*beam, ...] (the cache).

  Leaves for which beam_invariant(path) is true hold the same value in every beam of an example
  (the projected encoder output, say); reordering them would change nothing, so they are skipped.
  """
  batch, beam = parents.shape

  def one(path, x):
    if beam_invariant is not None and beam_invariant(path):
      return x
    x = x.reshape((batch, beam) + x.shape[1:])
    return gather_beams(x, parents).reshape((batch * beam,) + x.shape[2:])

  return jax.tree_util.tree_map_with_path(one, tree)


class BeamSearchResult(NamedTuple):
  """Finished hypotheses, best first. Slots with no hypothesis have score -inf, tokens 0, length 0.

  sequences: int32[batch, beam, max_decode_len], generated tokens then 0 padding.
  scores:    float32[batch, beam], log P(Y) / lp(|Y|).
  lengths:   int32[batch, beam], |Y| (EOS included when present).
  num_steps: int32[], loop iterations run (decoder calls), for checking early termination.
  """

  sequences: jax.Array
  scores: jax.Array
  lengths: jax.Array
  num_steps: jax.Array


class _State(NamedTuple):
  step: jax.Array  # int32[]
  live_last: jax.Array  # int32[batch, beam], the last token of each live beam
  live_seqs: jax.Array  # int32[batch, beam, max_decode_len]
  live_logp: jax.Array  # float32[batch, beam], -inf for empty beams
  cache: PyTree  # leaves [batch*beam, ...]
  fin_seqs: jax.Array  # int32[batch, beam, max_decode_len]
  fin_scores: jax.Array  # float32[batch, beam], sorted descending, -inf for empty slots
  fin_lens: jax.Array  # int32[batch, beam]
  done: jax.Array  # bool[batch]


def beam_search_result(tokens_to_logits: TokensToLogits, cache: PyTree, *, beam_size: int = 4,
                       alpha: float | jax.Array = 0.6, max_decode_len: int,
                       max_lengths: jax.Array | None = None, eos_id: int = 1, start_id: int = 0,
                       batch_size: int | None = None, early_stopping: bool = True,
                       pad_id: int | None = 0,
                       beam_invariant: Callable | None = None) -> BeamSearchResult:
  """Runs the search described in the module docstring; see `beam_search` for the arguments."""
  batch = infer_batch_size(cache, max_lengths, batch_size)
  limits = resolve_max_lengths(max_lengths, batch, max_decode_len)  # [batch]
  k = beam_size
  zeros_seq = jnp.zeros((batch, k, max_decode_len), jnp.int32)
  state = _State(
      step=jnp.array(0, jnp.int32),
      live_last=jnp.full((batch, k), start_id, jnp.int32),
      live_seqs=zeros_seq,
      # Only beam 0 is live at first, so the first step does not pick the same extension k times.
      live_logp=jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1), jnp.float32), (batch, 1)),
      cache=tile_beams(cache, k),
      fin_seqs=zeros_seq,
      fin_scores=jnp.full((batch, k), NEG_INF, jnp.float32),
      fin_lens=jnp.zeros((batch, k), jnp.int32),
      done=jnp.zeros((batch,), bool),
  )
  lp_limit = length_penalty(limits, alpha)  # [batch]

  def cond(s: _State):
    return (s.step < max_decode_len) & ~jnp.all(s.done)

  def body(s: _State) -> _State:
    t = s.step
    logits, new_cache = tokens_to_logits(s.live_last.reshape(batch * k, 1), s.cache)
    vocab = logits.shape[-1]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1).reshape(batch, k, vocab)
    if pad_id is not None:
      logp = logp.at[:, :, pad_id].set(NEG_INF)
    cand = s.live_logp[:, :, None] + logp
    cand = jnp.where(s.done[:, None, None], NEG_INF, cand)  # finished rows stop changing
    top_logp, top_idx = jax.lax.top_k(cand.reshape(batch, k * vocab), k)  # [batch, k]
    parents, tokens = top_idx // vocab, top_idx % vocab
    seqs = gather_beams(s.live_seqs, parents).at[:, :, t].set(tokens)

    # Extensions that finish now: EOS, or every one in a row that reached its limit.
    length = t + 1
    at_limit = length >= limits  # [batch]
    ends = (tokens == eos_id) | at_limit[:, None]
    new_scores = jnp.where(ends & (top_logp > NEG_INF), top_logp / length_penalty(length, alpha),
                           NEG_INF)
    # Old hypotheses first, so on equal scores the earlier one is kept (top_k is stable).
    pool_scores = jnp.concatenate([s.fin_scores, new_scores], axis=1)  # [batch, 2k]
    fin_scores, pick = jax.lax.top_k(pool_scores, k)
    pool_seqs = jnp.concatenate([s.fin_seqs, seqs], axis=1)
    pool_lens = jnp.concatenate([s.fin_lens, jnp.full((batch, k), length, jnp.int32)], axis=1)
    fin_seqs, fin_lens = gather_beams((pool_seqs, pool_lens), pick)

    live_logp = jnp.where(ends, NEG_INF, top_logp)
    done = s.done | at_limit
    if early_stopping:
      lp_max = jnp.maximum(lp_limit, length_penalty(length + 1, alpha))  # lp is monotone in |Y|
      bound = jnp.max(live_logp, axis=1) / lp_max  # log P only falls as a beam grows
      done = done | (bound <= fin_scores[:, -1])
    return _State(step=t + 1, live_last=tokens, live_seqs=seqs, live_logp=live_logp,
                  cache=_gather_flat(new_cache, parents, beam_invariant), fin_seqs=fin_seqs,
                  fin_scores=fin_scores, fin_lens=fin_lens, done=done)

  s = jax.lax.while_loop(cond, body, state)
  empty = s.fin_scores == NEG_INF
  return BeamSearchResult(
      sequences=jnp.where(empty[:, :, None], 0, s.fin_seqs),
      scores=s.fin_scores,
      lengths=jnp.where(empty, 0, s.fin_lens),
      num_steps=s.step,
  )


def beam_search(tokens_to_logits: TokensToLogits, cache: PyTree, *, beam_size: int = 4,
                alpha: float | jax.Array = 0.6, max_decode_len: int,
                max_lengths: jax.Array | None = None, eos_id: int = 1, start_id: int = 0,
                batch_size: int | None = None, early_stopping: bool = True, pad_id: int | None = 0,
                beam_invariant: Callable | None = None) -> tuple[jax.Array, jax.Array]:
  """Beam search (section 6.1 / GNMT scoring); returns (sequences, scores), best beam first.

  Args:
    tokens_to_logits: ids int32[batch*beam, 1], cache -> (logits [batch*beam, vocab], cache).
    cache: the model's decode cache for the batch, every leaf [batch, ...]; tiled to
      [batch*beam, ...] here (row b*beam + k is beam k of example b) and reordered each step.
      Arrays a `tokens_to_logits` closure holds per example must be tiled with `tile_beams`.
    beam_size: beams (and finished hypotheses) kept per example; static.
    alpha: length-penalty exponent (0 = raw log-probabilities).
    max_decode_len: static length of the output arrays.
    max_lengths: int32[batch] per-example limit on |Y| (the paper: input length + 50), clipped to
      [1, max_decode_len]; None = max_decode_len. Hypotheses reaching it are kept, truncated.
    eos_id / start_id: EOS token and the token fed at the first step.
    batch_size: static batch size; by default from max_lengths or the first cache leaf.
    early_stopping: stop a row once no live beam can beat its worst finished hypothesis.
    pad_id: a token never generated (the padding id, 0); None lets the model emit it.
    beam_invariant: optional predicate on a cache leaf's key path (as `jax.tree_util` gives it),
      true for leaves equal across the beams of an example; they are not reordered each step.

  Returns:
    sequences int32[batch, beam, max_decode_len] (tokens, EOS, then 0) and scores
    float32[batch, beam] = log P(Y) / lp(|Y|), sorted best first. Jit with the keyword arguments
    static (e.g. via functools.partial); `beam_search_result` also returns lengths and steps.
  """
  r = beam_search_result(tokens_to_logits, cache, beam_size=beam_size, alpha=alpha,
                         max_decode_len=max_decode_len, max_lengths=max_lengths, eos_id=eos_id,
                         start_id=start_id, batch_size=batch_size, early_stopping=early_stopping,
                         pad_id=pad_id, beam_invariant=beam_invariant)
  return r.sequences, r.scores
