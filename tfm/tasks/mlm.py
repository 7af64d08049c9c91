"""Task 'mlm': a masked language model of monolingual text (BERT, Devlin et al. 2019), an
encoder-only stack.

Its batches are data.text_key's token stream cut into rows of data.max_length, as lm's, then
masked by BERT's corruption (tfm/data/masking.py): train batches with data.shuffle_seed and the
batch counter, evaluation sets once, as one row, with masking.EVAL_SEED (the same masked pieces
for every run and every evaluation). Only the masked pieces are targets, so the shared loss
(weights targets != 0) is the masked-token cross-entropy. Its vocabulary holds `<mask>` at id 3.
"""

from __future__ import annotations

from tfm.data import masking
from tfm.tasks.task import Task


class MaskedLanguageModel(Task):
  name = "mlm"
  architecture = "encoder_only"
  mask_vocabulary = True
  dev_ppl_note = "the masked pieces only, masked alike for every run"
  data_keys = ("mask_rate", "mask_token_rate", "mask_random_rate", "eval_mask_rate")

  def corrupter(self, data, tokenizer, *, seed: int, process_index: int = 0):
    return masking.Masker.of(data, tokenizer, seed=seed, process_index=process_index)

  def eval_corrupter(self, data, tokenizer):
    """BERT's masking at data.eval_mask_rate (when set) with masking.EVAL_SEED: a run trained at
    another rate is scored on the same masked pieces as the others."""
    return masking.Masker.of(data, tokenizer, seed=masking.EVAL_SEED, evaluation=True)

  def unscorable(self, data) -> str:
    if data.eval_mask_rate is None:
      return f"no piece masked at data.mask_rate={data.mask_rate}"
    return f"no piece masked at data.eval_mask_rate={data.eval_mask_rate}"

  def not_generating(self) -> str:
    return "a masked language model fills in masked tokens; it does not continue text"

  def not_translating(self) -> str:
    return "a masked language model fills in masked tokens; it does not translate"


TASK = MaskedLanguageModel()
