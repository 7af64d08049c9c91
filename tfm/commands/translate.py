"""`tfm translate --workdir DIR [--input FILE] [--average N] [--beam_size K | --sample ...]`.

Translates lines (stdin by default) with beam search (the workdir's eval settings), or samples one
translation per line with --sample --temperature T [--top_k K] [--top_p P] [--seed S].
"""

from __future__ import annotations

import sys

from absl import flags
from etils import epath

from tfm.commands import (UsageError, announce_backend, define_trained_flags, refuse_config,
                           require_workdir)


def define_flags(fv: flags.FlagValues):
  define_trained_flags(fv)
  flags.DEFINE_string("input", None, "a UTF-8 file with one sentence per line (default: stdin)",
                      flag_values=fv)
  flags.DEFINE_integer("beam_size", None, "override eval.beam_size (1 = greedy)", lower_bound=1,
                       flag_values=fv)
  flags.DEFINE_boolean("sample", False, "sample instead of searching", flag_values=fv)
  flags.DEFINE_float("temperature", 1.0, "with --sample: softmax temperature (> 0)", flag_values=fv)
  flags.DEFINE_integer("top_k", 0, "with --sample: keep the K most likely tokens (0 = all)",
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_float("top_p", 1.0, "with --sample: nucleus mass in (0, 1] (1 = all)", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "with --sample: the random seed", flag_values=fv)


def _check_flags(fv: flags.FlagValues):
  if fv.sample:
    if not fv.temperature > 0:
      raise UsageError(f"--temperature: expected a number > 0, got {fv.temperature}")
    if not 0 < fv.top_p <= 1:
      raise UsageError(f"--top_p: expected a number in (0, 1], got {fv.top_p}")
    if fv["beam_size"].present:
      raise UsageError("--beam_size applies to search, not with --sample")
  elif any(fv[name].present for name in ("temperature", "top_k", "top_p", "seed")):
    raise UsageError("--temperature, --top_k, --top_p and --seed apply with --sample only")


def _lines(text: str) -> list[str]:
  """One input per '\n' (or '\r\n'), as line-aligned corpora count them: str.splitlines() would
  also cut a line at U+2028, form feeds and the like, and the outputs would lose their alignment."""
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def run(fv: flags.FlagValues, config):
  refuse_config(config)
  require_workdir(fv)
  _check_flags(fv)
  # pylint: disable=import-outside-toplevel
  from tfm.decode.text import translate_texts
  from tfm.eval.restore import load_trained

  if fv.input:
    try:
      lines = _lines(epath.Path(fv.input).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
      raise ValueError(f"--input {fv.input}: cannot read it as UTF-8 text ({e})") from None
  else:
    stdin = getattr(sys.stdin, "buffer", None)  # bytes, so bad UTF-8 is an error, not a crash
    try:
      text = stdin.read().decode("utf-8") if stdin is not None else sys.stdin.read()
    except UnicodeDecodeError as e:
      raise ValueError(f"stdin: not UTF-8 text ({e})") from None
    lines = _lines(text)
  t = load_trained(fv.workdir, fv.average)
  announce_backend(t.note)
  exp = t.experiment
  if fv.sample:
    translate = exp.translate_fn(temperature=fv.temperature, top_k=fv.top_k, top_p=fv.top_p,
                                 eos_id=t.tokenizer.eos_id)
  else:
    translate = exp.translate_fn(beam_size=fv.beam_size, eos_id=t.tokenizer.eos_id)
  outputs, stats = translate_texts(translate, t.params, t.tokenizer, lines,
                                   batch_size=exp.decode_rows(min(t.config.eval.batch_size,
                                                                  len(lines))),
                                   max_input_length=t.config.data.max_length, seed=fv.seed)
  for line in outputs:
    print(line)
  print(f"tfm translate: {len(lines)} lines, {stats['tokens_per_s']:.1f} output tokens/s",
        file=sys.stderr)
