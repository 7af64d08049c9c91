"""Shared source+target SentencePiece BPE vocabulary: training, caching and the Tokenizer.

Token id contract (used by the model and the decoder):
  pad_id = 0 (never produced by `encode`), eos_id = 1 (ends every encoded sequence),
  unk_id = 2, no BOS (bos_id = -1); for task mlm a user-defined piece `<mask>` at id 3
  (`Tokenizer.mask_id`, None in every other vocabulary). Ordinary pieces start at
  `Tokenizer.first_ordinary_id` (3, or 4 after `<mask>`).

Monolingual text (data.text_key; tasks lm and mlm): the vocabulary is trained on that one text
and named `spm_<dataset>_<text_key>_<size>.model`, `..._<size>_mask.model` for mlm, so a
vocabulary without `<mask>` is never read for mlm, nor one with it for lm.

The vocabulary is trained on the training split, both languages, at most `max_sentences`
sentences (a fixed-seed sample of the pairs; a mixture's sources in proportion to their weights,
`training_sentences`), and cached as
`<vocab_dir>/spm_<dataset>_<lang1>-<lang2>_<size>.model` (for text files, <dataset> is 'text-'
and a hash of the train files' contents, text_files.content_key; for a mixture, 'mix-' and a
hash of its sources and weights, `mixture_key`), so a different corpus or size
never reuses a wrong file, even one at the same path in a shared data.vocab_dir. The directory
may be any epath (a local path, gs://...). Training writes a local temporary file, copies it next
to the target and renames it there, so a reader never sees a half-written model.

A trained model's vocabulary (get_tokenizer(train=False): `tfm eval`, `translate`, a resumed
run) of text files is found by that name while the train files are readable; where they are not
(the workdir copied to a machine without them), the one text vocabulary of the languages and size
in the run's workdir is its own. A workdir written when the name was keyed by data.train_files as
written has its vocabulary copied to the new name on first use.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile

import numpy as np
import sentencepiece as spm
from etils import epath

from tfm import storage
from tfm.data import sources
from tfm.data import text_files
from tfm.data.datasets import TEXT

log = logging.getLogger(__name__)

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
MASK_ID, MASK_PIECE = 3, "<mask>"  # task mlm's vocabulary only
TASKS = ("translate", "lm", "mlm")
DEFAULT_MAX_SENTENCES = 1_000_000  # sentences (both languages together) used to train the vocab
_SAMPLE_SEED = 0


class Tokenizer:
  """SentencePiece model with the project's id contract; picklable (for grain workers).

  encode(str) -> list[int] ending in EOS; decode(ids) -> str, stopping at the first EOS and
  ignoring pads; pieces(ids) -> the pieces as strings (figure labels). `vocab_size` is the number of pieces actually in the model (the requested size
  is an upper bound for very small corpora).
  """

  pad_id = PAD_ID
  eos_id = EOS_ID
  unk_id = UNK_ID

  def __init__(self, model_proto: bytes, path: str | None = None):
    self._proto = model_proto
    self.path = path
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
  def load(cls, path: str | epath.Path) -> "Tokenizer":
    return cls(epath.Path(path).read_bytes(), os.fspath(path))

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  @property
  def model_sha256(self) -> str:
    """SHA-256 of the SentencePiece model's bytes (keys caches of token ids)."""
    return hashlib.sha256(self._proto).hexdigest()

  def encode(self, text: str) -> list[int]:
    """Text -> piece ids followed by EOS (1)."""
    return self._sp.encode(text) + [EOS_ID]

  def pieces(self, ids) -> list[str]:
    """Ids -> their SentencePiece pieces ('▁' marks a word start; pad '<pad>', EOS '</s>')."""
    return [self._sp.id_to_piece(int(i)) for i in np.asarray(ids).reshape(-1).tolist()]

  def decode(self, ids) -> str:
    """Ids (list or 1-D array) -> text; stops at the first EOS, drops pads (0)."""
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
      if i == EOS_ID:
        break
      if i != PAD_ID:
        out.append(int(i))
    return self._sp.decode(out)

  def __getstate__(self):
    return {"proto": self._proto, "path": self.path}

  def __setstate__(self, state):
    self.__init__(state["proto"], state["path"])


def check_task(cfg, task: str) -> None:
  """Raises ValueError, in one line, where `task` (config.task) and data.text_key disagree: lm and
  mlm read monolingual text (data.text_key set), translate reads pairs (None)."""
  if task not in TASKS:
    raise ValueError(f"config key task: expected one of {', '.join(map(repr, TASKS))}, got "
                     f"{task!r}")
  if task != "translate" and cfg.text_key is None:
    raise ValueError(f"config keys task={task!r} and data.text_key=None: {task} needs the one "
                     "text of an example named (e.g. data.text_key='en')")
  if task == "translate" and cfg.text_key is not None:
    raise ValueError(f"config keys task='translate' and data.text_key={cfg.text_key!r}: "
                     "translation reads pairs (data.text_key=None), or set task='lm' or 'mlm'")


def vocab_filename(cfg, task: str = "translate") -> str:
  """Cache file name keyed by dataset (text files: the contents of data.train_files' files),
  language pair (unordered) or data.text_key (monolingual; '_mask' for task mlm) and size.

  Text files are named by their contents, not by data.train_files as written: another corpus at
  the same path (a shared data.vocab_dir) never reuses this one's vocabulary. The files are read
  once while unchanged (text_files.file_digest); a missing or empty one raises the one-line error
  naming data.train_files."""
  if cfg.mixture:
    return f"spm_{mixture_key(cfg)}_{_langs_and_size(cfg, task)}.model"
  slug = re.sub(r"[^A-Za-z0-9]+", "-", cfg.dataset).strip("-")
  if cfg.dataset == TEXT and cfg.text_key is not None:
    slug += "-" + text_files.text_content_key(cfg.train_files, cfg.text_key,
                                              "data.train_files")[:12]
  elif cfg.dataset == TEXT:
    slug += "-" + text_files.content_key(cfg.train_files, cfg.source_lang, cfg.target_lang,
                                         "data.train_files")[:12]
  return f"spm_{slug}_{_langs_and_size(cfg, task)}.model"


def mixture_key(cfg) -> str:
  """'mix-' and a hash of a mixture's sources (each one's vocabulary name: its dataset, or its
  text files' contents) and their normalized weights: the vocabulary is trained on that sample."""
  sources = []
  for i, (name, weight, sub) in enumerate(cfg.mixture_sources):
    try:
      sources.append((vocab_filename(sub), round(weight, 12)))
    except ValueError as e:  # its text files cannot be read: named as the mixture's source
      raise ValueError(f"data.mixture[{i}] ({name}): {e}") from None
  return "mix-" + hashlib.sha256(repr(sources).encode("utf-8")).hexdigest()[:12]


def _langs_and_size(cfg, task: str = "translate") -> str:
  """'<lang>-<lang>_<size>' (pairs), '<text_key>_<size>' (monolingual), '..._mask' (task mlm)."""
  if cfg.text_key is not None:
    return f"{cfg.text_key}_{cfg.vocab_size}" + ("_mask" if task == "mlm" else "")
  return f"{'-'.join(sorted((cfg.source_lang, cfg.target_lang)))}_{cfg.vocab_size}"


def _named_as_written(cfg) -> str:
  """The name a text vocabulary had when it was keyed by data.train_files as written (a string)."""
  digest = hashlib.sha256(cfg.train_files.encode("utf-8")).hexdigest()[:12]
  return f"spm_text-{digest}_{_langs_and_size(cfg)}.model"


def _trained_text_vocab(cfg, directory: epath.Path, task: str) -> epath.Path:
  """Where a trained model of text files keeps its vocabulary (see the module docstring)."""
  try:
    path = directory / vocab_filename(cfg, task)
  except ValueError:  # the train files cannot be read here
    if cfg.vocab_dir is not None:
      raise
    own = sorted(directory.glob(f"spm_text-*_{_langs_and_size(cfg, task)}.model"))
    if len(own) != 1:
      raise
    return own[0]
  old = (directory / _named_as_written(cfg)
         if isinstance(cfg.train_files, str) and cfg.text_key is None else None)
  if not path.exists() and old is not None and old.exists():
    storage.write_atomically(path, old.read_bytes())
    log.info("vocabulary %s copied to %s (text vocabularies are named by the train files' "
             "contents)", old, path)
  return path


def _trained_mixture_vocab(cfg, directory: epath.Path, task: str) -> epath.Path:
  """A trained model's mixture vocabulary: by name, or where its text files cannot be read here,
  the one mixture vocabulary of the languages and size in the run's workdir."""
  try:
    return directory / vocab_filename(cfg, task)
  except ValueError:
    own = sorted(directory.glob(f"spm_mix-*_{_langs_and_size(cfg, task)}.model"))
    if cfg.vocab_dir is not None or len(own) != 1:
      raise
    return own[0]


def trained_vocab_path(cfg, directory: epath.Path, task: str = "translate") -> epath.Path:
  """Where a trained model of data config `cfg` keeps its vocabulary in `directory` (its
  data.vocab_dir or workdir): by name, or for text files and mixtures that cannot be read here
  (a workdir copied to another machine) the one vocabulary of its kind, languages and size there.
  """
  if cfg.mixture:
    return _trained_mixture_vocab(cfg, directory, task)
  if cfg.dataset == TEXT:
    return _trained_text_vocab(cfg, directory, task)
  return directory / vocab_filename(cfg, task)


def _as_text(value) -> str | None:
  if isinstance(value, bytes):
    try:
      value = value.decode("utf-8")
    except UnicodeDecodeError:
      return None
  value = value.strip()
  return value or None


def training_sentences(data: sources.DataSource, max_sentences: int) -> list[str]:
  """Up to `max_sentences` sentences (source and target sides) of the data source's train split.

  When the split is larger, a fixed-seed random subset of pairs is taken, in index order. A
  mixture (data.mixture) gives each source a share of the pairs equal to its weight w_i: n_i =
  round(w_i * N) pairs of source i, N the largest total in which no source repeats a pair
  (N <= len_i / w_i for every i) and at most max_sentences / 2, so that the vocabulary's text has
  the mixture's proportions, those the model trains on.
  """
  sides = 1 if data.text_key is not None else 2  # sentences an example gives
  if not data.mixture:
    split = data.open("train")
    return _sentences(split, min(len(split), max(1, max_sentences // sides)), _SAMPLE_SEED)
  splits = [(weight, member.open("train")) for _, weight, member in data.mixture]
  total = min([max(1, max_sentences // sides)] + [int(len(split) / weight) for weight, split in splits])
  sentences = []
  for i, (weight, split) in enumerate(splits):
    sentences += _sentences(split, min(len(split), max(1, round(weight * total))),
                            [_SAMPLE_SEED, i])
  return sentences


def _sentences(source, num_pairs: int, seed) -> list[str]:
  """Both sides of `num_pairs` pairs of a split (all of it, or a sample drawn with `seed`)."""
  if num_pairs < len(source):
    rng = np.random.default_rng(seed)
    indices = np.sort(rng.choice(len(source), size=num_pairs, replace=False))
  else:
    indices = np.arange(len(source))
  sentences = []
  for i in indices:
    for side in source[int(i)]:
      text = _as_text(side)
      if text is not None:
        sentences.append(text)
  return sentences


def train_vocab(sentences: list[str], vocab_size: int, path: str | epath.Path,
                mask: bool = False) -> None:
  """Trains a BPE model on `sentences` and writes it atomically to `path` (any epath); mask: with
  the user-defined piece `<mask>` at id 3 (task mlm)."""
  if not sentences:
    raise ValueError("no training sentences to build the vocabulary from (is the train split "
                     "empty?)")
  spm.set_random_generator_seed(_SAMPLE_SEED)
  with tempfile.TemporaryFile() as local:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=local,
        model_type="bpe", vocab_size=vocab_size, hard_vocab_limit=False,
        character_coverage=0.9999,
        # The sample is bounded (and drawn with a fixed seed) by `training_sentences`; 0 tells
        # SentencePiece to use all of it rather than re-sampling.
        input_sentence_size=0,
        shuffle_input_sentence=False, num_threads=1,
        pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>",
        user_defined_symbols=[MASK_PIECE] if mask else [],
        minloglevel=2)
    local.seek(0)
    model = local.read()
  storage.write_atomically(path, model)


def get_tokenizer(cfg, vocab_dir: str | None = None, *, source: sources.DataSource | None = None,
                  max_sentences: int = DEFAULT_MAX_SENTENCES, train: bool = True,
                  task: str = "translate") -> Tokenizer:
  """Loads the cached vocabulary for (data.dataset, languages or data.text_key, data.vocab_size),
  training it from `source`'s train split first if it is missing (train=False: a missing one is an
  error, for a trained model, whose vocabulary must be the one it learned).

  The directory is data.vocab_dir if set, else `vocab_dir` (the caller's workdir). source: the
  run's DataSource (Experiment.data_source), needed only to train a missing vocabulary. task:
  config.task; 'mlm' reads (trains) the vocabulary with `<mask>` at id 3.
  """
  check_task(cfg, task)
  directory = cfg.vocab_dir if cfg.vocab_dir is not None else vocab_dir
  if directory is None:
    raise ValueError("data.vocab_dir is None and no vocab_dir was passed to get_tokenizer; "
                     "expected a directory to cache the SentencePiece model in")
  path = (trained_vocab_path(cfg, epath.Path(directory), task) if not train
          else epath.Path(directory) / vocab_filename(cfg, task))
  if not path.exists():
    if not train:
      others = ("" if cfg.dataset != TEXT else " (text vocabularies are named by the train files' "
                "contents: were data.train_files' files changed since?)")
      raise FileNotFoundError(f"{path}: the vocabulary this model was trained with is missing"
                              f"{others}; restore it there, or point data.vocab_dir at it")
    if source is None:
      raise ValueError(f"{path}: no vocabulary there, and no data source was given to train it "
                       "from (get_tokenizer(..., source=DataSource.of(config.data)))")
    train_vocab(training_sentences(source, max_sentences), cfg.vocab_size, path,
                mask=task == "mlm")
  tokenizer = Tokenizer.load(path)
  if (tokenizer.mask_id is not None) != (task == "mlm"):
    raise ValueError(f"{path}: a vocabulary {'with' if tokenizer.mask_id else 'without'} "
                     f"{MASK_PIECE}, for task {task!r}; expected it "
                     f"{'with' if task == 'mlm' else 'without'} (delete it to train another)")
  return tokenizer
