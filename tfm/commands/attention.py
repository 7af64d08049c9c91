"""`tfm attention --workdir DIR --text "..." [--layer L] [--heads 1,2] [--kinds ...] [--out FILE.png]`.

Translates one sentence with the workdir's model (beam search as `tfm translate`; --beam_size 1 is
greedy), runs a teacher-forced forward pass over source + translation and draws the model's own
attention weights of one layer (default: the last), one panel per head, a row per kind: encoder
self-attention, decoder self-attention, encoder-decoder attention (tfm/eval/sentence_attention.py,
tfm/figures/attention.py). Layers and heads count from 1, as the paper's "layer 5 of 6" does.
The weights come from the einsum attention kernel, whatever model.attention_impl says: the fused
kernels never expose the probabilities (tfm/model/attention.py). A workdir it cannot write
(read-only) is said in one line; --out saves the figure elsewhere.
"""

from __future__ import annotations

from absl import flags
from etils import epath

from tfm.commands import (UsageError, announce_backend, define_trained_flags, refuse_config,
                           require_workdir, save)

KINDS = ("encoder", "decoder", "cross")


def define_flags(fv: flags.FlagValues):
  define_trained_flags(fv)
  flags.DEFINE_string("text", None, "the source sentence", flag_values=fv)
  flags.DEFINE_integer("layer", None, "the layer to draw, 1..N (default N, the last)", flag_values=fv)
  flags.DEFINE_list("heads", None, "the heads to draw, 1..num_heads (default all)", flag_values=fv)
  flags.DEFINE_list("kinds", list(KINDS), "the kinds of attention, one row each: encoder (self), "
                    "decoder (self), cross (encoder-decoder)", flag_values=fv)
  flags.DEFINE_integer("beam_size", None, "override eval.beam_size (1 = greedy)", lower_bound=1,
                       flag_values=fv)
  flags.DEFINE_string("out", None, "the PNG to write (default: WORKDIR/attention.png)",
                      flag_values=fv)


def _check_flags(fv: flags.FlagValues):
  require_workdir(fv)
  if not (fv.text or "").strip():
    raise UsageError("--text: expected a sentence to translate, got an empty one")
  unknown = [k for k in fv.kinds if k not in KINDS]
  if unknown or not fv.kinds:
    raise UsageError(f"--kinds: expected some of {', '.join(KINDS)}, got {','.join(fv.kinds)!r}")


def _layers(fv, cfg) -> dict[str, tuple[int, int]]:
  """{kind: (0-based layer index, layers in its stack)} of --layer, checked against every drawn
  kind's stack (default: each stack's last layer)."""
  counts = {"encoder": cfg.num_encoder_layers, "decoder": cfg.num_decoder_layers,
            "cross": cfg.num_decoder_layers}
  n = min(counts[k] for k in fv.kinds)
  if fv.layer is not None and not 1 <= fv.layer <= n:
    raise UsageError(f"--layer {fv.layer}: expected 1..{n} (the model has "
                     f"{cfg.num_encoder_layers} encoder and {cfg.num_decoder_layers} decoder layers)")
  return {k: ((counts[k] if fv.layer is None else fv.layer) - 1, counts[k]) for k in fv.kinds}


def _heads(fv, num_heads: int) -> list[int]:
  """The 1-based heads of --heads, checked."""
  if fv.heads is None:
    return list(range(1, num_heads + 1))
  try:
    heads = [int(h) for h in fv.heads]
  except ValueError:
    heads = []
  if not heads or any(not 1 <= h <= num_heads for h in heads) or len(set(heads)) < len(heads):
    raise UsageError(f"--heads {','.join(fv.heads)}: expected distinct heads in 1..{num_heads}")
  return heads


def run(fv: flags.FlagValues, config):
  refuse_config(config)
  _check_flags(fv)
  # pylint: disable=import-outside-toplevel
  from tfm.eval.restore import load_trained, read_workdir_config
  from tfm.eval.sentence_attention import sentence_attention
  from tfm.figures import attention as figure
  from tfm.model.attention_weights import TITLES

  cfg = read_workdir_config(fv.workdir).model
  if cfg.architecture != "encoder_decoder":
    raise ValueError(f"{fv.workdir}: model.architecture={cfg.architecture!r}; tfm attention "
                     "translates, so it expects 'encoder_decoder'")
  layers, heads = _layers(fv, cfg), _heads(fv, cfg.num_heads)
  t = load_trained(fv.workdir, fv.average, checkpoint=fv.checkpoint)
  announce_backend(t.note)
  result = sentence_attention(t, fv.text, fv.beam_size)
  rows = []
  for kind, (layer, count) in layers.items():
    title = f"{TITLES[kind]} (layer {layer + 1} of {count})"
    rows.append(figure.Row(title, result.weights[kind][layer][[h - 1 for h in heads]],
                           *result.labels(kind)))
  title = f"{fv.text.strip()}  ->  {result.translation or '(an empty translation)'}"
  out = fv.out or epath.Path(fv.workdir) / "attention.png"
  if not save("figure", out, figure.png(rows, heads, title), given=fv.out is not None):
    return 1  # the figure is all this command makes
  print(f"written: {out}")
  return 0
