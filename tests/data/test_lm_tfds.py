"""Monolingual text from a TFDS builder (tasks lm, mlm) under tfds.testing.mock_data: data.text_key
is checked against the builder's features before anything is downloaded, and one side of a
translation builder streams exactly its texts."""

import collections

import numpy as np
import pytest
import tensorflow_datasets as tfds

from tfm import tasks
from tfm.data import exported, pipeline, sources, vocabulary
from tfm.data.config import DataConfig

NUM_EXAMPLES = 30


@pytest.fixture
def mocked():
  with tfds.testing.mock_data(num_examples=NUM_EXAMPLES, policy=tfds.testing.MockPolicy.USE_CODE):
    yield


def _cfg(tmp_path, dataset="wmt14_translate/de-en", text_key="de"):
  return DataConfig(dataset=dataset, text_key=text_key, data_dir=str(tmp_path / "tfds"),
                    vocab_size=150, vocab_dir=str(tmp_path / "vocab"), max_length=24,
                    tokens_per_batch=24 * 4)


def test_a_text_key_not_among_the_features_stops_before_any_download(mocked, tmp_path,
                                                                      monkeypatch):
  def no_download(*args, **kwargs):
    raise AssertionError("download_and_prepare ran before data.text_key was checked")

  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", no_download)
  cfg = _cfg(tmp_path, dataset="ted_hrlr_translate/pt_to_en", text_key="text")
  with pytest.raises(ValueError, match=r"^config key data.text_key: expected a feature key of "
                     r"data.dataset='ted_hrlr_translate/pt_to_en', one of \['en', 'pt'\], "
                     r"got 'text'$"):
    sources.prepare(sources.DataSource.of(cfg), create_data_dir=True)


def test_one_side_of_a_translation_builder_streams_its_texts(mocked, tmp_path):
  """text_key='de' of wmt14 de-en: one epoch's stream, split at EOS, is the German texts
  (whitespace-normalized, as SentencePiece decodes), each once."""
  cfg = _cfg(tmp_path)
  source = sources.DataSource.of(cfg)
  sources.prepare(source, create_data_dir=True)
  tok = vocabulary.get_tokenizer(cfg, source=source, task=tasks.get("lm"))
  it = pipeline.train_iterator(cfg, source, tok, num_epochs=1, task=tasks.get("lm"))
  try:
    tokens = np.concatenate([b["targets"][b["targets_segmentation"] == 1] for b in it])
  finally:
    it.close()
  pieces = [x for x in np.split(tokens, np.flatnonzero(tokens == 1) + 1) if len(x)]
  raw = tfds.data_source("wmt14_translate/de-en", split="train")
  want = collections.Counter(" ".join(raw[i]["de"].split()) for i in range(len(raw))
                             if raw[i]["de"].strip())
  assert collections.Counter(tok.decode(p) for p in pieces) == want


def test_an_export_of_one_side_is_read_without_tfds(mocked, tmp_path):
  """The text_key side of every split exported (exported.write), then read from the export: the
  same texts in the same order, and a key the export lacks is refused in one line."""
  cfg = _cfg(tmp_path)
  source = sources.DataSource.of(cfg)
  splits = {name: source.open(split) for split, name in source.splits}
  bundled = cfg.replace(data_dir=str(tmp_path / "bundle"))
  exported.write(exported.export_dir(bundled), cfg.dataset, splits)
  from_export = sources.DataSource.of(bundled)
  assert from_export.export is not None
  for split, name in source.splits:
    got = from_export.open(split)
    assert [got[i] for i in range(len(got))] == [splits[name][i] for i in range(len(got))]
  with pytest.raises(ValueError, match=r"^config key data.text_key: expected a language of the "
                     r"export .*\['de'\], got 'en'$"):
    sources.DataSource.of(bundled.replace(text_key="en")).open("train")
