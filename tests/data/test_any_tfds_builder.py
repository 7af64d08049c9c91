"""A TFDS translation builder tfm names nowhere (ted_hrlr_translate/pt_to_en) end to end under
tfds.testing.mock_data, and the one-line errors for a name TFDS lacks or a language that is not
one of the builder's feature keys."""

import collections
import dataclasses

import pytest
import tensorflow_datasets as tfds

import tfm_data_testlib as testlib
from tfm.data import datasets, pipeline, sources, vocabulary
from tfm.data.config import DataConfig

NAME = "ted_hrlr_translate/pt_to_en"
NUM_EXAMPLES = 30


@pytest.fixture
def mocked():
  with tfds.testing.mock_data(num_examples=NUM_EXAMPLES, policy=tfds.testing.MockPolicy.USE_CODE):
    yield


def _cfg(tmp_path, **changes):
  values = dict(dataset=NAME, source_lang="pt", target_lang="en", data_dir=str(tmp_path / "tfds"),
                vocab_size=150, vocab_dir=str(tmp_path / "vocab"), max_length=64,
                tokens_per_batch=64 * 4, overlong="truncate")
  values.update(changes)
  return DataConfig(**values)


def _normalize(text):
  return " ".join(text.split())


def test_an_unlisted_builder_trains_and_evaluates(mocked, tmp_path):
  assert NAME not in datasets.DATASETS
  cfg = _cfg(tmp_path)
  source = sources.DataSource.of(cfg)
  sources.prepare(source, create_data_dir=True)  # checks the features; building is mocked
  raw = tfds.data_source(NAME, split="train")
  examples = [raw[i] for i in range(len(raw))]
  tok = vocabulary.get_tokenizer(cfg, None, source=source)
  it = pipeline.train_iterator(cfg, source, tok, num_epochs=1)
  got = collections.Counter(
      (tok.decode(s), tok.decode(t)) for b in it
      for s, t in zip(testlib.segments(b, "inputs"), testlib.segments(b, "targets")))
  want = collections.Counter((_normalize(e["pt"]), _normalize(e["en"])) for e in examples
                             if e["pt"].strip() and e["en"].strip())
  assert got == want and sum(want.values()) > NUM_EXAMPLES // 2  # pt -> en
  assert it.stats()["examples_read"] == NUM_EXAMPLES
  pairs = pipeline.eval_text_pairs(cfg, source, "dev")
  dev = tfds.data_source(NAME, split="validation")
  assert [(_normalize(a), _normalize(b)) for a, b in pairs] == [
      (_normalize(dev[i]["pt"]), _normalize(dev[i]["en"])) for i in range(len(dev))
      if dev[i]["pt"].strip() and dev[i]["en"].strip()]


def test_a_language_that_is_not_a_feature_key_is_one_line(mocked, tmp_path):
  cfg = _cfg(tmp_path, target_lang="de")  # not known in advance: accepted by the config
  source = sources.DataSource.of(cfg)
  message = (rf"^config key data.target_lang: expected a feature key of data.dataset='{NAME}', "
             r"one of \['en', 'pt'\], got 'de'$")
  with pytest.raises(ValueError, match=message):
    source.open("train")
  with pytest.raises(ValueError, match=message):  # and before anything is downloaded
    sources.prepare(source, create_data_dir=True)
  with pytest.raises(ValueError, match=r"^config key data.source_lang: expected a feature key"):
    sources.DataSource.of(_cfg(tmp_path, source_lang="es")).open("dev")


def test_names_tfds_lacks_are_one_line(tmp_path):
  for name in ("no_such_translate/xx", "ted_hrlr_translate/no_such_config"):
    source = sources.DataSource.of(_cfg(tmp_path, dataset=name))
    with pytest.raises(ValueError) as e:
      sources.prepare(source, create_data_dir=True)
    assert str(e.value).startswith(f"config key data.dataset: expected a TFDS translation builder "
                                   f"('builder' or 'builder/config') or 'text', got {name!r}; "
                                   "TFDS said: ")
    assert "\n" not in str(e.value)
  with pytest.raises(ValueError, match=r"^config key data.dataset: expected a TFDS translation "
                                       r"builder .* got 'Not A Name'$"):
    _cfg(tmp_path, dataset="Not A Name")
  # The known datasets still check their languages when the config is built.
  with pytest.raises(ValueError, match=r"data.target_lang='pt' is not a language of"):
    DataConfig(target_lang="pt")


def test_a_split_the_builder_lacks_is_one_line(cfg):
  """The fake Bible (prepared) has train, validation and test; a source asking for another split
  is told which it has."""
  source = sources.DataSource.of(cfg)
  lacking = dataclasses.replace(source, splits=(("train", "train"), ("dev", "dev2023"),
                                                ("test", "test")))
  with pytest.raises(ValueError, match=(
      r"^TFDS dataset 'bible_translate/web-sparv' has no split 'dev2023' \(tfm's 'dev'\): Unknown "
      r"split 'dev2023'. Should be one of \['train', 'validation', 'test'\]. Evaluate other sets "
      r"with data.eval_sets")):
    lacking.open("dev")
  assert len(source.open("dev")) > 0
