"""Text in, text out: SentencePiece-encode sentences, batch them by length, decode, detokenize.

Inputs are padded to a multiple of 16 tokens (a few shapes, so the decoder compiles a few times)
and cut at `max_input_length`. Sentences are sorted by length into batches and returned in the
original order. Every batch has the same number of rows (empty rows finish at the first step).
On several hosts every host passes the same texts and gets every translation back.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from tfm.data.examples import fit_length

LENGTH_STEP = 16


def _padded_length(n: int, max_input_length: int) -> int:
  return min(max_input_length, -(-n // LENGTH_STEP) * LENGTH_STEP)


def _host(tokens: jax.Array) -> np.ndarray:
  """The whole [batch, length] array on this host. On several hosts the search's rows lie on every
  host's devices (the batch is split over the mesh), so each host gathers the others' rows."""
  if tokens.is_fully_addressable:
    return np.asarray(jax.device_get(tokens))
  return np.asarray(multihost_utils.process_allgather(tokens, tiled=True))


def _batches(encoded: Sequence[list[int]], batch_size: int, max_input_length: int
             ) -> list[tuple[list[int], np.ndarray]]:
  """(indices of `encoded`, inputs int32[batch_size, padded length]) batches, by length."""
  order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
  batches = []
  for first in range(0, len(order), batch_size):
    chunk = order[first:first + batch_size]
    length = _padded_length(max(len(encoded[i]) for i in chunk), max_input_length)
    inputs = np.zeros((batch_size, length), np.int32)  # a fixed batch size: one compile per length
    for row, i in enumerate(chunk):
      inputs[row, :len(encoded[i])] = encoded[i]
    batches.append((chunk, inputs))
  return batches


def _search(translate: Callable, params, tokenizer, texts: Sequence[str], *, batch_size: int,
            max_input_length: int, seed: int, progress: Callable[[int], None] | None,
            search_args: tuple = (), compiled: dict | None = None
            ) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
  """translate's (tokens, scores) of each text, on the host, in the texts' order, and the stats
  of translate_texts (output_tokens counts every hypothesis returned)."""
  encoded = [fit_length(tokenizer.encode(t), max_input_length, "truncate")[0] for t in texts]
  batches = _batches(encoded, batch_size, max_input_length)
  key = jax.random.PRNGKey(seed)
  start = time.perf_counter()
  compiled = {} if compiled is None else compiled
  for _, inputs in batches:
    if inputs.shape not in compiled:
      compiled[inputs.shape] = translate.lower(params, inputs, key, *search_args).compile()
  compile_seconds = time.perf_counter() - start

  results: list = [None] * len(texts)
  output_tokens, start, done = 0, time.perf_counter(), 0
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
  seconds = time.perf_counter() - start
  return results, dict(output_tokens=output_tokens, seconds=seconds,
                       compile_seconds=compile_seconds,
                       tokens_per_s=output_tokens / max(seconds, 1e-9))


def _text(tokenizer, tokens: np.ndarray) -> str:
  return tokenizer.decode([int(t) for t in tokens if t != 0])


def translate_texts(translate: Callable, params, tokenizer, texts: Sequence[str], *,
                    batch_size: int = 32, max_input_length: int = 256, seed: int = 0,
                    progress: Callable[[int], None] | None = None, search_args: tuple = (),
                    compiled: dict | None = None) -> tuple[list[str], dict]:
  """Translates `texts` with translate(params, inputs, rng) (a `make_translate_fn` result, possibly
  run on a mesh); returns (translations, stats).

  Inputs longer than max_input_length are truncated as in training (EOS kept at the end).
  batch_size: rows of every batch (a multiple of the mesh's batch shards when the model is sharded).
  seed: the sampling key of batch i is fold_in(PRNGKey(seed), i) (ignored by beam search).
  progress: called with the number of texts translated so far, after each batch.
  search_args: translate's arguments after rng (make_translate_fn's alpha). compiled: the
  compiled translate of each input shape, filled here; a caller that translates again with the
  same translate, parameters and argument types (another alpha) passes the same dict and compiles
  nothing again (compile_seconds then counts only what it compiled).
  stats: output_tokens, seconds (decoding only), compile_seconds (one compile per padded input
  length, done ahead of the timed loop so tokens_per_s is a steady-state figure) and tokens_per_s.
  """
  results, stats = _search(translate, params, tokenizer, texts, batch_size=batch_size,
                           max_input_length=max_input_length, seed=seed, progress=progress,
                           search_args=search_args, compiled=compiled)
  return [_text(tokenizer, tokens) for tokens, _ in results], stats


def n_best_texts(translate: Callable, params, tokenizer, texts: Sequence[str], *,
                 batch_size: int = 32, max_input_length: int = 256
                 ) -> tuple[list[list[tuple[str, float]]], dict]:
  """translate_texts for a search that returns several hypotheses (make_translate_fn's n_best:
  tokens [b, n, length], scores [b, n]): each text's [(translation, score)], best first, without
  the slots the search left empty (score -inf); and the stats."""
  results, stats = _search(translate, params, tokenizer, texts, batch_size=batch_size,
                           max_input_length=max_input_length, seed=0, progress=None)
  return [[(_text(tokenizer, t), float(s)) for t, s in zip(tokens, scores) if np.isfinite(s)]
          for tokens, scores in results], stats


def score_texts(score: Callable, params, tokenizer, pairs: Sequence[tuple[str, str]], *,
                batch_size: int = 32, max_input_length: int = 256) -> list[tuple[float, int]]:
  """(log P(target | source), |target| in tokens with its EOS) of each (source, target) pair, by
  score(params, inputs, targets) (a `tfm.decode.score.make_score_fn` result, possibly on a mesh).
  Sources are truncated as translate_texts truncates them; targets are scored whole (a cut target
  would not be the one given)."""
  sources = [fit_length(tokenizer.encode(s), max_input_length, "truncate")[0] for s, _ in pairs]
  targets = [tokenizer.encode(t) for _, t in pairs]
  out: list = [None] * len(pairs)
  for chunk, inputs in _batches(sources, batch_size, max_input_length):
    length = -(-max(len(targets[i]) for i in chunk) // LENGTH_STEP) * LENGTH_STEP
    padded = np.zeros((batch_size, length), np.int32)
    for row, i in enumerate(chunk):
      padded[row, :len(targets[i])] = targets[i]
    logp, lengths = score(params, inputs, padded)
    logp, lengths = _host(logp), _host(lengths)
    for row, i in enumerate(chunk):
      out[i] = (float(logp[row]), int(lengths[row]))
  return out
