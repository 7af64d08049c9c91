"""Plain parallel text files (data.dataset='text', tfm/data/text_files.py): the pairs the files
hold reach the batches exactly, through the vocabulary, the token cache and host sharding; every
bad input stops with one line naming the config key and the file."""

import collections
import hashlib
import json
import os
import pickle

import numpy as np
import pytest

import tfm_data_testlib as testlib
from tfm import config as config_lib
from tfm.data import cache, pipeline, sources, text_files, tokenizer
from tfm.data import vocabulary
from tfm.data.config import DataConfig
from tfm.data.host_shard import HostShard
from tfm.train import workdir as workdir_lib

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi".split()


def _lines(n, seed, words=WORDS):
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(words, int(rng.integers(1, 8)))) for _ in range(n)]


def _write(path, lines, ending="\n"):
  with open(path, "wb") as f:
    f.write(ending.join(lines).encode("utf-8") + ending.encode())


@pytest.fixture
def corpus(tmp_path):
  """train (200 pairs), dev (20) and test (15) as a file per side (en, xx): xx is en upper-cased
  and reversed, so a pair's two sides are recognizably each other's."""
  d = tmp_path / "corpus"
  d.mkdir()
  out = {}
  for split, n, seed in (("train", 200, 0), ("dev", 20, 1), ("test", 15, 2)):
    en = _lines(n, seed)
    xx = [" ".join(reversed(s.upper().split())) for s in en]
    _write(d / f"{split}.en", en)
    _write(d / f"{split}.xx", xx)
    out[split] = list(zip(en, xx))
  return d, out


def _cfg(tmp_path, d, **changes):
  values = dict(dataset="text", source_lang="en", target_lang="xx",
                train_files=str(d / "train.{lang}"), dev_files=str(d / "dev.{lang}"),
                vocab_size=120, vocab_dir=str(tmp_path / "vocab"), max_length=64,
                tokens_per_batch=64 * 4, overlong="truncate", cache_dir=str(tmp_path / "cache"))
  values.update(changes)
  return DataConfig(**values)


def _segments(batches, tok):
  return collections.Counter(
      (tok.decode(s), tok.decode(t)) for b in batches
      for s, t in zip(testlib.segments(b, "inputs"), testlib.segments(b, "targets")))


def test_batches_hold_exactly_the_lines_of_the_files(tmp_path, corpus):
  d, pairs = corpus
  cfg = _cfg(tmp_path, d)
  source = sources.DataSource.of(cfg)
  assert sources.prepare(source) is None  # nothing to build
  tok = vocabulary.get_tokenizer(cfg, None, source=source)
  it = pipeline.train_iterator(cfg, source, tok, num_epochs=1)
  batches = list(it)
  assert all(b["inputs"].shape == (4, 64) for b in batches)
  assert _segments(batches, tok) == collections.Counter(pairs["train"])
  assert it.stats()["examples_read"] == 200 and it.stats()["examples_kept"] == 200
  assert it.stats()["truncated"] == 0
  # And as token ids: each segment is the line's encoding, EOS-terminated.
  ids = collections.Counter(s for b in batches for s in testlib.segments(b, "inputs"))
  assert ids == collections.Counter(tuple(tok.encode(en)) for en, _ in pairs["train"])
  # The other direction reads the same files.
  back = cfg.replace(source_lang="xx", target_lang="en")
  it = pipeline.train_iterator(back, sources.DataSource.of(back), tok, num_epochs=1)
  got = _segments(it, tok)
  assert got == collections.Counter((x, e) for e, x in pairs["train"])
  # The dev split, in file order, for the dev loss and BLEU.
  assert pipeline.eval_text_pairs(cfg, source, "dev") == pairs["dev"]
  dev = pipeline.eval_batches(cfg, source, tok, "dev")
  assert [tok.decode(s) for b in dev for s in testlib.segments(b, "inputs")] == [
      e for e, _ in pairs["dev"]]


def test_tsv_crlf_empty_and_non_utf8_lines(tmp_path, corpus):
  d, pairs = corpus
  rows = [f"{e}\t{x}" for e, x in pairs["train"]]
  rows[3] = "\t" + pairs["train"][3][1]  # an empty source: skipped, counted
  _write(d / "train.tsv", rows, ending="\r\n")
  with open(d / "train.tsv", "ab") as f:
    f.write(b"caf\xe9\tCAFE")  # Latin-1, not UTF-8; and the last line without its newline
  cfg = _cfg(tmp_path, d, train_files=str(d / "train.tsv"))
  split = sources.DataSource.of(cfg).open("train")
  assert len(split) == 201 and split[0] == tuple(s.encode() for s in pairs["train"][0])
  assert split[200] == (b"caf\xe9", b"CAFE")
  assert split[-1] == split[200]
  tok = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1)
  got = _segments(list(it), tok)
  assert got == collections.Counter(p for i, p in enumerate(pairs["train"]) if i != 3)
  stats = it.stats()
  assert (stats["examples_read"], stats["skipped_empty"], stats["skipped_non_utf8"]) == (201, 1, 1)


def test_eval_max_examples_counts_the_pairs_that_hold_text(tmp_path, corpus):
  """data.eval_max_examples=7 over a dev file whose lines 2 and 4 are blank on one side and line 6
  not UTF-8 on the other: BLEU's pairs and the perplexity's are the first 7 pairs that hold text
  (lines 1, 3, 5, 7-10), not the 4 good ones among the first 7 lines; the 3 passed over are
  counted."""
  import jax  # pylint: disable=import-outside-toplevel
  from tfm.eval.dev_loss import DevLoss  # pylint: disable=import-outside-toplevel
  d, pairs = corpus
  en, xx = [e for e, _ in pairs["dev"]], [x for _, x in pairs["dev"]]
  en[1] = en[3] = ""
  _write(d / "dev.en", en)
  with open(d / "dev.xx", "wb") as f:
    f.write(b"\n".join(b"caf\xe9" if i == 5 else x.encode() for i, x in enumerate(xx)) + b"\n")
  cfg = _cfg(tmp_path, d, eval_max_examples=7)
  source = sources.DataSource.of(cfg)
  want = [pairs["dev"][i] for i in (0, 2, 4, 6, 7, 8, 9)]
  assert pipeline.eval_text_pairs(cfg, source, "dev") == want
  tok = vocabulary.get_tokenizer(cfg, None, source=source)
  counts = {}
  batches = pipeline.eval_batches(cfg, source, tok, "dev", counts=counts)
  assert [tok.decode(s) for b in batches for s in testlib.segments(b, "inputs")] == [
      e for e, _ in want]
  assert counts == {"skipped": 3, "kept": 7, "dropped": 0, "truncated": 0}
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  assert DevLoss(cfg, source, tok, None, sharding).counts == {
      "pairs": 7, "dropped": 0, "truncated": 0, "skipped": 3}
  # Sources longer than data.max_length: filtered or cut, and counted either way.
  short = max(len(tok.encode(e)) for e, _ in want[:3]) - 1
  long = sum(max(len(tok.encode(e)), len(tok.encode(x))) > short for e, x in want)
  assert 0 < long < 7
  for overlong, dropped, truncated in (("filter", long, 0), ("truncate", 0, long)):
    cut = cfg.replace(max_length=short, tokens_per_batch=64 * 4, overlong=overlong)
    assert DevLoss(cut, source, tok, None, sharding).counts == {
        "pairs": 7 - dropped, "dropped": dropped, "truncated": truncated, "skipped": 3}


def test_split_pickles_and_host_shards_partition_it(tmp_path, corpus):
  d, pairs = corpus
  split = text_files.TextFileSplit(str(d / "train.{lang}"), "en", "xx", "data.train_files")
  copy = pickle.loads(pickle.dumps(split))
  assert [copy[i] for i in range(len(copy))] == [split[i] for i in range(len(split))]
  hosts = [HostShard(split, i, 3) for i in range(3)]
  assert sorted(p for h in hosts for p in h._getitems(range(len(h)))) == sorted(
      (e.encode(), x.encode()) for e, x in pairs["train"])
  assert hosts[1][0] == split[1] and hosts[1][1] == split[4]


def test_cache_gives_the_same_batches_and_an_edited_file_a_new_cache(tmp_path, corpus):
  d, _ = corpus
  cfg = _cfg(tmp_path, d)
  tok = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  want = list(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=2))
  cached = cfg.replace(cache=True)
  got = list(pipeline.train_iterator(cached, sources.DataSource.of(cached), tok, num_epochs=2))
  assert testlib.same_batches(got, want)
  (first,) = (tmp_path / "cache").glob("text_en-xx_L64_*")
  # The same number of lines, the same size, one word changed: another cache, the new text.
  # Even with its old modification time: the cache is keyed by the contents.
  en, stat = (d / "train.en").read_text(), os.stat(d / "train.en")
  assert "alpha" in en
  (d / "train.en").write_text(en.replace("alpha", "omega", 1))
  os.utime(d / "train.en", ns=(stat.st_atime_ns, stat.st_mtime_ns))
  assert os.stat(d / "train.en").st_size == stat.st_size
  edited = list(pipeline.train_iterator(cached, sources.DataSource.of(cached), tok, num_epochs=1))
  assert len(list((tmp_path / "cache").glob("text_en-xx_L64_*"))) == 2
  assert any("omega" in src for src, _ in _segments(edited, tok))
  assert not any("omega" in src for src, _ in _segments(got, tok))
  assert first.exists()


def test_vocabulary_file_is_named_by_the_train_files_contents(tmp_path, corpus):
  d, _ = corpus
  a, b = _cfg(tmp_path, d), _cfg(tmp_path, d, train_files=str(d / "dev.{lang}"))
  assert vocabulary.vocab_filename(a) != vocabulary.vocab_filename(b)
  assert vocabulary.vocab_filename(a).startswith("spm_text-")
  assert vocabulary.vocab_filename(a) == vocabulary.vocab_filename(a.replace(source_lang="xx",
                                                                            target_lang="en"))
  # The key, computed here from the files' bytes: the SHA-256 of their sorted SHA-256s.
  digests = sorted(hashlib.sha256((d / f"train.{s}").read_bytes()).hexdigest()
                   for s in ("en", "xx"))
  key = hashlib.sha256("\n".join(digests).encode()).hexdigest()[:12]
  assert vocabulary.vocab_filename(a) == f"spm_text-{key}_en-xx_120.model"
  # The same files elsewhere, or named per language: the same vocabulary.
  copy = tmp_path / "copy"
  copy.mkdir()
  for s in ("en", "xx"):
    (copy / f"{s}.txt").write_bytes((d / f"train.{s}").read_bytes())
  per_language = a.replace(train_files={"en": str(copy / "en.txt"), "xx": str(copy / "xx.txt")})
  assert vocabulary.vocab_filename(per_language) == vocabulary.vocab_filename(a)


def test_another_corpus_at_the_same_path_gets_its_own_vocabulary(tmp_path, corpus, monkeypatch):
  """A shared data.vocab_dir: a corpus written where another was (the same data.train_files)
  trains its own vocabulary instead of reusing the other's, and the files are read once for the
  name however often it is asked for."""
  d, _ = corpus
  cfg = _cfg(tmp_path, d)
  first = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  other = ["quiz wavy fjord cry"] * 200  # w, v, y, f, j, q, c, r: no letter of WORDS
  _write(d / "train.en", other)
  _write(d / "train.xx", [s.upper() for s in other])
  reads = collections.Counter()
  read = text_files._read  # pylint: disable=protected-access

  def counted(path, key):
    reads[path] += 1
    return read(path, key)

  monkeypatch.setattr(text_files, "_read", counted)
  names = {vocabulary.vocab_filename(cfg) for _ in range(3)}
  assert len(names) == 1 and sorted(reads.values()) == [1, 1]
  second = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  assert second.path != first.path
  assert sorted(os.listdir(tmp_path / "vocab")) == sorted(
      os.path.basename(t.path) for t in (first, second))
  assert tokenizer.UNK_ID in first.encode("wavy") and tokenizer.UNK_ID not in second.encode("wavy")


def test_a_trained_models_text_vocabulary_without_the_train_files(tmp_path, corpus):
  """tfm eval / translate where the train files are not (a workdir copied elsewhere): the one text
  vocabulary of the languages and size in the workdir is the model's; in a shared data.vocab_dir
  the files are needed, and their absence is named."""
  d, _ = corpus
  work = tmp_path / "work"
  cfg = _cfg(tmp_path, d, vocab_dir=None)
  trained = vocabulary.get_tokenizer(cfg, str(work), source=sources.DataSource.of(cfg))
  for s in ("en", "xx"):
    os.rename(d / f"train.{s}", d / f"moved.{s}")
  assert vocabulary.get_tokenizer(cfg, str(work), train=False).path == trained.path
  with pytest.raises(ValueError, match=rf"^data.train_files: {d}/train.en does not exist"):
    vocabulary.get_tokenizer(cfg, str(work))  # training a new one needs the files
  shared = cfg.replace(vocab_dir=str(work))
  with pytest.raises(ValueError, match=rf"^data.train_files: {d}/train.en does not exist"):
    vocabulary.get_tokenizer(shared, None, train=False)


def test_a_workdirs_vocabulary_named_by_the_path_is_taken_over(tmp_path, corpus):
  """A run trained when text vocabularies were named by data.train_files as written resumes (and
  is evaluated) with that vocabulary: copied to the contents' name, so the loop's later lookup
  finds it instead of training another."""
  d, _ = corpus
  work = tmp_path / "work"
  cfg = _cfg(tmp_path, d, vocab_dir=None)
  trained = vocabulary.get_tokenizer(cfg, str(work), source=sources.DataSource.of(cfg))
  digest = hashlib.sha256(cfg.train_files.encode()).hexdigest()[:12]
  old = work / f"spm_text-{digest}_en-xx_120.model"
  os.rename(trained.path, old)
  again = vocabulary.get_tokenizer(cfg, str(work), train=False)
  assert again.path == trained.path and open(again.path, "rb").read() == old.read_bytes()
  assert vocabulary.get_tokenizer(cfg, str(work)).path == trained.path  # found, not trained anew


def test_a_file_per_language_given_as_a_mapping(tmp_path, corpus):
  """{source_lang: file, target_lang: file}: the pairs of the files in either direction, the same
  version (token cache) as the same files named with {lang}; the mapping round-trips through
  config.json and the command line, and a resume with its keys in another order is the same run."""
  d, pairs = corpus
  for s, name in (("en", "src-train.txt"), ("xx", "tgt-train.txt")):
    os.rename(d / f"train.{s}", d / name)
  files = {"en": str(d / "src-train.txt"), "xx": str(d / "tgt-train.txt")}
  cfg = _cfg(tmp_path, d, train_files=files)
  split = sources.DataSource.of(cfg).open("train")
  assert [split[i] for i in range(len(split))] == [(e.encode(), x.encode())
                                                   for e, x in pairs["train"]]
  back = cfg.replace(source_lang="xx", target_lang="en")
  split_back = sources.DataSource.of(back).open("train")
  assert [split_back[i] for i in range(len(split_back))] == [(x.encode(), e.encode())
                                                             for e, x in pairs["train"]]
  for s, name in (("en", "src-train.txt"), ("xx", "tgt-train.txt")):
    os.link(d / name, d / f"train.{s}")
  assert split.version == sources.DataSource.of(_cfg(tmp_path, d)).open("train").version
  assert split_back.version != split.version  # the other direction: other cached ids
  # Hashable (a sweep groups runs by their data), and config.json's JSON object reads back as it.
  whole = config_lib.Config(data=cfg.replace(vocab_size=37000))
  saved = json.loads(json.dumps(whole.to_dict()))
  assert saved["data"]["train_files"] == files
  assert config_lib.build(saved) == whole and hash(config_lib.build(saved)) == hash(whole)
  reordered = whole.replace(data=whole.data.replace(train_files=dict(reversed(files.items()))))
  assert workdir_lib.incompatible_keys(saved, reordered.to_dict()) == []
  other = whole.replace(data=whole.data.replace(train_files=str(d / "train.{lang}")))
  assert workdir_lib.incompatible_keys(saved, other.to_dict()) == ["data.train_files"]
  # The command line carries it as a Python literal; a plain path stays a string.
  base = ["data.dataset=text", "data.source_lang=en", "data.target_lang=xx",
          f"data.dev_files={d}/dev.{{lang}}"]
  loaded = config_lib.load_config("configs/quickstart.py", base + [f"data.train_files={files!r}"])
  assert loaded.data.train_files == files
  loaded = config_lib.load_config("configs/quickstart.py", base + [f"data.train_files={d}/t.tsv"])
  assert loaded.data.train_files == f"{d}/t.tsv"


def test_a_mapping_of_other_keys_is_refused_in_one_line(tmp_path, corpus):
  d, pairs = corpus
  with pytest.raises(ValueError, match=r"^config key data.train_files: expected the keys "
                                       r"data.source_lang and data.target_lang \('en', 'xx': a "
                                       r"file per language\) or 'columns' and 'tsv' .*, got "
                                       r"\{'en': '.*', 'es': '.*'\}$"):
    _cfg(tmp_path, d, train_files={"en": str(d / "train.en"), "es": str(d / "train.xx")})
  with pytest.raises(ValueError, match=r"^config key data.dev_files: expected a path string for "
                                       r"each language \('xx' has none\)"):
    _cfg(tmp_path, d, dev_files={"en": str(d / "dev.en"), "xx": ""})
  with pytest.raises(ValueError, match=r"^config key data.eval_sets.news: expected a split "
                                       r"\(train, dev, test\) or text files: the keys"):
    _cfg(tmp_path, d, eval_sets={"dev": "dev", "news": {"en": str(d / "test.en")}})
  # Its files are checked as the other forms' are: there, not empty, as many lines a side.
  _write(d / "short.xx", [x for _, x in pairs["train"]][:-1])
  short = _cfg(tmp_path, d, train_files={"en": str(d / "train.en"), "xx": str(d / "short.xx")})
  with pytest.raises(ValueError, match=rf"^data.train_files: {d}/train.en has 200 lines but "
                                       rf"{d}/short.xx has 199; expected the same number"):
    sources.DataSource.of(short).open("train")
  gone = _cfg(tmp_path, d, eval_sets={"dev": "dev", "news": {"en": str(d / "test.en"),
                                                             "xx": str(d / "gone.xx")}})
  with pytest.raises(ValueError, match=rf"^data.eval_sets.news: {d}/gone.xx does not exist"):
    sources.check_text_files(sources.DataSource.of(gone))


def test_a_tsv_is_read_in_the_direction_its_columns_are_declared(tmp_path, corpus):
  """An undeclared TSV's first column is the config's source; {'tsv': ..., 'columns': 'en,xx'}
  names the columns' languages, so a config of the other direction reads it the other way round,
  with its own token cache."""
  d, pairs = corpus
  _write(d / "train.tsv", [f"{e}\t{x}" for e, x in pairs["train"]])
  declared = {"tsv": str(d / "train.tsv"), "columns": "en,xx"}
  read = lambda cfg: [tuple(p) for p in sources.DataSource.of(cfg).open("train")._getitems(
      range(200))]
  en_xx = [(e.encode(), x.encode()) for e, x in pairs["train"]]
  xx_en = [(x, e) for e, x in en_xx]
  forward = _cfg(tmp_path, d, train_files=declared)
  assert read(forward) == en_xx
  reversed_declared = forward.replace(source_lang="xx", target_lang="en")
  assert read(reversed_declared) == xx_en
  reversed_undeclared = reversed_declared.replace(train_files=str(d / "train.tsv"))
  assert read(reversed_undeclared) == en_xx  # columns as (source, target), whatever the languages
  versions = {c.train_files if isinstance(c.train_files, str) else c.source_lang:
              sources.DataSource.of(c).open("train").version
              for c in (forward, reversed_declared, reversed_undeclared)}
  assert versions["en"] == versions[str(d / "train.tsv")] != versions["xx"]
  assert vocabulary.vocab_filename(forward) == vocabulary.vocab_filename(reversed_declared)
  # Declared columns back to front: the same pairs as the other declaration, reversed.
  assert read(forward.replace(train_files={**declared, "columns": "xx,en"})) == xx_en
  for columns in ("en,es", "en", "en,xx,en"):
    with pytest.raises(ValueError, match=r"^config key data.train_files: expected 'columns' naming "
                                         r"the TSV's two columns' languages, .* \('en,xx' or "
                                         r"'xx,en'\), got"):
      _cfg(tmp_path, d, train_files={**declared, "columns": columns})


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path, corpus):
  d, pairs = corpus
  bom = b"\xef\xbb\xbf"
  for s in ("en", "xx"):
    (d / f"train.{s}").write_bytes(bom + (d / f"train.{s}").read_bytes())
  (d / "dev.tsv").write_bytes(bom + "".join(f"{e}\t{x}\n" for e, x in pairs["dev"]).encode())
  cfg = _cfg(tmp_path, d, dev_files=str(d / "dev.tsv"))
  source = sources.DataSource.of(cfg)
  train, dev = source.open("train"), source.open("dev")
  assert train[0] == tuple(s.encode() for s in pairs["train"][0]) and len(train) == 200
  assert dev[0] == tuple(s.encode() for s in pairs["dev"][0]) and len(dev) == 20
  # The version stays the raw bytes' (a file with a mark and one without are other files).
  raw = hashlib.sha256(b"".join(hashlib.sha256((d / f"train.{s}").read_bytes()).digest()
                                for s in ("en", "xx"))).hexdigest()
  assert train.version == f"text-sha256-{raw}"
  (d / "dev.tsv").write_bytes(bom + b"\n")
  with pytest.raises(ValueError, match=rf"^data.dev_files: {d}/dev.tsv is empty"):
    source.open("dev")


def test_mismatched_line_counts_name_both_files(tmp_path, corpus):
  d, pairs = corpus
  _write(d / "train.xx", [x for _, x in pairs["train"]][:-2])
  cfg = _cfg(tmp_path, d)
  with pytest.raises(ValueError) as e:
    vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  assert str(e.value) == (
      f"data.train_files: {d}/train.en has 200 lines but {d}/train.xx has 198; expected the same "
      "number, line i of one the translation of line i of the other")
  assert not (tmp_path / "vocab").exists() or not os.listdir(tmp_path / "vocab")  # nothing written


@pytest.mark.parametrize("content", [b"", b"\n \n\r\n"])
def test_an_empty_file_is_named(tmp_path, corpus, content):
  d, _ = corpus
  (d / "dev.xx").write_bytes(content)
  cfg = _cfg(tmp_path, d)
  with pytest.raises(ValueError, match=rf"^data.dev_files: {d}/dev.xx is empty; expected a text "
                                       "file, one sentence a line$"):
    sources.DataSource.of(cfg).open("dev")


def test_missing_files_and_tsv_lines_without_one_tab(tmp_path, corpus):
  d, _ = corpus
  cfg = _cfg(tmp_path, d, train_files=str(d / "nope.{lang}"))
  with pytest.raises(ValueError, match=rf"^data.train_files: {d}/nope.en does not exist"):
    sources.DataSource.of(cfg).open("train")
  _write(d / "bad.tsv", ["a\tA", "b\tB\tC", "c"])
  cfg = _cfg(tmp_path, d, train_files=str(d / "bad.tsv"))
  with pytest.raises(ValueError, match=rf"^data.train_files: {d}/bad.tsv line 2 has 2 tabs; "
                                       "expected one a line"):
    sources.DataSource.of(cfg).open("train")


def test_missing_splits_are_named(tmp_path, corpus):
  d, _ = corpus
  # The default evaluation set is the dev split: without dev files the config is refused.
  with pytest.raises(ValueError, match=r"^config key data.dev_files: expected the dev split's text "
                                       r"files: data.eval_sets evaluates the dev split as 'dev', "
                                       r"got None$"):
    _cfg(tmp_path, d, dev_files=None)
  with pytest.raises(ValueError, match=r"^config key data.train_files: expected the train split's"):
    _cfg(tmp_path, d, train_files=None)
  # A test evaluation (tfm eval --split test) without test files: named when asked for.
  with pytest.raises(ValueError, match=r"^config key data.test_files: expected the test split's "
                                       "text files"):
    sources.DataSource.of(_cfg(tmp_path, d)).open("test")
  # Text files are read with dataset='text' only: not silently ignored beside a TFDS dataset.
  with pytest.raises(ValueError, match=r"^config key data.train_files: expected None with "
                                       r"data.dataset='wmt14_translate/de-en'"):
    DataConfig(train_files=str(d / "train.{lang}"))


def test_eval_sets_open_splits_and_files(tmp_path, corpus):
  d, pairs = corpus
  _write(d / "extra.tsv", [f"{e}\t{x}" for e, x in pairs["test"][:5]])
  cfg = _cfg(tmp_path, d, test_files=str(d / "test.{lang}"),
             eval_sets={"dev": "dev", "held": "test", "extra": str(d / "extra.tsv")})
  assert cfg.eval_sets == (("dev", "dev"), ("held", "test"), ("extra", str(d / "extra.tsv")))
  assert hash(cfg) == hash(cfg.replace())  # hashable: a sweep groups runs by their data
  source = sources.DataSource.of(cfg)
  assert source.eval_set_names == ("dev", "held", "extra")
  assert pipeline.eval_text_pairs(cfg, source, "held") == pairs["test"]
  assert pipeline.eval_text_pairs(cfg, source, "extra") == pairs["test"][:5]
  with pytest.raises(ValueError, match=r"'other' is neither a split \(train, dev, test\) nor an "
                                       r"evaluation set of data.eval_sets \(dev, held, extra\)"):
    source.open("other")
  for bad, message in (({"dev": "test"}, r"config key data.eval_sets.dev: expected 'dev': the "
                                         r"name of a split can only name that split"),
                       ({"train": "dev"}, r"config key data.eval_sets: expected names of"),
                       ({}, r"config key data.eval_sets: expected at least one"),
                       ({"x": ""}, r"config key data.eval_sets.x: expected a split")):
    with pytest.raises(ValueError, match="^" + message):
      _cfg(tmp_path, d, eval_sets=bad)
  with pytest.raises(ValueError, match=r"^data.eval_sets.gone: .*/gone.en does not exist"):
    gone = _cfg(tmp_path, d, eval_sets={"gone": str(d / "gone.{lang}")})
    sources.DataSource.of(gone).open("gone")


def test_cache_root_of_text_files_needs_no_tfds(tmp_path, corpus):
  d, _ = corpus
  cfg = _cfg(tmp_path, d, cache_dir=None)
  assert cache.cache_root(cfg) == os.path.expanduser("~/.cache/tfm")
  assert cache.cache_root(cfg.replace(data_dir=str(tmp_path / "data"))) == str(
      tmp_path / "data" / "tfm_cache")


def test_worker_processes_read_the_same_batches(tmp_path, corpus):
  """The split pickles into grain's worker processes (data.num_workers), which give the batches
  the main process gives."""
  d, _ = corpus
  cfg = _cfg(tmp_path, d)
  tok = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  want = list(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1))
  workers = cfg.replace(num_workers=2)
  it = pipeline.train_iterator(workers, sources.DataSource.of(workers), tok, num_epochs=1)
  try:
    assert testlib.same_batches(list(it), want)
  finally:
    it.close()


def test_two_hosts_read_disjoint_halves_that_make_the_whole(tmp_path, corpus):
  """Each host of two reads (and caches) its own half of the lines; together, every line once."""
  d, pairs = corpus
  cfg = _cfg(tmp_path, d, cache=True)
  source = sources.DataSource.of(cfg)
  tok = vocabulary.get_tokenizer(cfg, None, source=source)
  halves = [_segments(pipeline.train_iterator(cfg, source, tok, process_index=i, process_count=2,
                                              num_epochs=1), tok) for i in range(2)]
  assert halves[0] == collections.Counter(pairs["train"][0::2])
  assert halves[1] == collections.Counter(pairs["train"][1::2])
  assert sorted(p.parent.name for p in (tmp_path / "cache").glob("*/host-*/meta.json")) == [
      "host-0-of-2", "host-1-of-2"]


def test_train_files_with_no_utf8_line_are_named_with_what_was_read(tmp_path, corpus):
  """Every line of the train files in Latin-1 (a wrong encoding): the vocabulary's refusal names
  the files and says that the lines were read but none was UTF-8, before anything is written."""
  d, _ = corpus
  (d / "train.en").write_bytes("caf\xe9 ol\xe9\n\xe9t\xe9\n".encode("latin-1"))
  (d / "train.xx").write_bytes("\xe0 la\n\n".encode("latin-1"))
  cfg = _cfg(tmp_path, d)
  with pytest.raises(ValueError, match=(
      rf"^data.train_files \({d}/train.en, {d}/train.xx\): no sentence to train the vocabulary "
      r"on: 4 read, 3 not UTF-8 and 1 empty; expected UTF-8 text, one sentence a line$")):
    vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  assert not (tmp_path / "vocab").exists() or not list((tmp_path / "vocab").iterdir())
