"""A language-model export against the tfm run it came from: logits on the run's dev rows, greedy
continuations (transformers' generate, CTranslate2's Generator) and masked-piece predictions.

The measurements behind tests/export/test_lm_parity.py and experiments/export_lm_parity.py. Dev
rows are the ones `tfm eval` scores (pipeline.stream_eval_batches: the dev texts as one stream
cut into rows of data.max_length, mlm's masked with the fixed eval seed). A causal model reads
[0] + row[:-1] (tfm's start token first); a masked model reads the masked row, pads masked out as
keys. Greedy continuations are tfm's batched generator at temperature 0 (`tfm generate --greedy
--nostream`), pad never generated, and the classes' with bad_words_ids / suppress_sequences of
pad; they compare token for token, EOS included.

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


def logits(t, model, torch, batches) -> dict[str, Any]:
  """tfm's and the class's float32 logits on `batches`: the largest difference over real
  positions, the largest logit, and (mlm) how many <mask> positions have the same argmax."""
  params = jax.device_get(t.params)
  apply = jax.jit(t.experiment.model.apply)
  mlm = t.config.model.architecture == "encoder_only"  # a masked LM reads inputs, no targets
  largest, scale, masked, same, positions = 0.0, 0.0, 0, 0, 0
  for batch in batches:
    real = batch["targets_segmentation"] != 0
    if mlm:
      inputs = batch["inputs"]
      ours = np.asarray(apply({"params": params}, inputs, None))
      with torch.no_grad():
        theirs = model(input_ids=torch.tensor(inputs, dtype=torch.long),
                       attention_mask=torch.tensor(inputs != 0, dtype=torch.long)).logits.numpy()
      at = inputs == t.tokenizer.mask_id
      masked += int(at.sum())
      same += int((ours.argmax(-1) == theirs.argmax(-1))[at].sum())
    else:
      targets = batch["targets"]
      ours = np.asarray(apply({"params": params}, None, targets))
      fed = np.pad(targets, ((0, 0), (1, 0)))[:, :-1]
      with torch.no_grad():
        theirs = model(input_ids=torch.tensor(fed, dtype=torch.long)).logits.numpy()
    largest = max(largest, float(np.abs(ours - theirs)[real].max()))
    scale = max(scale, float(np.abs(ours)[real].max()))
    positions += int(real.sum())
  out = {"rows": sum(len(b["targets"]) for b in batches), "positions": positions,
         "largest_logit_difference": largest, "largest_logit": scale}
  if mlm:
    out.update(masked_pieces=masked, masked_argmax_identical=same)
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
