"""Task 'translate': the paper's encoder-decoder on source/target pairs (Vaswani et al., 2017).

Its batches are pairs packed into rows or bucketed by length (tfm/data/packing.py,
tfm/data/bucketing.py); its dev loss is over every target piece of the dev pairs, EOS included,
with the pairs kept, dropped and truncated counted; it alone decodes, so only it has dev BLEU,
`tfm translate` and the BLEU columns of a sweep report.
"""

from __future__ import annotations

from tfm.tasks.task import Task


class Translate(Task):
  name = "translate"
  architecture = "encoder_decoder"
  monolingual = False
  translates = True

  def check_text_key(self, text_key: str | None) -> None:
    if text_key is not None:
      raise ValueError(f"config keys task='translate' and data.text_key={text_key!r}: "
                       "translation reads pairs (data.source_lang, data.target_lang); unset "
                       "data.text_key, or set task to 'lm' or 'mlm'")

  def check_data(self, data) -> None:
    if data.text_key is not None:
      raise ValueError(f"config keys task='translate' and data.text_key={data.text_key!r}: "
                       "translation reads pairs (data.text_key=None), or set task='lm' or 'mlm'")

  def unscorable(self, data) -> str:
    return (f"each longer than data.max_length={data.max_length} "
            f"(data.overlong={data.overlong!r}; 'truncate' keeps it)")

  def not_generating(self) -> str:
    return "tfm translate translates with it"


TASK = Translate()
