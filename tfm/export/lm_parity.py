"""A language-model export against the tfm run it came from: logits on the run's dev rows, greedy
continuations (transformers' generate, CTranslate2's Generator) and masked-piece predictions.

The measurements behind tests/export/test_lm_parity.py and experiments/export_lm_parity.py. Dev
rows are the ones `tfm eval` scores (pipeline.stream_eval_batches: the dev texts as one stream
cut into rows of data.max_length, mlm's masked with the fixed eval seed). A causal model reads
[0] + row[:-1] (tfm's start token first); a masked model reads the masked row, pads masked out as
keys, and its predictions are compared at the scored pieces (targets != 0: <mask>, random and
unchanged alike), where tfm's perplexity is taken too. Greedy continuations are tfm's batched
generator at temperature 0 (`tfm generate --greedy --nostream`), pad never generated, and the
classes' with bad_words_ids / suppress_sequences of pad; they compare token for token, EOS included.

Needs torch and transformers (CTranslate2 for `ct2_greedy`): the export-check extra, imported by
the caller and passed in.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import jax
import numpy as np


def dev_rows(t, *, most: int | None = None) -> list[dict[str, np.ndarray]]:
  """The run's dev batches (host numpy), at most `most` rows in all."""
  from tfm import tasks  # pylint: disable=import-outside-toplevel
  from tfm.data import pipeline  # pylint: disable=import-outside-toplevel
  batches = pipeline.stream_eval_batches(t.config.data, t.experiment.data_source, t.tokenizer,
                                         "dev", task=tasks.get(t.config.task))
  out, rows = [], 0
  for batch in batches:
    keep = batch["targets_segmentation"].any(1)
    batch = {k: v[keep] for k, v in batch.items()}
    if most is not None:
      batch = {k: v[:most - rows] for k, v in batch.items()}
    if len(batch["targets"]):
      out.append(batch)
      rows += len(batch["targets"])
  return out


def _logit_pairs(t, model, torch, batches):
  """(batch, tfm's logits, the class's logits) for each of `batches`: float32 numpy [rows,
  length, vocab] each. A causal model reads [0] + targets[:-1]; a masked one the masked inputs,
  pads masked out as keys."""
  params = jax.device_get(t.params)
  apply = jax.jit(t.experiment.model.apply)
  for batch in batches:
    if _masked(t):  # a masked LM reads inputs, no targets
      inputs = batch["inputs"]
      ours = np.asarray(apply({"params": params}, inputs, None))
      with torch.no_grad():
        theirs = model(input_ids=torch.tensor(inputs, dtype=torch.long),
                       attention_mask=torch.tensor(inputs != 0, dtype=torch.long)).logits.numpy()
    else:
      targets = batch["targets"]
      ours = np.asarray(apply({"params": params}, None, targets))
      fed = np.pad(targets, ((0, 0), (1, 0)))[:, :-1]
      with torch.no_grad():
        theirs = model(input_ids=torch.tensor(fed, dtype=torch.long)).logits.numpy()
    yield batch, ours, theirs


def _masked(t) -> bool:
  return t.config.model.architecture == "encoder_only"


def masked_counts(ours: np.ndarray, theirs: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
  """The scored pieces of one batch: ours, theirs [rows, length, vocab] logits, targets [rows,
  length] int (the original piece where it is scored, 0 elsewhere, as mlm's batches hold them).
  Returns masked_pieces (targets != 0), masked_argmax_identical (of those, where both logits'
  argmax is the same entry) and nll (the sum over them of -log softmax(ours)[target], float64)."""
  scored = targets != 0
  same = ours.argmax(-1) == theirs.argmax(-1)
  picked = ours[scored].astype(np.float64)  # [scored, vocab]
  top = picked.max(-1)
  log_z = top + np.log(np.exp(picked - top[:, None]).sum(-1))
  nll = float((log_z - np.take_along_axis(picked, targets[scored][:, None], -1)[:, 0]).sum())
  return {"masked_pieces": int(scored.sum()), "masked_argmax_identical": int(same[scored].sum()),
          "nll": nll}


def logits(t, model, torch, batches) -> dict[str, Any]:
  """tfm's and the class's float32 logits on `batches` (dev_rows'): the largest absolute
  difference over every vocabulary entry at every real position (targets_segmentation != 0), the
  largest |logit| of tfm's there, rows and positions. For an mlm run (both models read the
  masked inputs, pads masked out as keys) also masked_pieces (the scored pieces, targets != 0:
  <mask>, random and unchanged alike), masked_argmax_identical (of those, where both argmaxes
  agree) and dev_perplexity (tfm's over them: `tfm eval`'s when `batches` are all the dev
  rows)."""
  largest, scale, positions = 0.0, 0.0, 0
  counts = {"masked_pieces": 0, "masked_argmax_identical": 0, "nll": 0.0}
  for batch, ours, theirs in _logit_pairs(t, model, torch, batches):
    real = batch["targets_segmentation"] != 0
    largest = max(largest, float(np.abs(ours - theirs)[real].max()))
    scale = max(scale, float(np.abs(ours)[real].max()))
    positions += int(real.sum())
    if _masked(t):
      for key, value in masked_counts(ours, theirs, batch["targets"]).items():
        counts[key] += value
  out = {"rows": sum(len(b["targets"]) for b in batches), "positions": positions,
         "largest_logit_difference": largest, "largest_logit": scale}
  if _masked(t):
    nll = counts.pop("nll")
    out.update(counts, dev_perplexity=float(np.exp(nll / max(counts["masked_pieces"], 1))))
  return out


def prompts(t, count: int, pieces: int) -> list[list[int]]:
  """The first `pieces` pieces of the first `count` dev texts (ids, no EOS)."""
  from tfm.data import pipeline  # pylint: disable=import-outside-toplevel
  from tfm.data import examples as examples_lib  # pylint: disable=import-outside-toplevel
  # pylint: disable-next=protected-access
  texts = pipeline._eval_texts(t.config.data, t.experiment.data_source, "dev")
  out = []
  for i in range(min(count, len(texts))):
    out.append(t.tokenizer.encode(examples_lib.decode_text(texts[i])[0])[:-1][:pieces])
  return out


def _until_eos(tokens: Sequence[int]) -> list[int]:
  out = []
  for token in tokens:
    out.append(int(token))
    if token == 1:
      break
  return out


def tfm_greedy(t, prompt_ids: list[list[int]], new: int) -> tuple[list[list[int]], float]:
  """tfm's greedy continuations (EOS included where it came) and the seconds of the second of two
  identical runs (the first compiles)."""
  from tfm.decode.generate import prompt_batch, row_keys  # pylint: disable=import-outside-toplevel
  generator = t.experiment.generator(max_new_tokens=new, temperature=0)
  rows = t.experiment.decode_rows(len(prompt_ids))
  batch = prompt_batch(prompt_ids, rows)
  limits = np.full((rows,), new, np.int32)
  run = lambda: np.asarray(generator.generate(t.params, batch.fed, batch.counts, batch.last,
                                              row_keys(0, 0, rows), limits).sequences)
  run()
  start = time.perf_counter()
  sequences = run()
  seconds = time.perf_counter() - start
  return [_until_eos(sequences[r]) for r in range(len(prompt_ids))], seconds


def transformers_greedy(model, torch, prompt_ids: list[list[int]], new: int) -> list[list[int]]:
  """generate() of the exported class, one prompt at a time (no padding), greedy."""
  out = []
  for ids in prompt_ids:
    with torch.no_grad():
      made = model.generate(torch.tensor([[0] + list(ids)]), max_new_tokens=new, max_length=None,
                            do_sample=False,
                            attention_mask=torch.ones((1, len(ids) + 1), dtype=torch.long))
    out.append(_until_eos(made[0, len(ids) + 1:].tolist()))
  return out


def ct2_greedy(ctranslate2, directory: str, t, prompt_ids: list[list[int]], new: int,
               threads: int = 2) -> tuple[list[list[int]], float]:
  """CTranslate2's Generator on the converted export: greedy continuations (EOS appended where
  it ended the text, as tfm's) and the seconds of the second of two identical batched runs.

  The prompts run with include_prompt_in_result (its result: the prompt less the start token,
  then the new tokens; max_length counts both): without it CTranslate2 forwards only the batch's
  shortest prompt at once and returns the rest of the longer ones as if generated. max_length is
  the longest prompt's plus `new` for the whole batch; a shorter prompt's continuation is cut at
  `new` (greedy tokens do not depend on the limit)."""
  generator = ctranslate2.Generator(directory, device="cpu", intra_threads=threads)
  starts = [["<pad>"] + t.tokenizer.pieces(ids) for ids in prompt_ids]
  longest = max(len(ids) for ids in prompt_ids)

  def run():
    return generator.generate_batch(starts, max_length=longest + new, sampling_topk=1,
                                     include_prompt_in_result=True,
                                     suppress_sequences=[["<pad>"]], end_token="</s>")

  run()
  start = time.perf_counter()
  results = run()
  seconds = time.perf_counter() - start
  out = []
  for ids, r in zip(prompt_ids, results):
    made = list(r.sequences_ids[0])[len(ids):][:new]
    out.append(made + [1] if len(made) < new else made)
  return out, seconds
