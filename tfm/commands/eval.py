"""`tfm eval --workdir DIR [--split NAME[,NAME...]] [--average N | --checkpoint best|ema] [--limit K]
[--beam_size B,... --length_penalty A,... --max_extra_length E,...] [--length_buckets=E1,E2,..]
[--context_lengths=L1,L2,..]`: BLEU, chrF, TER and perplexity, and by source length; for a
language model (task lm / mlm) its perplexities, and by context length.

--split names what is evaluated: 'dev', 'test', or evaluation sets of the run's data.eval_sets;
without it, every evaluation set of data.eval_sets (by default only 'dev', the dataset's dev
split). Each is evaluated on its own and prints and writes
workdir/eval_<name>_<step>_avg<N>[_first<K>][_len<E1-E2-..>].json (step: the last checkpoint
averaged; N: how many were; K: --limit; E: the length buckets' edges) with sacreBLEU (and its
signature), the paper's tokenized BLEU, chrF and TER (sacreBLEU's, with signatures), perplexity
per target token (no smoothing) and decoding speed. Decoding settings other than the run's eval
section's add _beam<B>_lp<A>_extra<E> to the name, and --checkpoint=best (the run's best
checkpoint by train.best_metric) names it eval_<name>_best<step>..., --checkpoint=ema (the EMA of the
parameters, train.ema_decay) eval_<name>_ema<step>...: another --average, --limit,
checkpoint, search or bucketing writes another file, so no result overwrites a differently
computed one. Lists of decoding settings are a grid: the parameters are loaded and the perplexity
computed once, every point is decoded (greedy once whatever alpha; one compiled beam search of a
size and length for every alpha other than the run's own, which is the constant of dev BLEU's
search) and written, and a table shows the figures per point. With length buckets (the flag, else
eval.length_buckets) a result also holds `by_length`: perplexity and both BLEUs of every pair of
the set in each bucket of source length, beyond data.max_length too (tfm/eval/by_length.py).
What each figure covers is in the result: BLEU translates every source whole where the model's
positions allow it (all but a learned table, whose model.max_length rows hold sources of
model.max_length - max_extra_length pieces: a longer one is left out, or cut with --truncate,
which names the file ..._truncate.json), perplexity reads the pairs data.overlong keeps at
data.max_length, as in training; sentences, sentences_dropped, sentences_truncated,
perplexity_pairs, perplexity_dropped, perplexity_truncated and examples_skipped (empty or not
UTF-8) count them, and a `note` says in words what any figure left out or cut.
A language model's run (task 'lm' or 'mlm') has no translations: its evaluation is the dev loss,
the set's texts as one stream cut into rows of data.max_length (tfm/eval/dev_loss.py): perplexity
per piece, accuracy, and for lm the per-word perplexity (exp(NLL sum / whitespace words)); for mlm
perplexity and accuracy over the masked positions (masked with a fixed seed, the same every
evaluation); texts and texts_skipped count what it read. Decoding and BLEU flags (--beam_size,
--length_penalty, --max_extra_length, --limit, --length_buckets, --truncate) are refused there. --context_lengths=256,512 (lm only) also scores the set at
each context length, every piece once in rows of that many (a model trained on rows of
data.max_length, asked to extrapolate where its positions allow: learned positions stop at
model.max_length), and names the file ..._ctx256-512.json.
--out writes the JSON elsewhere (one set, one point); a workdir it cannot write (read-only) gets
the results printed and one line saying where they could not be saved. The files written are kept
with the run's MLflow / W&B run under eval/ (its train.trackers: tfm/train/trackers/__init__.py).
"""

from __future__ import annotations

import json
import os
import sys

from absl import flags
from etils import epath

from tfm import tasks
from tfm.commands import (UsageError, announce_backend, define_trained_flags, refuse_config,
                          require_workdir, save)
from tfm.commands.eval_files import result_name
from tfm.commands.eval_results import checkpoint_keys, print_result, record_written
from tfm.commands.eval_texts import context_lengths, evaluate_texts


SPLIT_HELP = ("what to evaluate, comma-separated: the workdir's dataset's dev or test split "
              "(data.dataset: for WMT'14 newstest2013 and newstest2014; for the Bible corpora "
              "their own held-out verses, ~1000 each) or evaluation sets of its data.eval_sets; "
              "default: every evaluation set (the dev split when data.eval_sets is not set)")
LIMIT_HELP = ("BLEU over only the first K sentence pairs (0 = all); BLEU and perplexity both cover "
              "at most the first data.eval_max_examples examples of the split when that is set")


GRID_HELP = ("a value or a comma-separated list (a grid over the decoding settings, every point "
             "decoded with the same parameters: a table of the dev figures at each point)")


def define_flags(fv: flags.FlagValues):
  define_trained_flags(fv)
  flags.DEFINE_string("split", None, SPLIT_HELP, flag_values=fv)
  flags.DEFINE_integer("limit", None, LIMIT_HELP, lower_bound=0, flag_values=fv)
  flags.DEFINE_list("length_buckets", None, "also score every pair of the split by source length "
                    "in pieces: edges, e.g. 32,64,128 for 1-32, 33-64, 65-128 (default: the "
                    "run's eval.length_buckets; 0: none)", flag_values=fv)
  flags.DEFINE_string("out", None, "the JSON to write (default: WORKDIR/eval_<split>_<step>_avg<N>"
                      "[_first<K>][_beam<B>_lp<A>_extra<E>].json); one decoding point only",
                      flag_values=fv)
  flags.DEFINE_list("beam_size", None, f"override eval.beam_size (1 = greedy): {GRID_HELP}",
                    flag_values=fv)
  flags.DEFINE_list("length_penalty", None, f"override eval.length_penalty (alpha): {GRID_HELP}",
                    flag_values=fv)
  flags.DEFINE_list("max_extra_length", None, "override eval.max_extra_length (outputs of at most "
                    f"input length + this many tokens): {GRID_HELP}", flag_values=fv)
  flags.DEFINE_boolean("truncate", False, "with a learned position table: cut a source longer "
                       "than it holds (model.max_length - max_extra_length pieces) to that length "
                       "and score its pair, instead of leaving the pair out of BLEU (counted "
                       "either way); names the file ..._truncate.json", flag_values=fv)
  flags.DEFINE_list("context_lengths", None, "an lm run only: also score the set in rows of each "
                    "of these many pieces (e.g. 256,512,1024), every piece once: perplexity per "
                    "piece and per word at each context length (default: the run's "
                    "eval.context_lengths; 0: none)", flag_values=fv)


def _flag_edges(fv: flags.FlagValues) -> tuple[int, ...] | None:
  """--length_buckets checked (0: none), or None where it is not given (the run's
  eval.length_buckets then)."""
  from tfm.data.length_buckets import check_edges  # pylint: disable=import-outside-toplevel
  if fv.length_buckets is None:
    return None
  if fv.length_buckets == ["0"]:
    return ()
  try:
    edges = tuple(int(e) for e in fv.length_buckets)
  except ValueError:
    edges = tuple(fv.length_buckets)
  return check_edges(edges, "--length_buckets")


TABLE = ("beam_size", "length_penalty", "max_extra_length", "bleu", "tokenized_bleu", "chrf", "ter")


def table(rows: list[dict], configured) -> str:
  """The grid's dev figures, a row a decoding point (the run's own marked with *)."""
  head = ["beam", "alpha", "extra", "BLEU", "tok. BLEU", "chrF", "TER", ""]
  lines = [head]
  for r in rows:
    own = (r["beam_size"], r["length_penalty"], r["max_extra_length"]) == (
        configured.beam_size, configured.length_penalty, configured.max_extra_length)
    lines.append([str(r["beam_size"]), f"{r['length_penalty']:g}", str(r["max_extra_length"]),
                  f"{r['bleu']:.2f}", f"{r['tokenized_bleu']:.2f}", f"{r['chrf']:.2f}",
                  f"{r['ter']:.2f}", "*" if own else ""])
  widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
  return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths)).rstrip()
                   for line in lines)


def run(fv: flags.FlagValues, config):
  refuse_config(config)
  require_workdir(fv)
  # pylint: disable=import-outside-toplevel
  import jax
  import numpy as np
  from tfm.decode.text import source_limit
  from tfm.eval import decoding
  from tfm.eval.dev_bleu import DevBleu
  from tfm.eval.dev_loss import DevLoss
  from tfm.eval.restore import load_trained, read_workdir_config
  from tfm.train import checkpoint as ckpt_lib
  from tfm.train import distributed, trackers
  from tfm.train.progress import Counter

  edges = _flag_edges(fv)  # the flags and the workdir's config checked before loading anything
  saved_config = read_workdir_config(fv.workdir)
  contexts = context_lengths(fv, saved_config)
  distributed.initialize_from_env()  # before process_index: it starts JAX's backend
  if jax.process_index() == 0:  # the run's trackers answer (train.trackers) before any work
    trackers.check(saved_config.train, fv.workdir)
  names = _eval_sets(fv, saved_config.data.eval_set_names)
  if not saved_config.translates:
    evaluate_texts(fv, names, contexts)
    return
  try:
    points = decoding.points(saved_config.eval, fv.beam_size, fv.length_penalty,
                             fv.max_extra_length)
  except ValueError as e:
    raise UsageError(str(e)) from None
  if fv.out is not None and len(points) > 1:
    raise UsageError(f"--out: one file for {len(points)} decoding points; drop --out (each point "
                     "writes its own file in the workdir)")
  t = load_trained(fv.workdir, fv.average, checkpoint=fv.checkpoint)
  announce_backend(t.note)
  exp, c = t.experiment, t.config
  if fv.truncate and all(source_limit(c.model, p.max_extra_length) is None for p in points):
    raise UsageError(f"--truncate: model.positions={c.model.positions!r} decodes a source of any "
                     "length whole, so nothing would be cut; drop --truncate")
  edges = c.eval.length_buckets if edges is None else edges
  decoding.check_lengths(c, points)
  configured = decoding.Decoding.of(c.eval)
  hosts = ckpt_lib.read_data_state(t.checkpoints_in, t.steps[-1])["hosts"]  # every host's pipeline
  tokens = lambda key: sum(h.get("efficiency", {}).get(key, 0) for h in hosts) or None
  compiled, written = {}, []
  # Every set's batches first: a set that cannot be scored is refused before any result is written.
  scorers = {name: DevLoss(c.data, exp.data_source, t.tokenizer, exp.eval_step, exp.batch_sharding,
                           split=name, row_multiple=exp.batch_shards, task=tasks.get(c.task))
             for name in names}
  for name in names:
    losses = scorers[name](t.params)
    counts = scorers[name].counts
    bleus = {}  # a DevBleu for each longest source the points decode (learned positions)
    searched, rows = {}, []
    for point in points:
      search = point.same_search()
      longest = source_limit(c.model, point.max_extra_length)
      if longest not in bleus:
        bleus[longest] = DevBleu(c.data, exp.data_source, t.tokenizer, None,
                                 batch_size=exp.decode_rows(c.eval.batch_size), split=name,
                                 limit=fv.limit or 0, compounds=c.eval.compounds,
                                 max_input_length=longest, truncate=fv.truncate)
      bleu = bleus[longest]
      if search not in searched:  # greedy search once, whatever alpha
        progress = Counter(f"[eval] {name}: decoding" + (
            f" (beam {point.beam_size}, alpha {point.length_penalty:g}, extra "
            f"{point.max_extra_length})" if len(points) > 1 else ""), len(bleu.pairs),
                           "sentences", sys.stderr)
        shape = dict(beam_size=search.beam_size, max_extra_length=search.max_extra_length,
                     eos_id=t.tokenizer.eos_id)
        if search.beam_size == 1 or search.length_penalty == configured.length_penalty:
          # The run's own alpha, a constant of the search as in dev BLEU during training.
          args, cache = (), None
          translate = exp.translate_fn(length_penalty=search.length_penalty, **shape)
        else:  # every other alpha of a beam size and length through one compiled search
          args = (np.float32(search.length_penalty),)
          cache = compiled.setdefault((search.beam_size, search.max_extra_length), {})
          translate = exp.translate_fn(**shape)
        searched[search] = bleu(t.params, progress=progress if jax.process_index() == 0 else None,
                                translate=translate, search_args=args, compiled=cache)
      result = dict(split=name, checkpoints=t.steps, averaged=len(t.steps),
                    **checkpoint_keys(t),
                    **searched[search], perplexity=losses["perplexity"], nll=losses["nll"],
                    loss=losses["loss"], target_tokens=losses["tokens"],
                    perplexity_pairs=counts["pairs"], perplexity_dropped=counts["dropped"],
                    perplexity_truncated=counts["truncated"], examples_skipped=counts["skipped"],
                    beam_size=point.beam_size, length_penalty=point.length_penalty,
                    max_extra_length=point.max_extra_length,
                    train_source_tokens=tokens("real_inputs"),
                    train_target_tokens=tokens("real_targets"))
      note = scored_note(result, c, longest)
      if note:
        result["note"] = note
      if edges:
        result.update(_by_length(t, exp.translate_fn(
            beam_size=point.beam_size, length_penalty=point.length_penalty,
            max_extra_length=point.max_extra_length, eos_id=t.tokenizer.eos_id), name, edges,
            point.max_extra_length))
      path = fv.out or epath.Path(fv.workdir) / result_name(
          name, t.steps, fv.limit or 0, point.suffix(configured), best=t.best is not None,
          ema=t.checkpoint == "ema", buckets=edges, truncate=fv.truncate)
      if len(points) == 1:
        print_result(result)
      saved = jax.process_index() == 0 and save(
          "results", path, json.dumps(result, indent=1) + "\n", given=fv.out is not None)
      if saved and len(points) == 1:
        print(f"{'written':>22}: {path}")
      rows.append(dict(result, path=str(path) if saved else None))
      written += [path] if saved else []
    if len(points) > 1:
      what = {"best": "best checkpoint", "ema": "EMA at checkpoint"}.get(t.checkpoint, "checkpoints")
      print(f"{name} {what} {t.steps}, perplexity "
            f"{losses['perplexity']:.4f}, {len(bleu.pairs)} sentences (* the run's own settings):")
      for note in dict.fromkeys(r["note"] for r in rows if "note" in r):
        print(f"note: {note}")
      print(table(rows, configured))
      if jax.process_index() == 0:
        print("written: " + ", ".join(os.path.basename(r["path"]) for r in rows if r["path"]))
  record_written(fv.workdir, written)


def scored_note(result: dict, config, longest: int | None) -> str:
  """One line saying what a translation result's figures leave out or cut, '' when nothing: BLEU's
  pairs not translated (a source past a learned position table's `longest` pieces) or cut
  (--truncate), perplexity's pairs longer than data.max_length (filtered or cut, data.overlong),
  and the examples of the set neither reads (empty or not UTF-8)."""
  parts, d = [], config.data
  dropped, cut = result["sentences_dropped"], result["sentences_truncated"]
  table = (f"the {longest} pieces the learned position table holds (model.max_length "
           f"{config.model.max_length} - max_extra_length {result['max_extra_length']})")
  if dropped:
    parts.append(f"BLEU over {result['sentences']} of {result['sentences'] + dropped} pairs, "
                 f"{dropped} not translated: a source longer than {table} (--truncate cuts it)")
  if cut:
    parts.append(f"BLEU with {cut} source{'s' * (cut > 1)} cut to {table} (--truncate)")
  pairs, dropped, cut = (result["perplexity_pairs"], result["perplexity_dropped"],
                         result["perplexity_truncated"])
  if dropped:
    parts.append(f"perplexity over {pairs} of {pairs + dropped} pairs, {dropped} longer than "
                 f"data.max_length={d.max_length} left out (data.overlong='filter')")
  if cut:
    parts.append(f"perplexity with {cut} pair{'s' * (cut > 1)} cut to data.max_length="
                 f"{d.max_length} (data.overlong='truncate')")
  skipped = result["examples_skipped"]
  if skipped:
    parts.append(f"{skipped} example{'s' * (skipped > 1)} of the set skipped, empty or not UTF-8")
  return "; ".join(parts)


def _by_length(t, translate, name: str, edges: tuple[int, ...], max_extra_length: int) -> dict:
  """The evaluation by source length of set `name` (tfm/eval/by_length.py) with `translate`, which
  decodes up to max_extra_length tokens past each source: the result's length_buckets,
  longer_than_buckets and by_length."""
  # pylint: disable=import-outside-toplevel
  import jax
  from tfm.eval.by_length import ByLength
  from tfm.train.progress import Counter
  exp, c = t.experiment, t.config
  by_length = ByLength(c, exp.data_source, t.tokenizer, exp.eval_step, exp.batch_sharding,
                       translate, edges=edges, batch_size=exp.decode_rows(c.eval.batch_size),
                       split=name, row_multiple=exp.batch_shards, max_extra_length=max_extra_length)
  total = sum(len(b.pairs) for b in by_length.buckets)
  progress = Counter(f"[eval] {name} by source length: decoding", total, "sentences", sys.stderr)
  return dict(length_buckets=list(edges), longer_than_buckets=by_length.beyond,
              by_length=by_length(t.params, progress=progress if jax.process_index() == 0
                                  else None))


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
