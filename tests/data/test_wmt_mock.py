"""The WMT'14 path end to end (TFDS data_source -> vocab -> batches) under tfds.testing.mock_data.

MockPolicy.USE_CODE mocks `tfds.data_source` with an array_record-style source of random
examples built from the real builder's features (no metadata or download needed); every split
holds the same examples.
"""

import collections

import numpy as np
import pytest
import tensorflow_datasets as tfds

import tfm_data_testlib as testlib
from tfm.data.config import DataConfig
from tfm.data import pipeline, sources, vocabulary

NUM_EXAMPLES = 40


@pytest.fixture
def mocked():
  with tfds.testing.mock_data(num_examples=NUM_EXAMPLES, policy=tfds.testing.MockPolicy.USE_CODE):
    yield


def _cfg(tmp_path, dataset="wmt14_translate/de-en", source="en", target="de"):
  return DataConfig(dataset=dataset, source_lang=source, target_lang=target,
                    data_dir=str(tmp_path / "tfds"), vocab_size=200, vocab_dir=str(tmp_path / "vocab"),
                    max_length=64, tokens_per_batch=64 * 4, overlong="truncate")


def _normalize(text):
  return " ".join(text.split())


def test_wmt14_en_de_end_to_end(mocked, tmp_path):
  cfg = _cfg(tmp_path)
  # download_and_prepare is a no-op under the mock
  sources.prepare(sources.DataSource.of(cfg), create_data_dir=True)
  raw = tfds.data_source("wmt14_translate/de-en", split="train")
  examples = [raw[i] for i in range(len(raw))]
  tok = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1)
  batches = list(it)
  assert all(b["inputs"].shape == (4, 64) and b["inputs"].dtype == np.int32 for b in batches)
  got = collections.Counter(
      (tok.decode(s), tok.decode(t)) for b in batches
      for s, t in zip(testlib.segments(b, "inputs"), testlib.segments(b, "targets")))
  want = collections.Counter((_normalize(e["en"]), _normalize(e["de"])) for e in examples
                             if e["en"].strip() and e["de"].strip())
  assert got == want  # en -> de: inputs are English, targets German
  assert it.stats()["examples_read"] == NUM_EXAMPLES

  dev = pipeline.eval_batches(cfg, sources.DataSource.of(cfg), tok, "dev")
  assert sum(len(list(testlib.segments(b, "inputs"))) for b in dev) == sum(want.values())
  pairs = pipeline.eval_text_pairs(cfg, sources.DataSource.of(cfg), "test")
  assert [(_normalize(a), _normalize(b)) for a, b in pairs] == [
      (_normalize(e["en"]), _normalize(e["de"])) for e in examples if e["en"].strip() and e["de"].strip()]


@pytest.mark.parametrize("dataset,langs", [("wmt14_translate/fr-en", ("en", "fr")),
                                           ("wmt_t2t_translate/de-en", ("de", "en"))])
def test_other_wmt_sources_and_directions(mocked, tmp_path, dataset, langs):
  cfg = _cfg(tmp_path, dataset, *langs)  # validated when built
  source = sources.DataSource.of(cfg).open("dev")
  raw = tfds.data_source(dataset, split="validation")
  assert len(source) == NUM_EXAMPLES
  assert source[3] == (raw[3][langs[0]], raw[3][langs[1]])


def test_wmt14_token_cache_gives_the_same_batches(mocked, tmp_path):
  cfg = _cfg(tmp_path)
  sources.prepare(sources.DataSource.of(cfg), create_data_dir=True)
  tok = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  want = list(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=2))
  cached = cfg.replace(cache=True)  # cache_dir None: under data.data_dir
  got = list(pipeline.train_iterator(cached, sources.DataSource.of(cached), tok, num_epochs=2))
  assert testlib.same_batches(got, want)
  assert list((tmp_path / "tfds" / "tfm_cache").glob("*/host-0-of-1/meta.json"))
