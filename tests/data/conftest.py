"""Shared fixtures: a fake SWORD library prepared once as bible_translate/web-sparv, a vocab."""

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import tfm_data_testlib as testlib  # noqa: E402
from tfm import tasks  # noqa: E402
from tfm.data.config import DataConfig  # noqa: E402

MAX_LENGTH = 48
ROWS = 8
VOCAB_SIZE = 300


@pytest.fixture(scope="session")
def bible_env(tmp_path_factory):
  """Prepares the fake corpus with the real builder; trains the vocab. Returns a dict of paths,
  the base config and the tokenizer."""
  from tfm.data import sources, vocabulary  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp("bible")
  sword_dir = testlib.write_library(str(root / "sword"))
  cfg = DataConfig(dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",
                   data_dir=str(root / "tfds"), manual_dir=sword_dir, vocab_size=VOCAB_SIZE,
                   vocab_dir=str(root / "vocab"), max_length=MAX_LENGTH,
                   tokens_per_batch=MAX_LENGTH * ROWS, overlong="truncate")
  builder = sources.prepare(sources.DataSource.of(cfg), create_data_dir=True)
  tok = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  return {"cfg": cfg, "tokenizer": tok, "builder": builder, "root": root, "sword_dir": sword_dir}


@pytest.fixture
def cfg(bible_env):
  """The fake-Bible data config (frozen: tests derive variants with cfg.replace(...))."""
  return bible_env["cfg"]


@pytest.fixture
def tok(bible_env):
  return bible_env["tokenizer"]


LM_WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at "
            "which but have an they you were her she there one all we light river stone").split()


def _lm_line(rng) -> str:
  n = int(rng.integers(1, 70)) if rng.random() < 0.1 else int(rng.integers(1, 15))
  return " ".join(rng.choice(LM_WORDS, n))


@pytest.fixture(scope="session")
def lm_env(tmp_path_factory):
  """A monolingual text corpus (tasks lm / mlm): train.en (300 lines, some longer than a row, one
  empty and one not UTF-8), dev.en (40 lines); its lm and mlm vocabularies. Returns a dict: the
  base config (dataset='text', text_key='en'), the raw lines (bytes) of each split, the two
  tokenizers."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from tfm.data import sources, vocabulary  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp("lm")
  rng = np.random.default_rng(7)
  lines = {"train": [_lm_line(rng).encode() for _ in range(300)],
           "dev": [_lm_line(rng).encode() for _ in range(40)]}
  lines["train"][17] = b""
  lines["train"][101] = b"caf\xe9 latin-1"
  for split, values in lines.items():
    (root / f"{split}.en").write_bytes(b"\n".join(values) + b"\n")
  cfg = DataConfig(dataset="text", text_key="en", train_files=str(root / "train.{lang}"),
                   dev_files=str(root / "dev.{lang}"), vocab_size=120,
                   vocab_dir=str(root / "vocab"), max_length=32, tokens_per_batch=32 * 4,
                   cache_dir=str(root / "cache"))
  source = sources.DataSource.of(cfg)
  toks = {task: vocabulary.get_tokenizer(cfg, source=source, task=tasks.get(task))
          for task in ("lm", "mlm")}
  return {"cfg": cfg, "lines": lines, "lm": toks["lm"], "mlm": toks["mlm"], "root": root}
