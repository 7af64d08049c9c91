"""Where a run's vocabulary comes from, in one room: named, found, trained, loaded, checked and
copied here (the SentencePiece model itself and its id contract are tfm/data/tokenizer.py's).

A run's vocabulary is one of:
  * trained here, on its training split (both languages, or data.text_key's one text), at most
    `max_sentences` sentences: a fixed-seed sample of the pairs; a mixture's sources in proportion
    to their weights (`training_sentences`);
  * a workdir's: a trained or resumed run reads the one it learned (get_tokenizer(train=False));
  * another run's: a stack's first member's, or the run train.init_from names (`take`,
    `from_run`), copied into the workdir where the run keeps its vocabulary there.

Names. A vocabulary is cached as `<vocab_dir>/spm_<dataset>_<lang1>-<lang2>_<size>.model`
(data.vocab_dir, else the run's workdir; any epath: a local path, gs://...). For text files
<dataset> is 'text-' and a hash of the train files' contents (text_files.content_key); for a
mixture, 'mix-' and a hash of its sources and weights (`mixture_key`), so a different corpus or
size never reuses a wrong file, even one at the same path in a shared data.vocab_dir. Monolingual
text (data.text_key; tasks lm, mlm, span) is named `spm_<dataset>_<text_key>_<size>.model`,
`..._<size>_mask.model` for mlm, so a vocabulary without `<mask>` is never read for mlm, nor one
with it for lm. Task span's sentinels are ids above the pieces, not pieces: its <size> is
data.vocab_size less them, lm's model of that many pieces; a translation run started from a span
run keeps them (data.sentinels, counted alike). Training writes a local temporary file, copies it next to the target and renames
it there, so a reader never sees a half-written model.

A trained model's vocabulary of text files is found by that name while the train files are
readable; where they are not (the workdir copied to a machine without them), the one text
vocabulary of the languages and size in the run's workdir is its own. A workdir written when the
name was keyed by data.train_files as written has its vocabulary copied to the new name on first
use.

Checks: the vocabulary's size is the one model.vocab_size embeds (`check_size`); a run that takes
another's vocabulary holds those very bytes (`take`, `check_same`): the same ids must be the same
pieces.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile

import jax
import numpy as np
import sentencepiece as spm
from etils import epath

from tfm import storage
from tfm.data import sources
from tfm.data import text_files
from tfm.data.datasets import TEXT
from tfm.data.tokenizer import (EOS_ID, MASK_PIECE, PAD_ID, UNK_ID, Tokenizer, check_task)

log = logging.getLogger(__name__)

DEFAULT_MAX_SENTENCES = 1_000_000  # sentences (both languages together) used to train the vocab
_SAMPLE_SEED = 0


def vocab_filename(cfg, task=None) -> str:
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


def _masked(task) -> bool:
  """Whether the vocabulary of `task` (a tfm/tasks object, or None for translation pairs) holds
  `<mask>` (task mlm's)."""
  return task is not None and task.mask_vocabulary


def _sentinels(cfg, task) -> int:
  """The ids the vocabulary of `task` reserves at its top: task span's sentinels, or those a
  translation run keeps of the span run it starts from (data.sentinels; also for task None,
  translation pairs); else 0."""
  return cfg.sentinels if task is None else task.sentinels(cfg)


def pieces(cfg, task=None) -> int:
  """The SentencePiece pieces a vocabulary of data config `cfg` asks for: data.vocab_size, less
  the sentinels `task` reserves above them (task span)."""
  return cfg.vocab_size - _sentinels(cfg, task)


def _langs_and_size(cfg, task=None) -> str:
  """'<lang>-<lang>_<size>' (pairs), '<text_key>_<size>' (monolingual), '..._mask' (task mlm);
  the size is the pieces', so task span (sentinels above the pieces) reads lm's model of as many
  pieces, and a translation run that keeps a span run's sentinels (data.sentinels) names its copy
  of that run's model by its pieces too."""
  if cfg.text_key is not None:
    return f"{cfg.text_key}_{pieces(cfg, task)}" + ("_mask" if _masked(task) else "")
  return f"{'-'.join(sorted((cfg.source_lang, cfg.target_lang)))}_{pieces(cfg, task)}"


def _named_as_written(cfg) -> str:
  """The name a text vocabulary had when it was keyed by data.train_files as written (a string)."""
  digest = hashlib.sha256(cfg.train_files.encode("utf-8")).hexdigest()[:12]
  return f"spm_text-{digest}_{_langs_and_size(cfg)}.model"


def _trained_text_vocab(cfg, directory: epath.Path, task) -> epath.Path:
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


def _trained_mixture_vocab(cfg, directory: epath.Path, task) -> epath.Path:
  """A trained model's mixture vocabulary: by name, or where its text files cannot be read here,
  the one mixture vocabulary of the languages and size in the run's workdir."""
  try:
    return directory / vocab_filename(cfg, task)
  except ValueError:
    own = sorted(directory.glob(f"spm_mix-*_{_langs_and_size(cfg, task)}.model"))
    if cfg.vocab_dir is not None or len(own) != 1:
      raise
    return own[0]


def trained_vocab_path(cfg, directory: epath.Path, task=None) -> epath.Path:
  """Where a trained model of data config `cfg` keeps its vocabulary in `directory` (its
  data.vocab_dir or workdir): by name, or for text files and mixtures that cannot be read here
  (a workdir copied to another machine) the one vocabulary of its kind, languages and size there.
  """
  if cfg.mixture:
    return _trained_mixture_vocab(cfg, directory, task)
  if cfg.dataset == TEXT:
    return _trained_text_vocab(cfg, directory, task)
  return directory / vocab_filename(cfg, task)


def _train_split_named(data: sources.DataSource) -> str:
  """How a message names `data`'s train split: its text files, or its dataset's split."""
  files = dict(data.files).get("train")
  if not data.is_text or files is None:
    return f"{data.key}.dataset {data.name}'s train split"
  paths = ((text_files.text_path(files, data.text_key),) if data.text_key is not None
           else text_files.paths(files, data.source_lang, data.target_lang))
  return f"{data.key}.train_files ({', '.join(paths)})"


def training_sentences(data: sources.DataSource, max_sentences: int) -> list[str]:
  """Up to `max_sentences` sentences (source and target sides) of the data source's train split.

  When the split is larger, a fixed-seed random subset of pairs is taken, in index order. A
  mixture (data.mixture) gives each source a share of the pairs equal to its weight w_i: n_i =
  round(w_i * N) pairs of source i, N the largest total in which no source repeats a pair
  (N <= len_i / w_i for every i) and at most max_sentences / 2, so that the vocabulary's text has
  the mixture's proportions, those the model trains on. A source that gives no sentence (every
  line empty or not UTF-8) is refused in one line naming its files or dataset and what was read.
  """
  sides = 1 if data.text_key is not None else 2  # sentences an example gives
  if not data.mixture:
    split = data.open("train")
    return _sentences(data, split, min(len(split), max(1, max_sentences // sides)), _SAMPLE_SEED)
  splits = [(weight, member, member.open("train")) for _, weight, member in data.mixture]
  total = min([max(1, max_sentences // sides)] +
              [int(len(split) / weight) for weight, _, split in splits])
  sentences = []
  for i, (weight, member, split) in enumerate(splits):
    sentences += _sentences(member, split, min(len(split), max(1, round(weight * total))),
                            [_SAMPLE_SEED, i])
  return sentences


def _sentences(data: sources.DataSource, split, num_pairs: int, seed) -> list[str]:
  """Both sides of `num_pairs` pairs of `data`'s train split (all of it, or a sample drawn with
  `seed`); ValueError where none is text."""
  if num_pairs < len(split):
    rng = np.random.default_rng(seed)
    indices = np.sort(rng.choice(len(split), size=num_pairs, replace=False))
  else:
    indices = np.arange(len(split))
  sentences, undecodable, empty = [], 0, 0
  for i in indices:
    for side in split[int(i)]:
      try:
        text = (side.decode("utf-8") if isinstance(side, bytes) else side).strip()
      except UnicodeDecodeError:
        undecodable += 1
        continue
      if text:
        sentences.append(text)
      else:
        empty += 1
  if not sentences:
    raise ValueError(f"{_train_split_named(data)}: no sentence to train the vocabulary on: "
                     f"{undecodable + empty} read, {undecodable} not UTF-8 and {empty} empty; "
                     "expected UTF-8 text, one sentence a line")
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
                  task=None) -> Tokenizer:
  """Loads the cached vocabulary for (data.dataset, languages or data.text_key, data.vocab_size),
  training it from `source`'s train split first if it is missing (train=False: a missing one is an
  error, for a trained model, whose vocabulary must be the one it learned).

  The directory is data.vocab_dir if set, else `vocab_dir` (the caller's workdir). source: the
  run's DataSource (Experiment.data_source), needed only to train a missing vocabulary. task:
  the run's task (tfm/tasks, handed in; None: translation pairs); one whose mask_vocabulary is
  set (mlm) reads (trains) the vocabulary with `<mask>` at id 3; one with sentinels (span) the
  SentencePiece model of data.vocab_size minus them, the sentinels the ids above its pieces.
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
    train_vocab(training_sentences(source, max_sentences), pieces(cfg, task), path,
                mask=_masked(task))
  tokenizer = Tokenizer.load(path, _sentinels(cfg, task))
  if (tokenizer.mask_id is not None) != _masked(task):
    whose = f"task {task.name!r}" if task is not None else "translation pairs"
    raise ValueError(f"{path}: a vocabulary {'with' if tokenizer.mask_id else 'without'} "
                     f"{MASK_PIECE}, for {whose}; expected it "
                     f"{'with' if _masked(task) else 'without'} (delete it to train another)")
  return tokenizer


def path_of(data, workdir, trained: bool = False, task=None) -> epath.Path:
  """Where a run of data config `data` in `workdir` keeps its vocabulary. trained: the run has
  trained it (trained_vocab_path: found where its text files cannot be read, as in a
  workdir copied to another machine). task: the run's task (tfm/tasks; an mlm vocabulary
  holds <mask>, and is named so)."""
  directory = storage.path(data.vocab_dir or workdir)
  if trained:
    return trained_vocab_path(data, directory, task)
  return directory / vocab_filename(data, task)


def take(there: epath.Path, data, workdir, whose: str, key: str, task=None) -> None:
  """Gives the run (data config `data`, `workdir`) the vocabulary at `there` (lead host): copied
  where the run keeps it in its workdir and has none; raises ValueError naming `key` where the run
  holds another one. whose: the other run, for the message; task: the run's task (tfm/tasks)."""
  here = path_of(data, workdir, task=task)
  if jax.process_index() != 0 or here == there:
    return
  if not here.exists():
    if data.vocab_dir is None:
      storage.write_atomically(here, there.read_bytes())
    return
  if here.read_bytes() != there.read_bytes():
    raise ValueError(f"{key}: {whose}'s vocabulary {there} is not this run's {here}: the same ids "
                     "would be other pieces; train with that vocabulary (data.vocab_dir)")


def from_run(source: str, theirs, their_task, data, workdir, task, key: str) -> str:
  """The vocabulary of the trained run in workdir `source` (its data section `theirs`, its task
  `their_task`, a tfm/tasks object) for a run (`data`, `workdir`, `task`) that starts from it:
  copied into the new workdir where the run keeps its vocabulary there and has none yet
  (`take`), so the ids mean the same pieces; returns its SHA-256, which the tokenizer the run
  prepares must have (`check_same`).
  Refused in one line naming `key`, before anything is written: a source whose vocabulary is not
  found (a data.vocab_dir relative to another working directory, say), and a run whose
  data.vocab_dir holds no vocabulary yet (it would train another one there)."""
  try:  # a copied workdir: found without its text files (trained_vocab_path)
    places = [path_of(theirs, source, trained=True, task=their_task)]
  except ValueError as e:
    raise ValueError(f"{key}: {source}'s vocabulary is not found ({e}); expected the "
                     "SentencePiece model its model was trained with in its workdir or "
                     "data.vocab_dir") from None
  if data.vocab_dir is not None:  # where the user says the source's vocabulary is
    places.append(storage.path(data.vocab_dir) / places[0].name)
  there = next((p for p in places if p.exists()), None)
  if there is None:
    raise ValueError(f"{key}: {source}'s vocabulary is not found (looked for "
                     f"{' and '.join(map(str, places))}); expected the SentencePiece model its "
                     "model was trained with: run from the directory it was trained in, or set "
                     "data.vocab_dir to the directory that holds it")
  here = path_of(data, workdir, task=task)
  if data.vocab_dir is not None and not here.exists():
    raise ValueError(f"{key}: data.vocab_dir={data.vocab_dir} holds no vocabulary "
                     f"{here.name}, so this run would train another one: the source's ids would "
                     f"be other pieces; copy {there} there, or leave data.vocab_dir unset")
  take(there, data, workdir, source, key, task=task)
  return hashlib.sha256(there.read_bytes()).hexdigest()


def check_same(tokenizer: Tokenizer, sha256: str, source: str, key: str) -> None:
  """Raises ValueError naming `key` unless the tokenizer a run prepared is the vocabulary it took
  from the run in `source` (sha256: from_run's)."""
  if tokenizer.model_sha256 != sha256:
    raise ValueError(f"{key}: this run's vocabulary {tokenizer.path} is not "
                     f"{source}'s (SHA-256 {tokenizer.model_sha256[:12]} against "
                     f"{sha256[:12]}): the same ids would be other pieces; train with the "
                     "source's vocabulary (data.vocab_dir)")


def check_size(data, vocab_size: int, model_vocab_size: int, sentinels: int = 0) -> None:
  """Raises ValueError unless the vocabulary trained for data section `data` (vocab_size ids:
  its pieces and the `sentinels` above them, task span's) is the one model.vocab_size embeds: a
  small corpus can give fewer pieces than data.vocab_size asks for."""
  if vocab_size != model_vocab_size:
    held = (f"{vocab_size - sentinels} pieces and {sentinels} sentinels above them" if sentinels
            else f"{vocab_size} pieces")
    raise ValueError(f"the vocabulary of {data.dataset} has {held} but "
                     f"model.vocab_size is {model_vocab_size}; set model.vocab_size and "
                     f"data.vocab_size to {vocab_size} (a small corpus can give fewer than asked)")
