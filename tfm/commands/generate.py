"""`tfm generate --workdir DIR [--prompt TEXT ...] [--max_new_tokens N] [--temperature T]
[--top_k K] [--top_p P] [--greedy] [--seed S] [--checkpoint last|best|ema] [--average N]
[--nostream [--batch_size B]] [--noecho]`.

Continues each prompt (--prompt, repeatable, or stdin, one a line) with the language model (task
lm, a decoder-only model) in DIR: a line per prompt on stdout, the prompt then its continuation,
the continuation's text written as each token is drawn. A continuation ends at the model's EOS or
after --max_new_tokens tokens (fewer where a model with learned positions runs out of them).
Prompt i (counting from 0) samples with the key fold_in(PRNGKey(--seed), i), so a seed gives the
same texts streamed or batched (--nostream: the prompts in batches, each batch in one compiled
loop, printed as a batch ends).
"""

from __future__ import annotations

import os
import sys
import time

from absl import flags

from tfm import tasks
from tfm.commands import (UsageError, announce_backend, define_trained_flags, refuse_config,
                           require_workdir, text_lines)

NOTES = ("A prompt is SentencePiece-encoded without its EOS and follows the start token, as the "
         "model read its training text; an empty prompt samples a text from the start. Prompts "
         "from a terminal are continued as they are typed; piped prompts are read and checked "
         "first. Statistics go to stderr.")


def define_flags(fv: flags.FlagValues):
  define_trained_flags(fv)
  flags.DEFINE_multi_string("prompt", [], "a text to continue (repeat the flag for several; "
                            "default: stdin, one a line)", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", 100, "at most this many new tokens a prompt (EOS "
                       "included)", lower_bound=1, flag_values=fv)
  flags.DEFINE_float("temperature", 1.0, "softmax temperature (> 0)", flag_values=fv)
  flags.DEFINE_integer("top_k", 0, "keep the K most likely tokens (0 = all)", lower_bound=0,
                       flag_values=fv)
  flags.DEFINE_float("top_p", 1.0, "nucleus mass in (0, 1] (1 = all)", flag_values=fv)
  flags.DEFINE_boolean("greedy", False, "the most likely token at every step (temperature 0)",
                       flag_values=fv)
  flags.DEFINE_integer("seed", 0, "the random seed of the samples", flag_values=fv)
  flags.DEFINE_boolean("stream", True, "write each token's text as it is drawn, one prompt at a "
                       "time; --nostream runs the prompts in batches", flag_values=fv)
  flags.DEFINE_integer("batch_size", None, "with --nostream: prompts a batch (default "
                       "eval.batch_size)", lower_bound=1, flag_values=fv)
  flags.DEFINE_boolean("echo", True, "print each prompt before its continuation", flag_values=fv)


def _check_flags(fv: flags.FlagValues):
  if fv.greedy:
    given = [f"--{n}" for n in ("temperature", "top_k", "top_p", "seed") if fv[n].present]
    if given:
      raise UsageError(f"--greedy takes the most likely token; {', '.join(given)} appl"
                       f"{'ies' if len(given) == 1 else 'y'} to sampling")
  if not fv.temperature > 0 or fv.temperature == float("inf"):
    raise UsageError(f"--temperature: expected a number > 0 (--greedy for the argmax), got "
                     f"{fv.temperature}")
  if not 0 < fv.top_p <= 1:
    raise UsageError(f"--top_p: expected a number in (0, 1], got {fv.top_p}")
  if fv.stream and fv.batch_size is not None:
    raise UsageError("--batch_size applies with --nostream (streaming runs one prompt at a time)")


def _refuse_non_lm(workdir: str, config) -> None:
  """One line for a workdir whose model does not continue text (before anything is loaded)."""
  task = tasks.get(config.task)
  if not task.generates:
    raise ValueError(f"--workdir={workdir}: tfm generate continues text with a language model "
                     f"(task='lm', model.architecture='decoder_only'); this run's config.task is "
                     f"{config.task!r} ({task.not_generating()})")


def _stdin_prompts(interactive: bool):
  """The prompts of stdin: read as they come from a terminal (a prompt refused there is said on
  stderr and the next line is read), else all of it first (UTF-8)."""
  if interactive:
    return (line.rstrip("\r\n") for line in sys.stdin)
  stdin = getattr(sys.stdin, "buffer", None)  # bytes, so bad UTF-8 is an error, not a crash
  try:
    text = stdin.read().decode("utf-8") if stdin is not None else sys.stdin.read()
  except UnicodeDecodeError as e:
    raise ValueError(f"stdin: not UTF-8 text ({e})") from None
  return text_lines(text)


class _Prompts:
  """Encodes prompts and checks them against the model's positions, each named by its number."""

  def __init__(self, tokenizer, model_cfg, max_new_tokens: int):
    self.tokenizer, self.model_cfg, self.max_new_tokens = tokenizer, model_cfg, max_new_tokens
    self.notes: dict[int, str] = {}  # by prompt number (a prompt is encoded to check it first)

  def encode(self, number: int, text: str) -> tuple[list[int], int]:
    """(the prompt's piece ids without EOS, its new-token limit)."""
    # pylint: disable=import-outside-toplevel
    from tfm.decode.generate import new_token_limit
    ids = self.tokenizer.encode(text)[:-1]
    try:
      limit = new_token_limit(self.model_cfg, len(ids), self.max_new_tokens)
    except ValueError as e:
      raise ValueError(f"prompt {number}: {e}") from None
    if limit < self.max_new_tokens:
      self.notes[number] = (f"prompt {number}: at most {limit} new tokens (model.max_length="
                            f"{self.model_cfg.max_length} learned positions)")
    return ids, limit


def _recorded(tokens, into: list):
  """tokens, each also appended to `into` as it passes (the stream's count of new tokens)."""
  for token in tokens:
    into.append(token)
    yield token


def _write(text: str) -> None:
  sys.stdout.write(text)
  sys.stdout.flush()


def _streamed(fv, t, generator, texts, prompts: _Prompts) -> tuple[int, int]:
  """Each prompt's line, its continuation written token by token; (prompts, new tokens)."""
  # pylint: disable=import-outside-toplevel
  from tfm.decode.generate import row_keys, stream_tokens, text_deltas
  rows = t.experiment.decode_rows(1)
  count = new_tokens = 0
  for number, text in enumerate(texts):
    try:
      ids, limit = prompts.encode(number, text)
    except ValueError as e:  # checked before loading unless typed: then the next prompt is read
      print(f"tfm generate: error: {e}", file=sys.stderr)
      continue
    if fv.echo:
      _write(text)
    drawn: list[int] = []
    tokens = stream_tokens(generator, t.params, ids, key=row_keys(fv.seed, number, 1)[0],
                           limit=limit, rows=rows, eos_id=t.tokenizer.eos_id)
    for delta in text_deltas(t.tokenizer, ids, _recorded(tokens, drawn)):
      _write(delta)
    _write("\n")
    count, new_tokens = count + 1, new_tokens + len(drawn)
  return count, new_tokens


def _batched(fv, t, generator, texts, encoded) -> tuple[int, int]:
  """The prompts in batches of --batch_size, each continued in one loop and printed when it ends;
  (prompts, new tokens)."""
  # pylint: disable=import-outside-toplevel
  import numpy as np
  from tfm.decode.generate import continuation, prompt_batch, row_keys
  rows = t.experiment.decode_rows(min(fv.batch_size or t.config.eval.batch_size,
                                      max(len(texts), 1)))
  new_tokens = 0
  for first in range(0, len(texts), rows):
    chunk = encoded[first:first + rows]
    batch = prompt_batch([ids for ids, _ in chunk], rows)
    limits = np.ones((rows,), np.int32)  # rows past the prompts: one step
    limits[:len(chunk)] = [limit for _, limit in chunk]
    result = generator.generate(t.params, batch.fed, batch.counts, batch.last,
                                row_keys(fv.seed, first, rows), limits)
    sequences = np.asarray(result.sequences)
    for row, (ids, _) in enumerate(chunk):
      made = [int(x) for x in sequences[row] if x != 0]
      _write((texts[first + row] if fv.echo else "") + continuation(t.tokenizer, ids, made) + "\n")
      new_tokens += len(made)
  return len(texts), new_tokens


def run(fv: flags.FlagValues, config):
  refuse_config(config)
  require_workdir(fv)
  _check_flags(fv)
  # pylint: disable=import-outside-toplevel
  from tfm.data import vocabulary
  from tfm.decode.generate import new_token_limit
  from tfm.eval.restore import load_trained, read_workdir_config

  workdir_config = read_workdir_config(fv.workdir)
  _refuse_non_lm(fv.workdir, workdir_config)
  tokenizer = vocabulary.get_tokenizer(workdir_config.data, fv.workdir, train=False,
                                          task=tasks.get(workdir_config.task))
  prompts = _Prompts(tokenizer, workdir_config.model, fv.max_new_tokens)
  interactive = not fv.prompt and fv.stream and sys.stdin.isatty()
  texts = fv.prompt or _stdin_prompts(interactive)
  if not interactive:  # every prompt checked before the model is loaded
    texts = list(texts)
    if not texts:  # (an empty line is a prompt: a text from the start)
      raise ValueError("stdin: no prompts (expected one a line, or --prompt TEXT)")
    for number, text in enumerate(texts):
      prompts.encode(number, text)
  t = load_trained(fv.workdir, fv.average, checkpoint=fv.checkpoint)
  announce_backend(t.note)
  exp = t.experiment
  # The decode cache holds the longest prompt's positions and this many more: with learned
  # positions no prompt gets more than model.max_length new tokens, so the cache needs no more.
  most = new_token_limit(t.config.model, 0, fv.max_new_tokens)
  generator = exp.generator(max_new_tokens=most,
                            temperature=0 if fv.greedy else fv.temperature, top_k=fv.top_k,
                            top_p=fv.top_p, eos_id=tokenizer.eos_id)
  start = time.perf_counter()
  try:
    if fv.stream:
      count, new_tokens = _streamed(fv, t, generator, texts, prompts)
    else:
      count, new_tokens = _batched(fv, t, generator, texts, [prompts.encode(i, text) for i, text
                                                             in enumerate(texts)])
  except BrokenPipeError:  # the reader went away (`| head`): stop quietly
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with
    return 0
  seconds = time.perf_counter() - start
  for note in prompts.notes.values():
    print(f"tfm generate: {note}", file=sys.stderr)
  print(f"tfm generate: {count} prompt{'' if count == 1 else 's'}, {new_tokens} new "
        f"token{'' if new_tokens == 1 else 's'} in "
        f"{seconds:.1f} s ({new_tokens / max(seconds, 1e-9):.1f} tokens/s, compiling included)",
        file=sys.stderr)
  return 0
