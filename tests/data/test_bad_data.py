"""Bad data: over-long examples filtered or truncated, empty and non-UTF-8 text skipped, all
counted; unknown datasets and bad config values fail naming the config key."""

import re

import numpy as np
import pytest

import tfm_data_testlib as testlib
from tfm.data.config import DataConfig
from tfm.data import examples, pipeline, sources


def _train_lengths(tok):
  pairs = [p for ref, p in testlib.clean_pairs().items() if testlib.expected_split(ref) == "train"]
  return [(len(tok.encode(s)), len(tok.encode(t))) for s, t in pairs]


@pytest.mark.parametrize("policy", ["filter", "truncate"])
def test_overlong_counts(cfg, tok, policy):
  cfg = cfg.replace(overlong=policy)
  cfg = cfg.replace(max_length=24)
  cfg = cfg.replace(tokens_per_batch=24 * 4)
  lengths = _train_lengths(tok)
  overlong = sum(1 for a, b in lengths if max(a, b) > 24)
  assert 0 < overlong < len(lengths)
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1)
  batches = list(it)
  stats = it.stats()
  assert stats["examples_read"] == len(lengths)
  if policy == "filter":
    assert stats["filtered_overlong"] == overlong and stats["truncated"] == 0
    assert stats["examples_kept"] == len(lengths) - overlong
  else:
    assert stats["truncated"] == overlong and stats["filtered_overlong"] == 0
    assert stats["examples_kept"] == len(lengths)
  kept_tokens = sum(int(np.count_nonzero(b["inputs_segmentation"])) for b in batches)
  want = sum(min(a, 24) for a, b in lengths if policy == "truncate" or max(a, b) <= 24)
  assert kept_tokens == want


class _ListSource:
  def __init__(self, pairs):
    self.pairs = pairs

  def __len__(self):
    return len(self.pairs)

  def __getitem__(self, i):
    return self.pairs[i]


def test_empty_and_non_utf8_are_skipped_and_counted(cfg, tok, monkeypatch):
  good = [(f"light day {i}.".encode(), f"luz dia {i}.".encode()) for i in range(20)]
  bad = [(b"", b"luz."), (b"   ", b"x"), (b"light.", b"\n"), (b"\xff\xfe light", b"luz."),
         (b"light.", b"caf\xe9")]
  monkeypatch.setattr(sources.DataSource, "open", lambda self, split: _ListSource(good + bad))
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1)
  rows = sum(len(list(testlib.segments(b, "inputs"))) for b in it)
  stats = it.stats()
  assert rows == 20
  assert stats["skipped_empty"] == 3 and stats["skipped_non_utf8"] == 2
  assert stats["examples_read"] == 25 and stats["examples_kept"] == 20
  pairs = pipeline.eval_text_pairs(cfg, sources.DataSource.of(cfg), "dev")
  assert len(pairs) == 20 and pairs[0] == ("light day 0.", "luz dia 0.")


def test_encode_pair_marks_status(tok):
  encode = examples.EncodePair(tok, max_length=5, overlong="filter")
  assert encode((b"", b"x"))["status"] == examples.EMPTY
  assert encode((b"\xc3\x28", b"x"))["status"] == examples.NON_UTF8
  assert encode(("light " * 20, "luz"))["status"] == examples.OVERLONG
  cut = examples.EncodePair(tok, max_length=5, overlong="truncate")(("light " * 20, "luz"))
  assert cut["status"] == examples.OK and cut["truncated"] == 1
  assert len(cut["inputs"]) == 5 and cut["inputs"][-1] == 1


def test_unknown_dataset_names_key(cfg):
  # Any TFDS name may be configured (builders are not known in advance); one TFDS lacks is refused
  # in one line when it is prepared, before anything is downloaded.
  unknown = cfg.replace(dataset="wmt99_translate/xx-yy")
  with pytest.raises(ValueError, match=r"^config key data\.dataset: expected a TFDS translation "
                                       r"builder .*, got 'wmt99_translate/xx-yy'; TFDS said: "):
    sources.prepare(sources.DataSource.of(unknown))
  with pytest.raises(ValueError, match=r"^config key data\.dataset: expected a TFDS translation "
                                       r"builder .*, got 'not a name'$"):
    cfg.replace(dataset="not a name")


def test_wrong_language_names_key(cfg):
  with pytest.raises(ValueError, match=r"data\.target_lang='de'.*\('en', 'es'\)"):
    cfg.replace(target_lang="de")


@pytest.mark.parametrize("key,value,message", [
    ("overlong", "x", "config key data.overlong: expected 'filter' or 'truncate', got 'x'"),
    ("max_length", 0, "config key data.max_length: expected an integer >= 2"),
    ("num_workers", -1, "config key data.num_workers: expected an integer >= 0"),
    ("cache", "yes", "config key data.cache: expected True or False, got 'yes'"),
    ("cache_dir", "gs://bucket/cache", "config key data.cache_dir: expected a local directory"),
    ("shuffle_seed", -1, "config key data.shuffle_seed: expected an integer in [0, 2**32)"),
    ("eval_max_examples", 0, "config key data.eval_max_examples: expected a positive integer or None"),
])
def test_bad_values_name_key(key, value, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    DataConfig(**{key: value})


def test_rows_are_rounded_up_to_divide_among_hosts(cfg, tok):
  cfg = cfg.replace(tokens_per_batch=cfg.max_length * 3)  # 3 rows on 2 hosts: 4 rows, 2 each
  for index in range(2):
    batch = next(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, process_index=index,
                                         process_count=2))
    assert batch["inputs"].shape == (2, cfg.max_length)


def test_unprepared_dataset_is_a_clear_error(cfg, tmp_path):
  cfg = cfg.replace(data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError, match=r"not prepared in data\.data_dir"):
    sources.DataSource.of(cfg).open("train")
