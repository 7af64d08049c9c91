"""Text in, text out: SentencePiece-encode sentences, batch them by length, decode, detokenize.

Every source is decoded whole wherever the model's positions allow it: sinusoidal, relative, rope,
alibi and 'none' compute a position for any length, so a source longer than data.max_length (the
training rows) is translated as it is, not cut. A learned position table (model.max_length rows)
needs a row for every source position and every decoded one: a source longer than
`source_limit` is refused (not decoded; its translation is the empty string) or, with
truncate=True, cut to that length (its first pieces, EOS put back) -- counted either way in the
stats (`refused`, `truncated`).
Inputs are padded to a multiple of 16 tokens (a few shapes, so the decoder compiles a few times),
never past the limit. Sentences are sorted by length into batches and returned in the original
order. Every batch has the same number of rows (empty rows finish at the first step). On several
hosts every host passes the same texts and gets every translation back.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from tfm.data.examples import fit_length

LENGTH_STEP = 16


def source_limit(model_cfg, max_extra_length: int) -> int | None:
  """The longest source (pieces, EOS included) a model decodes whole with outputs of up to
  |source| + max_extra_length tokens: None (any) unless its positions are a learned table
  (model.positions='learned'), whose model.max_length rows must hold every source position and
  every decoded one: model.max_length - max_extra_length."""
  if model_cfg.positions != "learned":
    return None
  return model_cfg.max_length - max_extra_length


def table_rows(model_cfg) -> int | None:
  """The positions a teacher-forced pass over a source or a target can take: model.max_length with
  a learned table, None (any) with every other encoding."""
  return model_cfg.max_length if model_cfg.positions == "learned" else None


@dataclasses.dataclass(frozen=True)
class Fitted:
  """Token ids of texts against a length limit: ids[i] (None where text i was refused), and the
  indices of the refused and of the truncated texts, ascending."""
  ids: list
  refused: list[int]
  truncated: list[int]


def fit_texts(tokenizer, texts: Sequence[str], limit: int | None, truncate: bool) -> Fitted:
  """Each text's ids (EOS included) against `limit` pieces (None: none): longer ones refused, or
  with truncate cut to their first limit - 1 pieces and EOS (as data.overlong='truncate' cuts)."""
  ids, refused, truncated = [], [], []
  for i, text in enumerate(texts):
    encoded = tokenizer.encode(text)
    if limit is not None and len(encoded) > limit:
      if not truncate:
        ids.append(None)
        refused.append(i)
        continue
      encoded = fit_length(encoded, limit, "truncate")[0]
      truncated.append(i)
    ids.append(encoded)
  return Fitted(ids, refused, truncated)


def _padded_length(n: int, limit: int | None) -> int:
  padded = -(-n // LENGTH_STEP) * LENGTH_STEP
  return padded if limit is None else min(limit, padded)


def _host(tokens: jax.Array) -> np.ndarray:
  """The whole [batch, length] array on this host. On several hosts the search's rows lie on every
  host's devices (the batch is split over the mesh), so each host gathers the others' rows."""
  if tokens.is_fully_addressable:
    return np.asarray(jax.device_get(tokens))
  return np.asarray(multihost_utils.process_allgather(tokens, tiled=True))


def _batches(encoded: Sequence[list[int] | None], batch_size: int, limit: int | None
             ) -> list[tuple[list[int], np.ndarray]]:
  """(indices of `encoded`, inputs int32[batch_size, padded length]) batches, by length; the
  None entries (refused texts) in none."""
  order = sorted((i for i, ids in enumerate(encoded) if ids is not None),
                 key=lambda i: len(encoded[i]))
  batches = []
  for first in range(0, len(order), batch_size):
    chunk = order[first:first + batch_size]
    length = _padded_length(max(len(encoded[i]) for i in chunk), limit)
    inputs = np.zeros((batch_size, length), np.int32)  # a fixed batch size: one compile per length
    for row, i in enumerate(chunk):
      inputs[row, :len(encoded[i])] = encoded[i]
    batches.append((chunk, inputs))
  return batches


def _search(translate: Callable, params, tokenizer, texts: Sequence[str], *, batch_size: int,
            max_input_length: int | None, truncate: bool, seed: int,
            progress: Callable[[int], None] | None, search_args: tuple = (),
            compiled: dict | None = None) -> tuple[list, dict]:
  """translate's (tokens, scores) of each text, on the host, in the texts' order (None for a
  refused text), and the stats of translate_texts (output_tokens counts every hypothesis
  returned)."""
  fitted = fit_texts(tokenizer, texts, max_input_length, truncate)
  batches = _batches(fitted.ids, batch_size, max_input_length)
  key = jax.random.PRNGKey(seed)
  start = time.perf_counter()
  compiled = {} if compiled is None else compiled
  for _, inputs in batches:
    if inputs.shape not in compiled:
      compiled[inputs.shape] = translate.lower(params, inputs, key, *search_args).compile()
  compile_seconds = time.perf_counter() - start

  results: list = [None] * len(texts)
  output_tokens, start, done = 0, time.perf_counter(), len(fitted.refused)
  for index, (chunk, inputs) in enumerate(batches):
    rng = jax.random.fold_in(key, index)
    tokens, scores = compiled[inputs.shape](params, inputs, rng, *search_args)
    tokens, scores = _host(tokens), _host(scores)
    for row, i in enumerate(chunk):
      results[i] = (tokens[row], scores[row])
      output_tokens += int(np.sum(tokens[row] != 0))
    done += len(chunk)
    if progress is not None:
      progress(done)
  if progress is not None and not batches:
    progress(done)
  seconds = time.perf_counter() - start
  return results, dict(output_tokens=output_tokens, seconds=seconds,
                       compile_seconds=compile_seconds,
                       tokens_per_s=output_tokens / max(seconds, 1e-9),
                       refused=fitted.refused, truncated=fitted.truncated)


def _text(tokenizer, tokens: np.ndarray) -> str:
  return tokenizer.decode([int(t) for t in tokens if t != 0])


def translate_texts(translate: Callable, params, tokenizer, texts: Sequence[str], *,
                    batch_size: int = 32, max_input_length: int | None = None,
                    truncate: bool = False, seed: int = 0,
                    progress: Callable[[int], None] | None = None, search_args: tuple = (),
                    compiled: dict | None = None) -> tuple[list[str], dict]:
  """Translates `texts` with translate(params, inputs, rng) (a `make_translate_fn` result, possibly
  run on a mesh); returns (translations, stats).

  max_input_length: the longest source decoded (`source_limit`: None, every source whole, unless
  the positions are a learned table); a longer one is refused (translation '') or, with truncate,
  cut to it (EOS kept at the end).
  batch_size: rows of every batch (a multiple of the mesh's batch shards when the model is sharded).
  seed: the sampling key of batch i is fold_in(PRNGKey(seed), i) (ignored by beam search).
  progress: called with the number of texts done so far (the refused ones included), after each
  batch.
  search_args: translate's arguments after rng (make_translate_fn's alpha). compiled: the
  compiled translate of each input shape, filled here; a caller that translates again with the
  same translate, parameters and argument types (another alpha) passes the same dict and compiles
  nothing again (compile_seconds then counts only what it compiled).
  stats: output_tokens, seconds (decoding only), compile_seconds (one compile per padded input
  length, done ahead of the timed loop so tokens_per_s is a steady-state figure), tokens_per_s,
  refused and truncated (the indices of the texts refused and cut, ascending).
  """
  results, stats = _search(translate, params, tokenizer, texts, batch_size=batch_size,
                           max_input_length=max_input_length, truncate=truncate, seed=seed,
                           progress=progress, search_args=search_args, compiled=compiled)
  return ["" if r is None else _text(tokenizer, r[0]) for r in results], stats


def n_best_texts(translate: Callable, params, tokenizer, texts: Sequence[str], *,
                 batch_size: int = 32, max_input_length: int | None = None,
                 truncate: bool = False) -> tuple[list[list[tuple[str, float]]], dict]:
  """translate_texts for a search that returns several hypotheses (make_translate_fn's n_best:
  tokens [b, n, length], scores [b, n]): each text's [(translation, score)], best first, without
  the slots the search left empty (score -inf), [] for a refused text; and the stats."""
  results, stats = _search(translate, params, tokenizer, texts, batch_size=batch_size,
                           max_input_length=max_input_length, truncate=truncate, seed=0,
                           progress=None)
  return [[] if r is None else
          [(_text(tokenizer, t), float(s)) for t, s in zip(*r) if np.isfinite(s)]
          for r in results], stats


def score_texts(score: Callable, params, tokenizer, pairs: Sequence[tuple[str, str]], *,
                batch_size: int = 32, max_length: int | None = None, truncate: bool = False
                ) -> tuple[list[tuple[float, int] | None], dict]:
  """(log P(target | source), |target| in tokens with its EOS) of each (source, target) pair, by
  score(params, inputs, targets) (a `tfm.decode.score.make_score_fn` result, possibly on a mesh),
  and the stats {refused, truncated} (indices, ascending).

  max_length: the positions a source or target may take (`table_rows`: None, any, unless the
  positions are a learned table). A pair whose target is longer is refused (None): a cut target
  would not be the one given; one whose source is longer is refused too, or with truncate has
  its source cut to max_length pieces (EOS kept)."""
  sources = fit_texts(tokenizer, [s for s, _ in pairs], max_length, truncate)
  targets = fit_texts(tokenizer, [t for _, t in pairs], max_length, False)
  refused = sorted(set(sources.refused) | set(targets.refused))
  kept = [None if i in refused else ids for i, ids in enumerate(sources.ids)]
  out: list = [None] * len(pairs)
  for chunk, inputs in _batches(kept, batch_size, max_length):
    length = _padded_length(max(len(targets.ids[i]) for i in chunk), max_length)
    padded = np.zeros((batch_size, length), np.int32)
    for row, i in enumerate(chunk):
      padded[row, :len(targets.ids[i])] = targets.ids[i]
    logp, lengths = score(params, inputs, padded)
    logp, lengths = _host(logp), _host(lengths)
    for row, i in enumerate(chunk):
      out[i] = (float(logp[row]), int(lengths[row]))
  return out, dict(refused=refused,
                   truncated=[i for i in sources.truncated if i not in set(refused)])
