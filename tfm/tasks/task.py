"""What a task is: the one object the loop, the pipeline, evaluation, the sweep and the commands
ask about what a run learns (config.task), so that no code outside tfm/tasks branches on a task's
name. A task module (translate.py, lm.py, mlm.py, span.py) subclasses Task, sets what differs and
adds its own refusals; tfm/tasks/__init__.py registers it under its name.

What the data layer reads of a task (tfm/data never imports this package; it is handed the
object): `monolingual` (pairs, packed or bucketed, or one text an example as a token stream cut
into raw rows of `stream_length` tokens), `corrupter` (what turns a stream batch into the task's
batch: mlm's BERT masking, span's T5 span corruption), `eval_stream` (the evaluation batches of
a monolingual split's token stream), `has_inputs` (lm's batches carry zero inputs),
`mask_vocabulary` (the vocabulary holds `<mask>` at id 3), `sentinels` (ids the vocabulary
reserves above its pieces: span's own, or the span run's a translation run starts from,
data.sentinels), `check_data` and `name` (for messages).
"""

from __future__ import annotations

import dataclasses

from tfm.data import masking
from tfm.data import stream
from tfm.data.config import DataConfig

# data key -> the task that alone reads it (each subclass's `data_keys`): any other task's run
# refuses a value other than the key's default, which it would silently ignore.
_READ_BY: dict[str, str] = {}
_DATA_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DataConfig)}


class Task:
  """A task's attributes, at the values most tasks share, and its config refusals.

  name: config.task. architecture: the model.architecture it trains. monolingual: reads
  data.text_key's texts (else source/target pairs). mask_vocabulary: its vocabulary holds
  `<mask>`. has_inputs: its batches' inputs hold tokens (else zero: no inputs efficiency in the
  train statistics). translates: decodes translations (dev BLEU, tfm translate, the decoding and
  BLEU flags of tfm eval, the BLEU columns of a sweep report). word_perplexity: its dev loss also
  reports per-word perplexity (and a sweep report a word PPL column). scores_context_lengths:
  scored at other context lengths (eval.context_lengths, tfm eval --context_lengths). generates:
  tfm generate continues prompts with it. dev_ppl_note: what a language model's dev PPL is per
  piece of, in a sweep report's legend (None: the report has its own translation legend).
  keeps_sentinels: its vocabulary keeps data.sentinels ids above its pieces, never in its data
  (translate: those of the span run it starts from, train.init_from); the others refuse the key.
  data_keys: the data keys it alone reads (mlm's masking rates, span's noise); a run of another
  task refuses them away from their defaults.
  """

  name: str
  architecture: str
  monolingual: bool = True
  mask_vocabulary: bool = False
  has_inputs: bool = True
  translates: bool = False
  word_perplexity: bool = False
  scores_context_lengths: bool = False
  generates: bool = False
  dev_ppl_note: str | None = None
  keeps_sentinels: bool = False
  data_keys: tuple[str, ...] = ()

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    for key in cls.data_keys:
      _READ_BY[key] = cls.name

  def __repr__(self) -> str:
    return f"<task {self.name!r}>"

  def corrupter(self, data, tokenizer, *, seed: int, process_index: int = 0):
    """None, or what turns a stream batch {'targets*': int32 [rows, length]} into this task's
    batch: corrupt(batch, counter) -> batch (counter: the batch's index, the randomness's seed
    with `seed` and `process_index`). data: the DataConfig; tokenizer: the run's vocabulary."""
    del data, tokenizer, seed, process_index
    return None

  def sentinels(self, data) -> int:
    """How many ids the vocabulary reserves at its top, above the SentencePiece pieces, for data
    config `data` (span's sentinels); data.vocab_size counts them."""
    del data
    return 0

  def stream_length(self, data) -> int:
    """The length of the raw rows a monolingual task's train stream is cut into before its
    corrupter: data.max_length, the rows the model reads."""
    return data.max_length

  def target_length(self, data) -> int:
    """The length of a train batch's target rows (its inputs' is data.max_length): the same."""
    return data.max_length

  def eval_stream(self, tokens, rows: int, length: int, data, tokenizer) -> list[dict]:
    """The global evaluation batches of a monolingual split: `tokens` (int32 [n], its texts each
    ending with EOS, concatenated) cut into batches of rows x length (the last padded), every token
    scored once; a corrupter's task corrupts the whole stream once, as one row, with
    masking.EVAL_SEED, before it is cut (mlm: the same masked pieces in every run and every
    evaluation, whatever the rows of a batch)."""
    return stream.eval_stream_batches(tokens, rows, length, self.eval_corrupter(data, tokenizer))

  def eval_corrupter(self, data, tokenizer):
    """The corrupter of the evaluation sets: `corrupter` with masking.EVAL_SEED, the same for
    every run and every evaluation."""
    return self.corrupter(data, tokenizer, seed=masking.EVAL_SEED)

  def check(self, config) -> None:
    """Raises ValueError (one line, naming the keys) unless this task fits the Config's
    model.architecture, data.text_key, eval.context_lengths and train.best_metric."""
    self.check_architecture(config.model.architecture)
    self.check_text_key(config.data.text_key)
    if config.data.sentinels and not self.keeps_sentinels:
      raise ValueError(f"config keys task={self.name!r} and data.sentinels="
                       f"{config.data.sentinels}: data.sentinels keeps a span run's sentinels in "
                       f"a translation run started from it (train.init_from); {self.name} "
                       "reserves no ids by it; set data.sentinels=0")
    for key, owner in _READ_BY.items():
      value = getattr(config.data, key)
      if owner != self.name and value != _DATA_DEFAULTS[key]:
        raise ValueError(f"config keys task={self.name!r} and data.{key}={value!r}: only task "
                         f"{owner!r} reads data.{key}; task {self.name!r} would ignore it; leave "
                         f"it at {_DATA_DEFAULTS[key]!r}")
    lengths = config.eval.context_lengths
    if lengths and not self.scores_context_lengths:
      raise ValueError(f"config keys task={self.name!r} and eval.context_lengths={lengths}: "
                       "context lengths score a language model (task 'lm'); set "
                       "eval.context_lengths=()")
    if (lengths and config.model.positions == "learned"
        and max(lengths) > config.model.max_length):
      raise ValueError(f"config keys eval.context_lengths={lengths} and model.max_length="
                       f"{config.model.max_length}: learned positions have a row for each of "
                       f"model.max_length positions; raise it to {max(lengths)} or drop the "
                       "longer lengths")
    if not self.translates and config.train.best_metric == "dev_bleu":
      raise ValueError(f"config keys task={self.name!r} and train.best_metric='dev_bleu': "
                       f"{self.name} has no dev BLEU; choose 'dev_ppl' or 'none'")

  def check_architecture(self, architecture: str) -> None:
    """Raises ValueError (one line, naming the keys) unless `architecture` is the one this task
    trains."""
    if architecture != self.architecture:
      raise ValueError(f"config keys task={self.name!r} and model.architecture="
                       f"{architecture!r}: {self.name} needs {self.architecture!r}")

  def check_text_key(self, text_key: str | None) -> None:
    """The Config's refusal where data.text_key does not fit the task (a monolingual task's)."""
    if text_key is None:
      raise ValueError(f"config keys task={self.name!r} and data.text_key=None: {self.name} "
                       "reads one text an example; set data.text_key (a TFDS feature such as "
                       "'text', or a language such as 'en')")

  def check_data(self, data) -> None:
    """The data layer's refusal (one line) where data.text_key does not fit the task: a
    monolingual task's batches are made of data.text_key's texts."""
    if data.text_key is None:
      raise ValueError(f"config keys task={self.name!r} and data.text_key=None: {self.name} "
                       "needs the one text of an example named (e.g. data.text_key='en')")

  def unscorable(self, data) -> str:
    """Why an evaluation set whose examples hold text left no target piece to score (the end of
    tfm/eval/dev_loss.py's one-line refusal)."""
    del data
    return "no text"

  def not_translating(self) -> str:
    """What the run is for instead, in tfm translate's refusal of a task that does not
    translate."""
    raise NotImplementedError(f"task {self.name!r} translates")

  def not_generating(self) -> str:
    """What the run is for instead, in tfm generate's refusal of a task that does not generate."""
    raise NotImplementedError(f"task {self.name!r} generates")
