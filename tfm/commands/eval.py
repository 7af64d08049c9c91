"""`tfm eval --workdir DIR [--split NAME[,NAME...]] [--average N] [--limit K]`: BLEU and perplexity.

--split names what is evaluated: 'dev', 'test', or evaluation sets of the run's data.eval_sets;
without it, every evaluation set of data.eval_sets (by default only 'dev', the dataset's dev
split). Each is evaluated on its own and prints and writes
workdir/eval_<name>_<step>_avg<N>[_first<K>].json (step: the last checkpoint averaged; N: how many
were; K: --limit) with sacreBLEU (and its signature), the paper's tokenized BLEU, perplexity per
target token (no smoothing) and decoding speed. Another --average or --limit writes another file,
so no result overwrites a differently computed one. --out writes the JSON elsewhere (one set
only); a workdir it cannot write (read-only) gets the results printed and one line saying where
they could not be saved.
"""

from __future__ import annotations

import json
import re
import sys

from absl import flags
from etils import epath

from tfm.commands import (UsageError, announce_backend, define_trained_flags, refuse_config,
                          require_workdir, save)


SPLIT_HELP = ("what to evaluate, comma-separated: the workdir's dataset's dev or test split "
              "(data.dataset: for WMT'14 newstest2013 and newstest2014; for the Bible corpora "
              "their own held-out verses, ~1000 each) or evaluation sets of its data.eval_sets; "
              "default: every evaluation set (the dev split when data.eval_sets is not set)")
LIMIT_HELP = ("BLEU over only the first K sentence pairs (0 = all); BLEU and perplexity both cover "
              "at most the first data.eval_max_examples examples of the split when that is set")


def define_flags(fv: flags.FlagValues):
  define_trained_flags(fv)
  flags.DEFINE_string("split", None, SPLIT_HELP, flag_values=fv)
  flags.DEFINE_integer("limit", None, LIMIT_HELP, lower_bound=0, flag_values=fv)
  flags.DEFINE_string("out", None, "the JSON to write (default: WORKDIR/eval_<split>_<step>_avg<N>"
                      "[_first<K>].json)", flag_values=fv)


RESULT = re.compile(r"eval_(?P<split>[A-Za-z0-9][A-Za-z0-9_.-]*?)_(?P<step>\d+)_avg(?P<averaged>\d+)"
                    r"(?:_first(?P<limit>\d+))?\.json")


def result_name(split: str, steps: list[int], limit: int) -> str:
  """The file `tfm eval` writes for checkpoints `steps` averaged and BLEU over `limit` pairs."""
  return f"eval_{split}_{steps[-1]}_avg{len(steps)}" + (f"_first{limit}" if limit else "") + ".json"


def run(fv: flags.FlagValues, config):
  refuse_config(config)
  require_workdir(fv)
  # pylint: disable=import-outside-toplevel
  import jax
  from tfm.eval.dev_bleu import DevBleu
  from tfm.eval.dev_loss import DevLoss
  from tfm.eval.restore import load_trained, read_workdir_config
  from tfm.train import checkpoint as ckpt_lib
  from tfm.train.progress import Counter

  names = _eval_sets(fv, read_workdir_config(fv.workdir).data.eval_set_names)  # before loading
  t = load_trained(fv.workdir, fv.average)
  announce_backend(t.note)
  exp, c = t.experiment, t.config
  translate = exp.translate_fn(eos_id=t.tokenizer.eos_id)
  hosts = ckpt_lib.read_data_state(fv.workdir, t.steps[-1])["hosts"]  # every host's pipeline
  tokens = lambda key: sum(h.get("efficiency", {}).get(key, 0) for h in hosts) or None
  for name in names:
    losses = DevLoss(c.data, exp.data_source, t.tokenizer, exp.eval_step, exp.batch_sharding,
                     split=name, row_multiple=exp.batch_shards)(t.params)
    bleu = DevBleu(c.data, exp.data_source, t.tokenizer, translate,
                   batch_size=exp.decode_rows(c.eval.batch_size), split=name,
                   limit=fv.limit or 0, compounds=c.eval.compounds)
    progress = Counter(f"[eval] {name}: decoding", len(bleu.pairs), "sentences", sys.stderr)
    bleu = bleu(t.params, progress=progress if jax.process_index() == 0 else None)
    result = dict(split=name, checkpoints=t.steps, averaged=len(t.steps), **bleu,
                  perplexity=losses["perplexity"], nll=losses["nll"], loss=losses["loss"],
                  target_tokens=losses["tokens"], beam_size=c.eval.beam_size,
                  length_penalty=c.eval.length_penalty, max_extra_length=c.eval.max_extra_length,
                  train_source_tokens=tokens("real_inputs"),
                  train_target_tokens=tokens("real_targets"))
    path = fv.out or epath.Path(fv.workdir) / result_name(name, t.steps, fv.limit or 0)
    for key, value in result.items():
      print(f"{key:>22}: {value}")
    if jax.process_index() == 0 and save("results", path, json.dumps(result, indent=1) + "\n",
                                         given=fv.out is not None):
      print(f"{'written':>22}: {path}")


def _eval_sets(fv: flags.FlagValues, eval_sets: tuple[str, ...]) -> list[str]:
  """The names --split gives (default: the run's evaluation sets, data.eval_sets), each checked."""
  names = list(eval_sets) if fv.split is None else [
      n.strip() for n in fv.split.split(",") if n.strip()]
  known = ["dev", "test"] + [n for n in eval_sets if n not in ("dev", "test")]
  unknown = [n for n in names if n not in known]
  if not names or unknown:
    raise UsageError(f"--split: expected names of {', '.join(known)} (the splits dev and test, and "
                     f"the run's data.eval_sets), got {fv.split!r}")
  if fv.out is not None and len(names) > 1:
    raise UsageError(f"--out writes one result; --split names {len(names)} ({', '.join(names)}): "
                     "name one")
  return list(dict.fromkeys(names))
