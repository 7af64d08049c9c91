"""`tfm translate --workdir DIR [--input FILE] [--average N]`: translate lines (stdin by default)."""

from __future__ import annotations

import sys

from absl import flags

from tfm.commands import define_trained_flags, require_workdir


def define_flags(fv: flags.FlagValues):
  define_trained_flags(fv)
  flags.DEFINE_string("input", None, "a UTF-8 file with one sentence per line (default: stdin)",
                      flag_values=fv)
  flags.DEFINE_integer("beam_size", None, "override eval.beam_size (1 = greedy)", flag_values=fv)


def run(fv: flags.FlagValues):
  require_workdir(fv)
  # pylint: disable=import-outside-toplevel
  from tfm.decode.text import translate_texts
  from tfm.eval.restore import load_trained

  if fv.input:
    try:
      with open(fv.input, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    except (OSError, UnicodeDecodeError) as e:
      raise ValueError(f"--input {fv.input}: cannot read it as UTF-8 text ({e})") from None
  else:
    lines = [line.rstrip("\n") for line in sys.stdin]
  t = load_trained(fv.workdir, fv.average)
  e = t.config.eval
  outputs, stats = translate_texts(t.model, t.params, t.tokenizer, lines,
                                   beam_size=fv.beam_size or e.beam_size, alpha=e.length_penalty,
                                   max_extra_length=e.max_extra_length,
                                   batch_size=min(e.batch_size, max(len(lines), 1)),
                                   max_input_length=t.config.data.max_length)
  for line in outputs:
    print(line)
  print(f"tfm translate: {len(lines)} lines, {stats['tokens_per_s']:.1f} output tokens/s",
        file=sys.stderr)
