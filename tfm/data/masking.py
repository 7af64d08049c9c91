"""BERT's masked-language-model corruption of a batch of token rows (task mlm), in numpy.

Devlin et al. (2019), section 3.1: each maskable token is selected independently with probability
p = data.mask_rate (0.15); a selected token is replaced by `<mask>` with probability
data.mask_token_rate (0.8), by a uniformly random ordinary piece with probability
data.mask_random_rate (0.1), and left as it is otherwise; the model predicts the original token at
every selected position, and only there. With u ~ U[0, 1) drawn per token:

  selected  = maskable & (s < p),                     s ~ U[0, 1)
  inputs    = <mask>      where selected & u < r_mask
            = random id   where selected & r_mask <= u < r_mask + r_random   (uniform on
                          [first ordinary id, vocab size): never pad, EOS, unk or <mask>)
            = ids         elsewhere
  targets   = ids where selected, 0 elsewhere

so the existing loss (weights targets != 0) is the masked-token cross-entropy with no change to
the step. Maskable: real tokens (segmentation 1) other than EOS, which ends every example and would
teach nothing but where examples end.

Randomness: a numpy PCG64 generator seeded with (seed, process_index, counter, _TAG): train
batches use data.shuffle_seed and the stream batcher's batch counter, which is in the iterator's
checkpointed state, so a resumed run masks exactly as the run it continues would have; evaluation
uses EVAL_SEED (a constant, not shuffle_seed), so every run and every evaluation scores the same
masked positions.
"""

from __future__ import annotations

import numpy as np

from tfm.data.tokenizer import EOS_ID

EVAL_SEED = 20190524  # evaluation masks: the same for every run and every evaluation
_TAG = 0x6D6C6D  # 'mlm': keeps these streams apart from any other use of the same seeds


class Masker:
  """Masks stream batches: masker(batch, counter) -> the mlm batch (see the module docstring).

  batch: {'targets', 'targets_segmentation', 'targets_position': int32 [rows, length], ...} (a
  stream batch, tfm/data/stream.py); the result has 'inputs' = the masked ids,
  'inputs_segmentation' / 'inputs_position' = the batch's, 'targets' = the original ids at the
  selected positions and 0 elsewhere, 'targets_segmentation' / 'targets_position' = the inputs'.
  """

  def __init__(self, *, rate: float, token_rate: float, random_rate: float, mask_id: int,
               first_ordinary_id: int, vocab_size: int, seed: int, process_index: int = 0):
    if mask_id is None:
      raise ValueError("task mlm needs a vocabulary with <mask> (get_tokenizer(..., task='mlm'))")
    if first_ordinary_id >= vocab_size:
      raise ValueError(f"a vocabulary of {vocab_size} pieces has no ordinary piece to draw from")
    self.rate, self.token_rate, self.random_rate = rate, token_rate, random_rate
    self.mask_id, self.first_ordinary_id, self.vocab_size = mask_id, first_ordinary_id, vocab_size
    self.seed, self.process_index = int(seed), int(process_index)

  @classmethod
  def of(cls, cfg, tokenizer, *, seed: int, process_index: int = 0,
         evaluation: bool = False) -> "Masker":
    """The masker of data config `cfg` (data.mask_rate, mask_token_rate, mask_random_rate; with
    `evaluation`, data.eval_mask_rate in place of mask_rate when set) and a vocabulary with
    `<mask>`."""
    rate = cfg.mask_rate
    if evaluation and cfg.eval_mask_rate is not None:
      rate = cfg.eval_mask_rate
    return cls(rate=rate, token_rate=cfg.mask_token_rate,
               random_rate=cfg.mask_random_rate, mask_id=tokenizer.mask_id,
               first_ordinary_id=tokenizer.first_ordinary_id, vocab_size=tokenizer.vocab_size,
               seed=seed, process_index=process_index)

  def generator(self, counter: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([self.seed, self.process_index, int(counter), _TAG]))

  def __call__(self, batch: dict[str, np.ndarray], counter: int) -> dict[str, np.ndarray]:
    ids, segmentation = batch["targets"], batch["targets_segmentation"]
    rng = self.generator(counter)
    shape = ids.shape
    selected = (segmentation != 0) & (ids != EOS_ID) & (rng.random(shape) < self.rate)
    u = rng.random(shape)
    to_mask = selected & (u < self.token_rate)
    to_random = selected & ~to_mask & (u < self.token_rate + self.random_rate)
    random_ids = rng.integers(self.first_ordinary_id, self.vocab_size, shape, dtype=np.int64)
    inputs = np.where(to_mask, self.mask_id, np.where(to_random, random_ids, ids))
    out = dict(batch)
    out["inputs"] = inputs.astype(np.int32)
    out["inputs_segmentation"] = segmentation.copy()
    out["inputs_position"] = batch["targets_position"].copy()
    out["targets"] = np.where(selected, ids, 0).astype(np.int32)
    return out
