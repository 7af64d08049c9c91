"""Shared fixtures: a fake SWORD library prepared once as bible_translate/web-sparv, a vocab."""

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import tfm_data_testlib as testlib  # noqa: E402
from tfm.data import config as config_lib  # noqa: E402

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
  cfg = config_lib.default_data_config()
  cfg.dataset = "bible_translate/web-sparv"
  cfg.source_lang, cfg.target_lang = "en", "es"
  cfg.data_dir = str(root / "tfds")
  cfg.manual_dir = sword_dir
  cfg.vocab_size = VOCAB_SIZE
  cfg.vocab_dir = str(root / "vocab")
  cfg.max_length = MAX_LENGTH
  cfg.tokens_per_batch = MAX_LENGTH * ROWS
  cfg.overlong = "truncate"
  builder = sources.prepare(cfg)
  tok = tokenizer.get_tokenizer(cfg, None)
  return {"cfg": cfg, "tokenizer": tok, "builder": builder, "root": root, "sword_dir": sword_dir}


@pytest.fixture
def cfg(bible_env):
  """A fresh, modifiable copy of the fake-Bible data config."""
  return bible_env["cfg"].copy_and_resolve_references()


@pytest.fixture
def tok(bible_env):
  return bible_env["tokenizer"]
