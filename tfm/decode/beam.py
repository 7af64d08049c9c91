"""Beam search as tensor2tensor ran it for the paper (section 6.1), with the GNMT length penalty.

The paper decodes with beam size 4, length penalty alpha = 0.6 and a maximum output length of
input length + 50, "terminating early when possible". This module implements the search of the
paper's code (tensor2tensor's beam_search.py) over the model-agnostic step function of
`tfm.decode.common` (ids [batch*beam, 1], cache -> logits [batch*beam, vocab], cache), as one
`jax.lax.while_loop` (one per cache length when the cache grows with the output, see
`cache_lengths`), so the whole search jit-compiles.

Scoring (Wu et al. 2016, GNMT, eq. 14, without the coverage term):
  lp(Y) = ((5 + |Y|) / 6) ** alpha,      score(Y) = log P(Y | X) / lp(Y).
|Y| counts the generated tokens *including* the EOS that ends Y (the start token is not counted).

The search, per batch row, step t = 0, 1, ... (the sequences then hold t + 1 tokens):
  1. every live beam is extended by every token and the 2 * beam_size best extensions by log P are
     kept: each live beam has one EOS extension, so at most beam_size of them end in EOS and at
     least beam_size do not;
  2. the extensions that end in EOS are finished hypotheses, merged by score into the row's
     `beam_size` best finished ones; the beam_size best of the others are the live beams of the
     next step, so the beam always holds beam_size live hypotheses and finished ones never crowd
     them out;
  3. the per-example limit: at t + 1 = max_lengths[row] the row is done. Its finished hypotheses
     are the result; only a row in which no hypothesis ended in EOS returns its live beams instead,
     truncated at |Y| = max_lengths[row] (tensor2tensor's fallback to the alive sequences);
  4. early termination: for alpha >= 0 a live beam's final score is at most its current log P
     divided by the largest reachable lp (lp(max_lengths[row]); for alpha < 0, lp of the next
     length). Once every finished hypothesis of a row scores above that bound for its best live
     beam, no live beam can change them or enter ahead of them and the row is done (the
     hypotheses returned are then exactly those a search run to the limit would return first; a
     row may hold fewer than beam_size). The loop stops when every row is done.
tensor2tensor bounds the search by the padded batch length + 50; this search uses each example's
own length + 50, the paper's rule. The cache is reordered along the beam axis after each step (it
is never rebuilt from the prefix). Sequences hold the generated tokens (no start token) followed by
0 padding. The padding token is never generated (`pad_id`; its candidates are dropped without
renormalising, so scores stay the model's log P), which keeps 0 unambiguous as padding; pad_id=None
allows it.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from tfm.decode.common import (PyTree, TokensToLogits, check_cache_lengths, infer_batch_size,
                               resolve_max_lengths, while_phases)

NEG_INF = float("-inf")


def length_penalty(length: jax.Array | int, alpha: float | jax.Array) -> jax.Array:
  """GNMT length penalty ((5 + length) / 6) ** alpha, as float32 (any shape)."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def best_extensions(logits: jax.Array, live_logp: jax.Array, done: jax.Array, pad_id: int | None,
                    n: int, chunk: int = 128) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The n best one-token extensions of every row's beams: log P float32, parent beam int32 and
  token int32, each [batch, n], best first.

  logits [batch, beam, vocab] (the model's, any float dtype); live_logp float32[batch, beam], the
  beams' log P (-inf for empty beams); done bool[batch]. An extension's log P is
    cand[b, j, v] = live_logp[b, j] + log_softmax(logits[b, j])[v],
  -inf for v = pad_id and in finished rows. The result is exactly
  `jax.lax.top_k(cand.reshape(batch, beam * vocab), n)` (best first, ties to the lower index) with
  the flat index split into (parent, token), except that where fewer than n extensions of a row
  are finite, which of its -inf ones fill the rest is left open (their tokens are valid ids).

  XLA:CPU's TopK sorts a whole row; this one never writes `cand`. cand of a logit adds and subtracts
  constants of its beam, each rounding non-decreasing in the logit, so the best candidate of a set
  of one beam's logits is cand of their largest logit (equal values, if rounding makes some, are
  ordered by index in the final top_k). Each beam's vocabulary is cut into chunks of `chunk` logits
  (the last padded with -inf). Order candidates by (value desc, index asc): each of the n best lies
  in a chunk whose own best is at least as good, and fewer than n chunks have a better best (each
  holds a candidate better than it, a different one), so the n best lie in the n chunks with the
  best maxima (ties to the lower chunk, which holds the lower indices). Those chunks, in index
  order, hold n * chunk candidates, computed by log_softmax's own arithmetic, so their values are
  the ones the [batch, beam, vocab] array would hold; top_k over them is the answer.
  """
  batch, k, vocab = logits.shape
  x = logits.astype(jnp.float32)
  x_max = jnp.max(x, axis=-1, keepdims=True)  # log_softmax's: (x - max) - log(sum(exp(x - max)))
  lse = jnp.log(jnp.sum(jnp.exp(x - x_max), axis=-1, keepdims=True))
  # values [batch, m, c]; live, top, norm [batch, m, 1]
  cand_of = lambda values, live, top, norm: jnp.where(
      done[:, None, None], NEG_INF, live + ((values - top) - norm))
  token_id = jnp.arange(vocab)
  if pad_id is not None:  # only for picking: lse above includes it; negative ids count from the end
    x = jnp.where(token_id == pad_id % vocab, NEG_INF, x)
  if k * vocab <= 2 * n * chunk:
    cand = cand_of(x, live_logp[:, :, None], x_max, lse).reshape(batch, k * vocab)
    values, index = jax.lax.top_k(cand, n)
    return values, index // vocab, index % vocab
  per_beam = -(-vocab // chunk)
  chunks = jnp.pad(x, ((0, 0), (0, 0), (0, per_beam * chunk - vocab)), constant_values=NEG_INF)
  chunks = chunks.reshape(batch, k, per_beam, chunk)
  best = cand_of(jnp.max(chunks, axis=-1), live_logp[:, :, None], x_max, lse)  # cand's chunk maxima
  _, which = jax.lax.top_k(best.reshape(batch, k * per_beam), n)
  which = jnp.sort(which, axis=-1)  # [batch, n] chunk ids in index order: top_k's tie rule
  parent, first = which // per_beam, which % per_beam * chunk
  picked = jnp.take_along_axis(chunks.reshape(batch, k * per_beam, chunk), which[:, :, None], 1)
  of_parent = lambda a: jnp.take_along_axis(a, parent[:, :, None], axis=1)  # [batch, n, 1]
  picked = cand_of(picked, of_parent(live_logp[:, :, None]), of_parent(x_max), of_parent(lse))
  values, pos = jax.lax.top_k(picked.reshape(batch, n * chunk), n)
  slot = pos // chunk
  tokens = jnp.take_along_axis(first, slot, axis=1) + pos % chunk
  return values, jnp.take_along_axis(parent, slot, axis=1), jnp.minimum(tokens, vocab - 1)


def _per_example(beam_invariant: Callable | None, path) -> bool:
  return beam_invariant is not None and bool(beam_invariant(path))


def tile_beams(tree: PyTree, beam_size: int, keep: Callable | None = None) -> PyTree:
  """Repeats every batch-leading leaf beam_size times: [batch, ...] -> [batch*beam, ...].

  Row b*beam_size + k holds copy k of example b (the layout `beam_search` uses for the cache).
  Use it for anything a `tokens_to_logits` closure holds per example (e.g. an encoder output).
  keep: optional predicate on a leaf's key path; the leaves it picks stay [batch, ...].
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, x: x if _per_example(keep, path) else jnp.repeat(x, beam_size, axis=0), tree)


def gather_beams(tree: PyTree, parents: jax.Array) -> PyTree:
  """Reorders beams: leaves [batch, beam, ...] -> out[b, k] = leaf[b, parents[b, k]].

  parents: int32[batch, new_beam]. The gather stays inside each batch row (a batched gather),
  so it partitions along a sharded batch axis.
  """
  return jax.tree.map(lambda x: jax.vmap(lambda row, idx: row[idx])(x, parents), tree)


def _gather_flat(tree: PyTree, parents: jax.Array, beam_invariant: Callable | None = None) -> PyTree:
  """`gather_beams` for leaves laid out [batch*beam, ...] (the cache); the per-example leaves
  beam_invariant(path) picks (left [batch, ...] by `tile_beams`) have nothing to reorder."""
  batch, beam = parents.shape

  def one(path, x):
    if _per_example(beam_invariant, path):
      return x
    x = x.reshape((batch, beam) + x.shape[1:])
    return gather_beams(x, parents).reshape((batch * beam,) + x.shape[2:])

  return jax.tree_util.tree_map_with_path(one, tree)


class BeamSearchResult(NamedTuple):
  """Finished hypotheses, best first. Slots with no hypothesis have score -inf, tokens 0, length 0
  (a row that stopped early may fill fewer than beam_size; the first slot is always filled).

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
  cache: PyTree  # leaves [batch*beam, ...]; those beam_invariant picks [batch, ...]
  fin_seqs: jax.Array  # int32[batch, beam, max_decode_len]
  fin_scores: jax.Array  # float32[batch, beam], sorted descending, -inf for empty slots
  fin_lens: jax.Array  # int32[batch, beam]
  done: jax.Array  # bool[batch]


def beam_search_result(tokens_to_logits: TokensToLogits, cache: PyTree, *, beam_size: int = 4,
                       alpha: float | jax.Array = 0.6, max_decode_len: int,
                       max_lengths: jax.Array | None = None, eos_id: int = 1, start_id: int = 0,
                       batch_size: int | None = None, early_stopping: bool = True,
                       pad_id: int | None = 0,
                       beam_invariant: Callable | None = None,
                       cache_lengths: Sequence[int] = (),
                       grow_cache: Callable[[PyTree, int], PyTree] | None = None) -> BeamSearchResult:
  """Beam search (section 6.1 / GNMT scoring), the search of the module docstring.

  Args:
    tokens_to_logits: ids int32[batch*beam, 1], cache -> (logits [batch*beam, vocab], cache).
    cache: the model's decode cache for the batch, every leaf [batch, ...]; tiled to
      [batch*beam, ...] here (row b*beam + k is beam k of example b) and reordered each step,
      except the leaves beam_invariant picks.
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
      true for leaves that are the same in every beam of an example and that tokens_to_logits reads
      once per example: they stay [batch, ...] (neither tiled nor reordered) while the ids and the
      other leaves have batch*beam rows (the projected encoder output: read once per example, not
      once per beam).
    cache_lengths: increasing cache lengths L_1 < ... < L_n = max_decode_len; the cache passed
      must hold L_1 positions, and after step L_i - 1 the search calls grow_cache(cache, L_{i+1})
      (see `tfm.decode.common`). () = one loop over the cache as given.
    grow_cache: needed with several cache_lengths.

  Returns:
    BeamSearchResult: sequences int32[batch, beam, max_decode_len] (tokens, EOS, then 0), scores
    float32[batch, beam] = log P(Y) / lp(|Y|) sorted best first, lengths and the steps run. Jit
    with the keyword arguments static (e.g. via functools.partial).
  """
  phases = check_cache_lengths(cache_lengths, grow_cache, max_decode_len)
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
      cache=tile_beams(cache, k, keep=beam_invariant),
      fin_seqs=zeros_seq,
      fin_scores=jnp.full((batch, k), NEG_INF, jnp.float32),
      fin_lens=jnp.zeros((batch, k), jnp.int32),
      done=jnp.zeros((batch,), bool),
  )
  lp_limit = length_penalty(limits, alpha)  # [batch]

  def cond(s: _State, end: int):
    return (s.step < end) & ~jnp.all(s.done)

  def body(s: _State) -> _State:
    t = s.step
    logits, new_cache = tokens_to_logits(s.live_last.reshape(batch * k, 1), s.cache)
    top_logp, parents, tokens = best_extensions(  # [batch, 2k] each
        logits.reshape(batch, k, -1), s.live_logp, s.done, pad_id, 2 * k)
    seqs = gather_beams(s.live_seqs, parents).at[:, :, t].set(tokens)  # [batch, 2k, len]
    length = t + 1
    is_eos = tokens == eos_id

    # Extensions ending in EOS join the finished hypotheses (old ones first, so on equal scores the
    # earlier one is kept: top_k is stable).
    new_scores = jnp.where(is_eos & (top_logp > NEG_INF), top_logp / length_penalty(length, alpha),
                           NEG_INF)
    pool_scores = jnp.concatenate([s.fin_scores, new_scores], axis=1)  # [batch, 3k]
    fin_scores, pick = jax.lax.top_k(pool_scores, k)
    pool_seqs = jnp.concatenate([s.fin_seqs, seqs], axis=1)
    pool_lens = jnp.concatenate([s.fin_lens, jnp.full((batch, 2 * k), length, jnp.int32)], axis=1)
    fin_seqs, fin_lens = gather_beams((pool_seqs, pool_lens), pick)

    # The beam_size best extensions not ending in EOS stay live.
    live_logp, live_pick = jax.lax.top_k(jnp.where(is_eos, NEG_INF, top_logp), k)
    parents, tokens, seqs = gather_beams((parents, tokens, seqs), live_pick)

    # At its limit a row is done; if nothing in it ended in EOS, its live beams are the result.
    at_limit = length >= limits  # [batch]
    fallback = (at_limit & ~s.done & (fin_scores[:, 0] == NEG_INF))[:, None]
    fin_scores = jnp.where(fallback, jnp.where(live_logp > NEG_INF,
                                               live_logp / length_penalty(length, alpha), NEG_INF),
                           fin_scores)
    fin_seqs = jnp.where(fallback[:, :, None], seqs, fin_seqs)
    fin_lens = jnp.where(fallback, length, fin_lens)
    done = s.done | at_limit
    if early_stopping:
      lp_max = jnp.maximum(lp_limit, length_penalty(length + 1, alpha))  # lp is monotone in |Y|
      bound = live_logp[:, 0] / lp_max  # log P only falls as a beam grows; live is sorted
      lowest = jnp.min(jnp.where(fin_scores > NEG_INF, fin_scores, jnp.inf), axis=1)
      done = done | ((fin_scores[:, 0] > NEG_INF) & (lowest > bound))
    return _State(step=t + 1, live_last=tokens, live_seqs=seqs, live_logp=live_logp,
                  cache=_gather_flat(new_cache, parents, beam_invariant), fin_seqs=fin_seqs,
                  fin_scores=fin_scores, fin_lens=fin_lens, done=done)

  s = while_phases(cond, body, state, phases,
                   lambda s, length: s._replace(cache=grow_cache(s.cache, length)))
  empty = s.fin_scores == NEG_INF
  return BeamSearchResult(
      sequences=jnp.where(empty[:, :, None], 0, s.fin_seqs),
      scores=s.fin_scores,
      lengths=jnp.where(empty, 0, s.fin_lens),
      num_steps=s.step,
  )


def beam_search(tokens_to_logits: TokensToLogits, cache: PyTree, **options: Any
                ) -> tuple[jax.Array, jax.Array]:
  """`beam_search_result`'s (sequences, scores), best beam first; the options are its keyword
  arguments: sequences int32[batch, beam, max_decode_len], scores float32[batch, beam]."""
  r = beam_search_result(tokens_to_logits, cache, **options)
  return r.sequences, r.scores
