"""Continuing prompts with a decoder-only language model: the prompt through the cache, then
sampling.

A decoder-only model reads its text after the start token 0 (`Transformer.decode` shifts its
targets right), so a prompt of pieces p_1 .. p_n is the decoder input s = [0, p_1, .., p_n]. The
prompt goes into the decoder's key/value cache in one causal pass over the batch's prompts
(`prefill`: s[:-1], n tokens a row, right-padded to the batch's P; `Transformer.prefill`), and
s[-1] (p_n; 0 for an empty prompt) is the first input of the sampling loop, one token a step,
whose first output is the first new token. The pass leaves the cache as n one-token steps would
(to float rounding), at the cost of one decoder call instead of one a token. The new tokens
g_1 .. g_m then sit at positions n + 1 .. n + m of the model's sequence, and the inputs at
0 .. n + m - 1: a model with learned positions (model.max_length of them) takes
n + m <= max_length (`new_token_limit`).

Two ways to run it, with the same samples (`tfm.decode.sampling.choose_tokens`, one key per row):
  * `Generator.generate`: prompts in a batch, the whole continuation in one compiled loop
    (`tfm.decode.sampling.sample` with start_id = each row's s[-1]);
  * `Generator.start` + `Generator.advance`: one step per call, so the caller (`stream_tokens`) has
    every token on the host as soon as it is drawn and can print it.
Row r samples step t with fold_in(keys[r], t), so a prompt's continuation depends on its key alone,
not on the batch it ran in (up to the float rounding of batched products).

`text_deltas` turns the tokens into text as they come: the new suffix of decode(prompt + tokens so
far), so SentencePiece's word-start spaces come out where the whole decoded text has them.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tfm.decode.common import PyTree
from tfm.decode.sampling import DecodeResult, choose_tokens, drop_pad, sample
from tfm.decode.translate import cached_step, decoding_twin
from tfm.model.transformer import Transformer

LENGTH_STEP = 16  # prompts are padded to a multiple of this: a few shapes, a few compiles


def prefill(model: Transformer, params, cache: PyTree, fed: jax.Array,
            counts: jax.Array) -> PyTree:
  """Row r's first counts[r] tokens of fed int32[rows, P] into a fresh decode cache (of
  `Transformer.init_cache`, at least P positions) in one pass of the decoder
  (`Transformer.prefill`); returns the cache, its index at counts. The logits of the pass are
  not used (the sampling loop's first step feeds s[-1])."""
  _, state = model.apply({"params": params, "cache": cache}, fed, counts,
                         method=Transformer.prefill, mutable=["cache"])
  return state["cache"]


class PromptBatch(NamedTuple):
  """Prompts as decoder inputs: fed int32[rows, P] (row r: s[:-1], padded with 0), counts
  int32[rows] (n = len(s) - 1), last int32[rows] (s[-1]). Rows past the prompts are empty
  prompts."""

  fed: np.ndarray
  counts: np.ndarray
  last: np.ndarray


def prompt_batch(prompts: Sequence[Sequence[int]], rows: int) -> PromptBatch:
  """prompts (piece ids, no EOS) -> a PromptBatch of `rows` rows (>= len(prompts)), P the longest
  prompt rounded up to a multiple of LENGTH_STEP."""
  if rows < len(prompts):
    raise ValueError(f"rows={rows}: fewer than the {len(prompts)} prompts")
  longest = max((len(p) for p in prompts), default=0)
  length = max(1, -(-longest // LENGTH_STEP)) * LENGTH_STEP
  fed = np.zeros((rows, length), np.int32)
  counts = np.zeros((rows,), np.int32)
  last = np.zeros((rows,), np.int32)
  for r, ids in enumerate(prompts):
    s = [0] + [int(i) for i in ids]
    fed[r, :len(s) - 1] = s[:-1]
    counts[r], last[r] = len(s) - 1, s[-1]
  return PromptBatch(fed, counts, last)


def row_keys(seed: int, first: int, rows: int) -> jax.Array:
  """The keys of prompts first .. first + rows - 1: fold_in(PRNGKey(seed), i), uint32[rows, 2]."""
  base = jax.random.PRNGKey(seed)
  return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(first, first + rows))


def new_token_limit(model_cfg, prompt_length: int, max_new_tokens: int) -> int:
  """How many tokens a prompt of prompt_length pieces may get: max_new_tokens, or fewer where the
  model has learned positions (model.max_length of them: the inputs take positions 0 ..
  prompt_length + m - 1). Raises a one-line ValueError when the prompt leaves no room at all."""
  if model_cfg.positions != "learned":
    return max_new_tokens
  room = model_cfg.max_length - prompt_length
  if room < 1:
    raise ValueError(f"a prompt of {prompt_length} pieces: with model.positions='learned' this "
                     f"model takes at most model.max_length={model_cfg.max_length} positions, the "
                     f"start token and the prompt less one piece for the first new token; expected "
                     f"at most {model_cfg.max_length - 1} pieces")
  return min(max_new_tokens, room)


class Generator(NamedTuple):
  """The jitted functions of `make_generator` (see the module docstring).

  generate(params, fed, counts, last, keys, limits int32[rows]) -> DecodeResult (sequences
    int32[rows, max_new_tokens]: each row's new tokens, EOS, then 0).
  start(params, fed, counts) -> cache holding the prompts (P + max_new_tokens positions).
  prepare(params) -> the parameters `advance` takes: a scanned model's unstacked
    (`decoding_twin`) once, not at every step; any other model's as they are.
  advance(prepared, cache, previous int32[rows], step int32[], keys) -> (tokens int32[rows],
    cache): the tokens of step `step` (0 = the first new token, previous = last); the cache is
    donated.
  """

  generate: Callable
  start: Callable
  prepare: Callable
  advance: Callable


def make_generator(model: Transformer, *, max_new_tokens: int, temperature: float = 1.0,
                   top_k: int = 0, top_p: float = 1.0, eos_id: int = 1,
                   pad_id: int | None = 0) -> Generator:
  """The Generator of a decoder-only Transformer: continuations of at most max_new_tokens tokens
  (EOS included), each drawn from softmax(process_logits(logits)) (temperature, top_k, top_p as
  in `tfm.decode.sampling`; the Python temperature 0 is greedy: the argmax). pad_id is never
  generated."""
  if getattr(model.cfg, "architecture", None) != "decoder_only":
    raise ValueError(f"model.architecture={model.cfg.architecture!r}: generating continues text "
                     "with a 'decoder_only' model")
  if max_new_tokens < 1:
    raise ValueError(f"max_new_tokens: expected >= 1, got {max_new_tokens}")
  scanned = getattr(model.cfg, "scan_layers", False)
  model, unstack = decoding_twin(model)
  settings = dict(temperature=temperature, top_k=top_k, top_p=top_p)

  def start(params, fed, counts):
    params = unstack(params)
    _, state = model.apply({"params": params}, None, None, fed.shape[0],
                           fed.shape[1] + max_new_tokens, method=Transformer.init_cache,
                           mutable=["cache"])
    return prefill(model, params, state["cache"], fed, counts)

  def generate(params, fed, counts, last, keys, limits):
    cache = start(params, fed, counts)
    return sample(cached_step(model, unstack(params)), cache, keys,
                  max_decode_len=max_new_tokens, max_lengths=limits, eos_id=eos_id,
                  start_id=last, pad_id=pad_id, **settings)

  def advance(prepared, cache, previous, step, keys):
    logits, cache = cached_step(model, prepared)(previous[:, None], cache)
    return choose_tokens(drop_pad(logits, pad_id), step, keys, **settings), cache

  return Generator(generate=jax.jit(generate), start=jax.jit(start),
                   prepare=jax.jit(unstack) if scanned else unstack,
                   advance=jax.jit(advance, donate_argnums=(1,)))


def stream_tokens(generator: Generator, params, prompt: Sequence[int], *, key: jax.Array,
                  limit: int, rows: int = 1, eos_id: int = 1) -> Iterator[int]:
  """One prompt's new tokens, each yielded as soon as it is drawn: at most `limit` of them, the
  last EOS if the model ended the text (then nothing follows). key: the prompt's key
  (`row_keys`); rows: the batch the functions run (a multiple of the mesh's batch shards; the
  rows past the first are empty prompts whose tokens are dropped)."""
  batch = prompt_batch([prompt], rows)
  keys = jnp.broadcast_to(key, (rows,) + key.shape)
  cache = generator.start(params, batch.fed, batch.counts)
  prepared = generator.prepare(params)
  previous = jnp.asarray(batch.last)
  for step in range(limit):
    tokens, cache = generator.advance(prepared, cache, previous, jnp.asarray(step, jnp.int32), keys)
    token = int(np.asarray(jax.device_get(tokens))[0])
    yield token
    if token == eos_id:
      return
    previous = tokens


def continuation(tokenizer, prompt: Sequence[int], tokens: Iterable[int]) -> str:
  """The text the tokens add to the prompt: decode(prompt + tokens) less decode(prompt) in front
  (tokens stop at EOS; a SentencePiece word start shows as its space). Where decoding the
  prompt alone gives something else than the start of the whole (it should not), the tokens'
  own decoding."""
  tokens = [int(t) for t in tokens]
  if tokenizer.eos_id in tokens:
    tokens = tokens[:tokens.index(tokenizer.eos_id)]
  head, whole = tokenizer.decode(list(prompt)), tokenizer.decode(list(prompt) + tokens)
  return whole[len(head):] if whole.startswith(head) else tokenizer.decode(tokens)


def text_deltas(tokenizer, prompt: Sequence[int], tokens: Iterable[int]) -> Iterator[str]:
  """The continuation's text piece by piece as tokens arrive: after each token, what
  decode(prompt + tokens so far) adds to the text shown so far. A text that ends in U+FFFD (a
  character whose bytes have not all come: byte-fallback pieces) or that does not extend the
  shown text waits for the next token; the last delta is the rest of `continuation`'s text, so
  the deltas join to it (SentencePiece's decoding of a longer prefix extends a shorter one's, held
  back U+FFFD aside)."""
  prompt = list(prompt)
  head = tokenizer.decode(prompt)
  ids, shown = list(prompt), head
  for token in tokens:
    if int(token) == tokenizer.eos_id:
      break
    ids.append(int(token))
    text = tokenizer.decode(ids)
    if text.startswith(shown) and not text.endswith("\ufffd") and len(text) > len(shown):
      yield text[len(shown):]
      shown = text
  rest = continuation(tokenizer, prompt, ids[len(prompt):])[len(shown) - len(head):]
  if rest:
    yield rest
