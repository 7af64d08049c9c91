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
  keeps_sentinels = True

  def sentinels(self, data) -> int:
    """data.sentinels: a span run's sentinels, kept above the pieces by a run started from it
    (train.init_from) so its ids are that run's; they are never targets, so fine-tuning lowers
    their probability as any piece the data lack, and decoded they print as <extra_id_k>."""
    return data.sentinels

  def check_text_key(self, text_key: str | None) -> None:
    if text_key is not None:
      raise ValueError(f"config keys task='translate' and data.text_key={text_key!r}: "
                       "translation reads pairs (data.source_lang, data.target_lang); unset "
                       f"data.text_key, or set task to {_monolingual_tasks()}")

  def check_data(self, data) -> None:
    if data.text_key is not None:
      raise ValueError(f"config keys task='translate' and data.text_key={data.text_key!r}: "
                       "translation reads pairs (data.text_key=None), or set task to "
                       f"{_monolingual_tasks()}")

  def unscorable(self, data) -> str:
    return (f"each longer than data.max_length={data.max_length} "
            f"(data.overlong={data.overlong!r}; 'truncate' keeps it)")

  def not_generating(self) -> str:
    return "tfm translate translates with it"


def _monolingual_tasks() -> str:
  """"'lm', 'mlm' or 'span'": the registry's tasks of monolingual text, for the refusals above."""
  # The registry imports this module, so it is read at call time.
  from tfm import tasks  # pylint: disable=import-outside-toplevel
  names = [repr(task.name) for task in tasks.ALL if task.monolingual]
  return ", ".join(names[:-1]) + " or " + names[-1]


TASK = Translate()
