"""Shared fixtures: a fake SWORD library prepared once as bible_translate/web-sparv, a vocab."""

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import tfm_data_testlib as testlib  # noqa: E402
from tfm.data.config import DataConfig  # noqa: E402

MAX_LENGTH = 48
ROWS = 8
VOCAB_SIZE = 300


@pytest.fixture(scope="session")
def bible_env(tmp_path_factory):
  """Prepares the fake corpus with the real builder; trains the vocab. Returns a dict of paths,
  the base config and the tokenizer."""
  from tfm.data import sources, tokenizer  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp("bible")
  sword_dir = testlib.write_library(str(root / "sword"))
  cfg = DataConfig(dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",
                   data_dir=str(root / "tfds"), manual_dir=sword_dir, vocab_size=VOCAB_SIZE,
                   vocab_dir=str(root / "vocab"), max_length=MAX_LENGTH,
                   tokens_per_batch=MAX_LENGTH * ROWS, overlong="truncate")
  builder = sources.prepare(sources.DataSource.of(cfg), create_data_dir=True)
  tok = tokenizer.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  return {"cfg": cfg, "tokenizer": tok, "builder": builder, "root": root, "sword_dir": sword_dir}


@pytest.fixture
def cfg(bible_env):
  """The fake-Bible data config (frozen: tests derive variants with cfg.replace(...))."""
  return bible_env["cfg"]


@pytest.fixture
def tok(bible_env):
  return bible_env["tokenizer"]
