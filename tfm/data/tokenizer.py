"""The SentencePiece Tokenizer and its id contract; which vocabulary a run uses, and how it is
trained, is tfm/data/vocabulary.py's.

Token id contract (used by the model and the decoder):
  pad_id = 0 (never produced by `encode`), eos_id = 1 (ends every encoded sequence),
  unk_id = 2, no BOS (bos_id = -1); for task mlm a user-defined piece `<mask>` at id 3
  (`Tokenizer.mask_id`, None in every other vocabulary). Ordinary pieces start at
  `Tokenizer.first_ordinary_id` (3, or 4 after `<mask>`). For task span `sentinels` ids above
  the SentencePiece pieces (T5's sentinels, counted down from the top: vocab_size - 1 is the
  first); `vocab_size` counts them, `pieces` and `decode` show id vocab_size - 1 - k as
  `<extra_id_k>`, T5's name for it.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import sentencepiece as spm
from etils import epath

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
MASK_ID, MASK_PIECE = 3, "<mask>"  # task mlm's vocabulary only


class Tokenizer:
  """SentencePiece model with the project's id contract; picklable (for grain workers).

  encode(str) -> list[int] ending in EOS; decode(ids) -> str, stopping at the first EOS and
  ignoring pads; pieces(ids) -> the pieces as strings (figure labels). `vocab_size` is the
  number of pieces actually in the model (the requested size is an upper bound for very small
  corpora) plus the `sentinels` above them (task span; 0 otherwise).
  """

  pad_id = PAD_ID
  eos_id = EOS_ID
  unk_id = UNK_ID

  def __init__(self, model_proto: bytes, path: str | None = None, sentinels: int = 0):
    self._proto = model_proto
    self.path = path
    self.sentinels = int(sentinels)
    self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
    if (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id(), self._sp.bos_id()) != (
        PAD_ID, EOS_ID, UNK_ID, -1):
      raise ValueError(f"SentencePiece model {path} does not follow the id contract pad=0, "
                       "eos=1, unk=2, no bos")
    mask = self._sp.piece_to_id(MASK_PIECE)
    self.mask_id = mask if mask != UNK_ID and self._sp.id_to_piece(mask) == MASK_PIECE else None
    if self.mask_id not in (None, MASK_ID):
      raise ValueError(f"SentencePiece model {path} has {MASK_PIECE} at id {self.mask_id}; "
                       f"expected id {MASK_ID}")
    self.first_ordinary_id = UNK_ID + 1 if self.mask_id is None else MASK_ID + 1

  @classmethod
  def load(cls, path: str | epath.Path, sentinels: int = 0) -> "Tokenizer":
    return cls(epath.Path(path).read_bytes(), os.fspath(path), sentinels)

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size() + self.sentinels

  def _sentinel(self, i: int) -> str:
    return f"<extra_id_{self.vocab_size - 1 - i}>"

  @property
  def model_sha256(self) -> str:
    """SHA-256 of the SentencePiece model's bytes (keys caches of token ids)."""
    return hashlib.sha256(self._proto).hexdigest()

  def encode(self, text: str) -> list[int]:
    """Text -> piece ids followed by EOS (1)."""
    return self._sp.encode(text) + [EOS_ID]

  def pieces(self, ids) -> list[str]:
    """Ids -> their SentencePiece pieces ('▁' marks a word start; pad '<pad>', EOS '</s>')."""
    pieces = self._sp.get_piece_size()
    return [self._sentinel(i) if i >= pieces else self._sp.id_to_piece(i)
            for i in np.asarray(ids).reshape(-1).tolist()]

  def decode(self, ids) -> str:
    """Ids (list or 1-D array) -> text; stops at the first EOS, drops pads (0)."""
    pieces, text, run = self._sp.get_piece_size(), [], []
    for i in np.asarray(ids).reshape(-1).tolist():
      if i == EOS_ID:
        break
      if i >= pieces:  # a sentinel (task span) between the decoded runs of pieces
        text += [self._sp.decode(run), self._sentinel(i)]
        run = []
      elif i != PAD_ID:
        run.append(int(i))
    return "".join(text) + self._sp.decode(run)

  def __getstate__(self):
    return {"proto": self._proto, "path": self.path, "sentinels": self.sentinels}

  def __setstate__(self, state):
    self.__init__(state["proto"], state["path"], state.get("sentinels", 0))


def check_task(cfg, task) -> None:
  """Raises ValueError, in one line, where the run's task and data.text_key disagree: lm and mlm
  read monolingual text (data.text_key set), translate reads pairs (None). task: a tfm/tasks
  object, handed in by the caller (tfm/data does not import tfm/tasks), whose check_data says it;
  None reads the examples as translation pairs."""
  if task is not None:
    task.check_data(cfg)
  elif cfg.text_key is not None:
    raise ValueError(f"data.text_key={cfg.text_key!r} with no task given: the examples are read "
                     "as translation pairs; pass the run's task (tasks.get(config.task)), which "
                     "reads the texts")
