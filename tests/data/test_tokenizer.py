"""SentencePiece vocabulary: id contract, round trips, caching keyed by dataset and size."""

import os
import pickle

import pytest

import tfm_data_testlib as testlib
from tfm.data import vocabulary
from tfm.data.sources import DataSource


def test_id_contract(tok):
  assert (tok.pad_id, tok.eos_id, tok.unk_id) == (0, 1, 2)
  assert tok._sp.bos_id() == -1  # pylint: disable=protected-access
  assert tok._sp.id_to_piece(1) == "</s>" and tok._sp.id_to_piece(0) == "<pad>"  # pylint: disable=protected-access
  assert 0 < tok.vocab_size <= 300


def test_round_trip_and_eos(tok):
  for src, tgt in list(testlib.clean_pairs().values())[:50]:
    for text in (src, tgt):
      ids = tok.encode(text)
      assert ids[-1] == 1 and 1 not in ids[:-1] and 0 not in ids
      assert tok.decode(ids) == text


def test_decode_stops_at_eos_and_ignores_pad(tok):
  a, b = tok.encode("light and water."), tok.encode("good seed.")
  assert tok.decode([0, 0] + a[:-1] + [0] + a) == "light and water. light and water."
  assert tok.decode(a + b) == "light and water."
  assert tok.decode(a + [0, 0, 0]) == "light and water."


def test_unknown_characters_map_to_unk(tok):
  ids = tok.encode("light \u4e2d")
  assert 2 in ids and ids[-1] == 1


def test_pickle_round_trip(tok):
  clone = pickle.loads(pickle.dumps(tok))
  assert clone.encode("the king said.") == tok.encode("the king said.")


def test_cached_file_is_reused(cfg, tok, monkeypatch):
  path = os.path.join(cfg.vocab_dir, vocabulary.vocab_filename(cfg))
  assert os.path.exists(path) and tok.path == path

  def fail(*args, **kwargs):
    raise AssertionError("vocab retrained although it was cached")

  monkeypatch.setattr(vocabulary, "train_vocab", fail)
  again = vocabulary.get_tokenizer(cfg, "/unused")
  assert again.encode("good bread.") == tok.encode("good bread.")


def test_a_trained_models_missing_vocabulary_is_an_error_not_retrained(cfg, tmp_path, monkeypatch):
  """train=False (tfm eval / translate, a resumed run): one line naming the file, nothing written."""
  monkeypatch.setattr(vocabulary, "train_vocab", lambda *a, **k: pytest.fail("retrained"))
  missing = cfg.replace(vocab_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError, match=f"{tmp_path}/.*vocabulary this model was trained"):
    vocabulary.get_tokenizer(missing, train=False)
  assert not list(tmp_path.iterdir())


def test_cache_key_depends_on_dataset_and_size(cfg):
  base = vocabulary.vocab_filename(cfg)
  assert vocabulary.vocab_filename(cfg.replace(vocab_size=301)) != base
  assert vocabulary.vocab_filename(cfg.replace(dataset="bible_translate/kjv-sparv")) != base
  flipped = cfg.replace(source_lang="es", target_lang="en")
  assert vocabulary.vocab_filename(flipped) == base  # one shared vocab for both directions


def test_training_is_deterministic(cfg, tmp_path):
  sentences = vocabulary.training_sentences(DataSource.of(cfg), max_sentences=10_000)
  paths = [str(tmp_path / f"v{i}.model") for i in range(2)]
  for path in paths:
    vocabulary.train_vocab(sentences, 200, path)
  assert open(paths[0], "rb").read() == open(paths[1], "rb").read()


def test_training_sentences_bounded(cfg):
  assert len(vocabulary.training_sentences(DataSource.of(cfg), max_sentences=20)) == 20


def test_missing_vocab_dir_is_a_clear_error(cfg):
  cfg = cfg.replace(vocab_dir=None)
  with pytest.raises(ValueError, match=r"data\.vocab_dir"):
    vocabulary.get_tokenizer(cfg, None)
