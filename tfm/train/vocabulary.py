"""A run's vocabulary taken from another run: a stack's first member, or the run train.init_from
names.

A run keeps its SentencePiece model in data.vocab_dir, or in its workdir where that is unset
(tfm/data/tokenizer.py). A run whose ids must mean the same pieces as another run's takes that
run's model: copied into its workdir where it keeps its vocabulary there and has none yet; a
vocabulary it holds already must be the same bytes, else the run is refused in one line (the same
ids would be other pieces). The loop checks the result after the data are prepared
(init_from.check_tokenizer).
"""

from __future__ import annotations

import jax
from etils import epath

from tfm import storage
from tfm.data import tokenizer as tokenizer_lib


def path_of(data, workdir, trained: bool = False, task: str = "translate") -> epath.Path:
  """Where a run of data config `data` in `workdir` keeps its vocabulary. trained: the run has
  trained it (tokenizer_lib.trained_vocab_path: found where its text files cannot be read, as in a
  workdir copied to another machine). task: the run's config.task (an mlm vocabulary holds
  <mask>, and is named so)."""
  directory = storage.path(data.vocab_dir or workdir)
  if trained:
    return tokenizer_lib.trained_vocab_path(data, directory, task)
  return directory / tokenizer_lib.vocab_filename(data, task)


def take(there: epath.Path, data, workdir, whose: str, key: str, task: str = "translate") -> None:
  """Gives the run (data config `data`, `workdir`) the vocabulary at `there` (lead host): copied
  where the run keeps it in its workdir and has none; raises ValueError naming `key` where the run
  holds another one. whose: the other run, for the message; task: the run's config.task."""
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
