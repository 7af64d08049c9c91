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


def translate_texts(translate: Callable, params, tokenizer, texts: Sequence[str], *,
                    batch_size: int = 32, max_input_length: int = 256, seed: int = 0,
                    progress: Callable[[int], None] | None = None) -> tuple[list[str], dict]:
  """Translates `texts` with translate(params, inputs, rng) (a `make_translate_fn` result, possibly
  run on a mesh); returns (translations, stats).

  Inputs longer than max_input_length are truncated as in training (EOS kept at the end).
  batch_size: rows of every batch (a multiple of the mesh's batch shards when the model is sharded).
  seed: the sampling key of batch i is fold_in(PRNGKey(seed), i) (ignored by beam search).
  progress: called with the number of texts translated so far, after each batch.
  stats: output_tokens, seconds (decoding only), compile_seconds (one compile per padded input
  length, done ahead of the timed loop so tokens_per_s is a steady-state figure) and tokens_per_s.
  """
  encoded = [fit_length(tokenizer.encode(t), max_input_length, "truncate")[0] for t in texts]
  order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
  batches = []
  for first in range(0, len(order), batch_size):
    chunk = order[first:first + batch_size]
    length = _padded_length(max(len(encoded[i]) for i in chunk), max_input_length)
    inputs = np.zeros((batch_size, length), np.int32)  # a fixed batch size: one compile per length
    for row, i in enumerate(chunk):
      inputs[row, :len(encoded[i])] = encoded[i]
    batches.append((chunk, inputs))

  key = jax.random.PRNGKey(seed)
  start = time.perf_counter()
  compiled = {}
  for _, inputs in batches:
    if inputs.shape not in compiled:
      compiled[inputs.shape] = translate.lower(params, inputs, key).compile()
  compile_seconds = time.perf_counter() - start

  outputs: list[str] = [""] * len(texts)
  output_tokens, start, done = 0, time.perf_counter(), 0
  for index, (chunk, inputs) in enumerate(batches):
    rng = jax.random.fold_in(key, index)
    tokens = _host(compiled[inputs.shape](params, inputs, rng)[0])
    for row, i in enumerate(chunk):
      ids = [int(t) for t in tokens[row] if t != 0]
      output_tokens += len(ids)
      outputs[i] = tokenizer.decode(ids)
    done += len(chunk)
    if progress is not None:
      progress(done)
  seconds = time.perf_counter() - start
  return outputs, dict(output_tokens=output_tokens, seconds=seconds,
                       compile_seconds=compile_seconds,
                       tokens_per_s=output_tokens / max(seconds, 1e-9))
