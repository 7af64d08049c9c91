"""Weighted mixtures (data.mixture, tfm/data/mixture.py): each example of the train batches comes
from source i with probability w_i (the counts checked against Binomial(n, w_i)'s 4-sigma bounds),
the batches are a function of data.shuffle_seed and resume bit-exact, each source repeats at its
own rate, the vocabulary's text has the weights' proportions, a source's splits are evaluation
sets, and a sweep grid over data.mixture_weights gives runs of those weights."""

import collections
import json
import math
import os

import numpy as np
import pytest
import test_multihost

from tfm import config as config_lib
from tfm import sections
from tfm.data import mixture, pipeline, sources, vocabulary
from tfm.data.config import DataConfig
from tfm.sweep import runs as runs_lib
from tfm.train import workdir as workdir_lib

A_WORDS = "alpha beta gamma delta epsilon zeta eta theta".split()
B_WORDS = "red green blue cyan magenta yellow black white".split()
WORKER = os.path.join(os.path.dirname(__file__), "mixture_worker.py")


def _write_corpus(d, name, n, seed, words):
  rng = np.random.default_rng(seed)
  en = [f"{name} {i} " + " ".join(rng.choice(words, int(rng.integers(1, 6)))) for i in range(n)]
  xx = [" ".join(reversed(s.upper().split())) for s in en]
  for lang, lines in (("en", en), ("xx", xx)):
    (d / f"{name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
  return list(zip(en, xx))


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
  """Two text corpora of distinct words: 'a' (240 train pairs, 12 dev) and 'b' (60 train pairs,
  so that it runs through several epochs), a pair's sides en and XX (upper-cased, reversed)."""
  d = tmp_path_factory.mktemp("mix")
  pairs = {"a": _write_corpus(d, "a", 240, 0, A_WORDS), "b": _write_corpus(d, "b", 60, 1, B_WORDS),
           "bdev": _write_corpus(d, "bdev", 12, 2, B_WORDS)}
  return d, pairs


def _cfg(d, weights=(0.7, 0.3), **changes):
  values = dict(
      dataset="text", source_lang="en", target_lang="xx", train_files=str(d / "a.{lang}"),
      dev_files=str(d / "a.{lang}"), vocab_size=150, vocab_dir=str(d / "vocab"), max_length=32,
      tokens_per_batch=32 * 4, overlong="truncate", shuffle_seed=3, cache_dir=str(d / "cache"),
      mixture=({"name": "a", "weight": weights[0]},
               {"name": "b", "train_files": str(d / "b.{lang}"),
                "dev_files": str(d / "bdev.{lang}"), "weight": weights[1]}))
  values.update(changes)
  return DataConfig(**values)


def _tokenizer(cfg):
  return vocabulary.get_tokenizer(cfg, source=sources.DataSource.of(cfg))


def _segments(batches, tok):
  """The (source, target) texts of every packed segment, in batch order."""
  out = []
  for b in batches:
    for row in range(b["inputs"].shape[0]):
      for s in np.unique(b["inputs_segmentation"][row]):
        if s:
          out.append((tok.decode(b["inputs"][row][b["inputs_segmentation"][row] == s]),
                      tok.decode(b["targets"][row][b["targets_segmentation"][row] == s])))
  return out


def _within_binomial(count, n, w, sigmas=4.0):
  """|count - n w| <= sigmas * sqrt(n w (1 - w)): Binomial(n, w)'s bound, computed here."""
  return abs(count - n * w) <= sigmas * math.sqrt(n * w * (1 - w))


def test_draws_follow_the_weights_within_binomial_bounds():
  """Over 3 blocks of draws the counts of each source lie within 4 sigma of Binomial(n, w_i);
  draws are a function of (seed, host, block): equal when repeated, different for another seed
  or host."""
  weights = (0.6, 0.3, 0.1)
  got = np.concatenate([mixture.draws(weights, 5, 0, b) for b in range(3)])
  n = got.size
  for i, w in enumerate(weights):
    assert _within_binomial(int((got == i).sum()), n, w), (i, int((got == i).sum()), n * w)
  assert np.array_equal(got[:mixture.BLOCK], mixture.draws(weights, 5, 0, 0))
  assert not np.array_equal(got[:mixture.BLOCK], mixture.draws(weights, 6, 0, 0))
  assert not np.array_equal(got[:mixture.BLOCK], mixture.draws(weights, 5, 1, 0))
  assert mixture.source_seed(0, 0) != mixture.source_seed(0, 1)


def test_batches_come_from_the_sources_by_their_weights(corpora):
  """Every packed pair is one of its source's pairs; the [data] counts (from_a, from_b) are the
  pairs seen from each, within Binomial(n, w_i)'s bounds; the small source b repeats epoch after
  epoch, each of its pairs as often as every other (complete epochs) or once more."""
  d, pairs = corpora
  cfg = _cfg(d)
  tok = _tokenizer(cfg)
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  batches = [next(it) for _ in range(60)]
  stats = it.stats()
  it.close()
  seen = _segments(batches, tok)
  by_source = {name: collections.Counter(p for p in seen if p in set(pairs[name]))
               for name in ("a", "b")}
  assert sum(by_source["a"].values()) + sum(by_source["b"].values()) == len(seen)
  # The cursor reads ahead of the packed batches by at most the example that did not fit.
  n = stats["examples_kept"]
  assert n - 1 <= len(seen) <= n
  assert stats["from_a"] + stats["from_b"] == n
  assert abs(stats["from_b"] - sum(by_source["b"].values())) <= 1
  assert _within_binomial(stats["from_a"], n, 0.7) and _within_binomial(stats["from_b"], n, 0.3)
  times = by_source["b"]
  assert len(times) == len(pairs["b"]) and max(times.values()) - min(times.values()) <= 1
  assert min(times.values()) >= 3  # b (60 pairs) went through several epochs


@pytest.mark.parametrize("packing", [True, False])
def test_mixture_resume_is_bit_exact_and_seeded(corpora, packing):
  """Batches 0..11 in one go equal batches 0..4, the state saved as JSON, then batches 5..11 of a
  new iterator restored from it, packed or length-bucketed; the token cache gives the same
  batches; another shuffle seed others."""
  d, _ = corpora
  cfg = _cfg(d, packing=packing)
  tok = _tokenizer(cfg)
  source = sources.DataSource.of(cfg)
  it = pipeline.train_iterator(cfg, source, tok)
  straight = [next(it) for _ in range(12)]
  it.close()
  it = pipeline.train_iterator(cfg.replace(cache=True), source, tok)
  first = [next(it) for _ in range(5)]
  state = json.loads(json.dumps(it.get_state()))
  it.close()
  it = pipeline.train_iterator(cfg, source, tok)
  it.set_state(state)
  rest = [next(it) for _ in range(7)]
  it.close()
  for a, b in zip(straight, first + rest):
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
  if not packing:
    return
  it = pipeline.train_iterator(cfg.replace(shuffle_seed=4), source, tok)
  other = next(it)
  it.close()
  assert not np.array_equal(other["inputs"], straight[0]["inputs"])
  lone = pipeline.train_iterator(cfg.replace(mixture=None), sources.DataSource.of(
      cfg.replace(mixture=None)), tok)
  with pytest.raises(ValueError, match=r"not one of a mixture of \['a', 'b'\]"):
    pipeline.train_iterator(cfg, source, tok).set_state(lone.get_state())
  lone.close()


def test_the_vocabulary_is_trained_on_the_weights_proportions(corpora):
  """n_i = round(w_i N) pairs of source i, N = min(max_sentences / 2, min_i len_i / w_i): with
  weights 1:3, b (60 pairs) bounds N to 80, so 20 of a's pairs and all of b's; the file's name
  changes with the weights."""
  d, pairs = corpora
  cfg = _cfg(d, weights=(1, 3))
  got = vocabulary.training_sentences(sources.DataSource.of(cfg), 1000)
  a_sides = {s for p in pairs["a"] for s in p}
  from_a = sum(s in a_sides for s in got)
  assert (from_a, len(got) - from_a) == (2 * 20, 2 * 60)
  got = vocabulary.training_sentences(sources.DataSource.of(cfg), 60)  # N = 30: 8 + 22 pairs
  from_a = sum(s in a_sides for s in got)
  assert (from_a, len(got) - from_a) == (2 * round(0.25 * 30), 2 * round(0.75 * 30))
  names = {vocabulary.vocab_filename(_cfg(d, weights=w)) for w in ((1, 3), (2, 6), (3, 1))}
  assert len(names) == 2 and all(n.startswith("spm_mix-") for n in names)


def test_a_sources_split_is_an_evaluation_set(corpora):
  """{'source': 'b'} reads source b's dev files; the section's 'dev' stays its own dataset's."""
  d, pairs = corpora
  cfg = _cfg(d, eval_sets={"dev": "dev", "b": {"source": "b"}, "b_train": {"source": "b",
                                                                          "split": "train"}})
  source = sources.DataSource.of(cfg)
  sources.check_text_files(source)
  read = lambda name: [tuple(s.decode() for s in source.open(name)[i])
                       for i in range(len(source.open(name)))]
  assert read("b") == pairs["bdev"] and read("b_train") == pairs["b"]
  assert read("dev") == pairs["a"]
  # Checking a run's text files before it starts opens no TFDS source (it may not be prepared).
  tfds_source = {"name": "k", "dataset": "bible_translate/kjv-sparv", "source_lang": "en",
                 "target_lang": "es", "data_dir": str(d / "no_tfds"), "weight": 1}
  cfg = _cfg(d, mixture=cfg.mixture + (tfds_source,), eval_sets={"k": {"source": "k"},
                                                                 "b": {"source": "b"}})
  sources.check_text_files(sources.DataSource.of(cfg))
  with pytest.raises(ValueError, match=r"data.mixture\[1\].dev_files.*missing.en"):
    sources.check_text_files(sources.DataSource.of(cfg.replace(eval_sets={"b": {"source": "b"}},
        mixture=(cfg.mixture[0], {**cfg.mixture[1], "dev_files": str(d / "missing.{lang}")}))))


@pytest.mark.parametrize("changes, message", [
    (dict(mixture_weights="7:x"), r"data.mixture_weights: expected 2 weights"),
    (dict(mixture_weights=(1, 2, 3)), r"data.mixture_weights: expected 2 weights"),
    (dict(mixture=({"weight": 1}, {"weight": 2})), r"data.mixture\[0\].name: expected a name no "
     "other source has"),
    (dict(mixture=({"name": "a", "weight": 0},)), r"data.mixture\[0\].weight: expected a "
     "positive number"),
    (dict(mixture=({"name": "a", "weight": 1, "vocab_size": 9},)), r"data.mixture\[0\]: expected "
     "a mapping of the keys name, weight"),
    (dict(mixture="a"), r"data.mixture: expected a sequence of sources"),
    (dict(mixture=({"name": "a", "weight": 1, "dataset": 5},)), r"config key "
     r"data.mixture\[0\].dataset: expected a non-empty string, got 5"),
    (dict(mixture=({"name": "a", "weight": 1, "dataset": "bible_translate/kjv-web"},)),
     r"data.mixture\[0\]: data.source_lang='en' is not a language"),
    (dict(mixture=None, mixture_weights="1:1"), r"data.mixture_weights: expected None without "
     "data.mixture"),
    (dict(eval_sets={"x": {"source": "c"}}), r"data.eval_sets.x.source: expected a source of "
     r"data.mixture \(a, b\)"),
    (dict(eval_sets={"x": {"source": "a", "split": "test"}}), r"data.mixture\[0\].test_files: "
     "expected the test split's text files"),
])
def test_a_bad_mixture_is_refused_in_one_line(corpora, changes, message):
  d, _ = corpora
  with pytest.raises(ValueError, match=message):
    _cfg(d, **changes)


def test_weights_from_the_command_line_and_a_sweep_grid(corpora):
  """data.mixture_weights='7:3' (a ratio) replaces the sources' weights; `--grid
  data.mixture_weights=1:1,7:3,9:1` expands to runs with those normalized weights, the mixture
  itself a command-line override of every run; config.json reads back the same section; a resume
  with other weights is refused."""
  d, _ = corpora
  mix = ("({'name': 'web', 'weight': 1}, {'name': 'kjv', 'dataset': "
         "'bible_translate/kjv-sparv', 'weight': 1})")
  overrides = [f"data.mixture={mix}"]
  grid = runs_lib.parse_grid(["data.mixture_weights=1:1,7:3,9:1"])
  runs = runs_lib.expand("configs/quickstart.py", [None], grid, seeds=2, overrides=overrides)
  got = [(r.seed, [w for _, w, _ in r.load().data.mixture_sources]) for r in runs]
  assert got == [(s, [a / (a + b), b / (a + b)]) for a, b in ((1, 1), (7, 3), (9, 1))
                 for s in (0, 1)]
  assert len({r.group for r in runs}) == 3
  config = runs[2].load()
  assert config.data.shuffle_seed == 0 and config.data.mixture[1]["dataset"] == (
      "bible_translate/kjv-sparv")
  assert config_lib.build(json.loads(json.dumps(config.to_dict()))).data == config.data
  # A resumed run may not change the weights (its checkpoints' data position is another's).
  assert workdir_lib.incompatible_keys(runs[0].load().to_dict(), runs[2].load().to_dict()) == [
      "data.mixture_weights"]


@pytest.mark.long
def test_two_processes_resume_their_mixtures_bit_exact(corpora, tmp_path):
  """2 JAX processes: each reads only its own shard of each source (host i the pairs of index
  i mod 2), draws its own sources within Binomial(n, w_i)'s bounds, and resumes bit-exact."""
  d, _ = corpora
  cfg = _cfg(d, weights=(0.6, 0.4))
  _tokenizer(cfg)  # in the shared vocab_dir, as the lead host trains it before the others read
  config_path = tmp_path / "data_config.json"
  config_path.write_text(json.dumps(sections.to_dict(cfg)))
  hosts = test_multihost.run_two_hosts(WORKER, config_path, tmp_path, timeout=180)
  for i, host in enumerate(hosts):
    assert host["index"] == i and host["same"]
    assert host["texts"] and all(int(t.split()[1]) % 2 == i for t in host["texts"])
    n = host["stats"]["examples_kept"]
    assert host["stats"]["from_a"] + host["stats"]["from_b"] == n
    assert _within_binomial(host["stats"]["from_a"], n, 0.6)
    assert _within_binomial(host["stats"]["from_b"], n, 0.4)
  assert hosts[0]["texts"][:20] != hosts[1]["texts"][:20]


def _copy_of(d, corpus):
  """The corpora's files a, b and bdev (both languages) copied into a new folder `corpus`, which a
  test may delete after training from it."""
  corpus.mkdir()
  for name in ("a", "b", "bdev"):
    for lang in ("en", "xx"):
      (corpus / f"{name}.{lang}").write_bytes((d / f"{name}.{lang}").read_bytes())
  return corpus


def test_a_trained_mixtures_vocabulary_is_found_without_its_files(corpora, tmp_path):
  """A workdir copied to a machine without the sources' text files still finds its vocabulary
  (the one mixture vocabulary of its languages and size there); one it never had is an error."""
  d, pairs = corpora
  corpus = _copy_of(d, tmp_path / "corpus")
  cfg = _cfg(corpus, vocab_dir=None)
  workdir = tmp_path / "run"
  trained = vocabulary.get_tokenizer(cfg, str(workdir), source=sources.DataSource.of(cfg))
  for path in corpus.iterdir():
    path.unlink()
  found = vocabulary.get_tokenizer(cfg, str(workdir), train=False)
  assert found.model_sha256 == trained.model_sha256
  assert found.encode(pairs["b"][0][0]) == trained.encode(pairs["b"][0][0])
  with pytest.raises(ValueError, match=r"data.mixture\[0\] \(a\): .*data.train_files"):
    vocabulary.get_tokenizer(cfg, str(tmp_path / "elsewhere"), train=False)


@pytest.mark.long  # starts worker processes and a batch process
def test_worker_processes_and_a_batch_process_give_a_mixtures_batches(corpora):
  """data.num_workers=1 (a worker process a source) and train.input=process (the pipeline in a
  process of its own) make the same batches and counts as the pipeline in this process."""
  from tfm.data import batch_process  # pylint: disable=import-outside-toplevel
  d, _ = corpora
  cfg = _cfg(d)
  tok = _tokenizer(cfg)
  source = sources.DataSource.of(cfg)
  made = []
  for build in (lambda: pipeline.train_iterator(cfg, source, tok),
                lambda: pipeline.train_iterator(cfg.replace(num_workers=1), source, tok),
                lambda: batch_process.BatchProcess(cfg, source, tok)):
    it = build()
    batches = [next(it) for _ in range(8)]
    made.append((batches, {k: v for k, v in it.stats().items() if k.startswith("from_")}))
    it.close()
  for batches, counts in made[1:]:
    assert counts == made[0][1] and counts["from_a"] > 0 and counts["from_b"] > 0
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(made[0][0], batches) for k in a)


def test_a_source_of_train_files_alone_has_no_dev_split_of_the_sections(corpora):
  """A source that gives its own train_files starts without the section's dev and test files (as
  one naming another dataset does): {'source': 'b'} on a source without dev_files is refused in one
  line naming data.mixture[1].dev_files, not evaluated on the section's dev files as b's."""
  d, _ = corpora
  only_train = ({"name": "a", "weight": 1}, {"name": "b", "train_files": str(d / "b.{lang}"),
                                             "weight": 1})
  cfg = _cfg(d, mixture=only_train)
  (_, _, a), (_, _, b) = cfg.mixture_sources
  assert a.dev_files == cfg.dev_files and (b.dev_files, b.test_files) == (None, None)
  with pytest.raises(ValueError, match=r"^config key data.mixture\[1\].dev_files: expected the dev "
                                       "split's text files"):
    _cfg(d, mixture=only_train, eval_sets={"dev": "dev", "b": {"source": "b"}})


def test_a_sources_unprepared_dataset_is_named_as_its_key(corpora):
  """sources.prepare's one-line errors for a mixture's source name that source's key
  (data.mixture[1].data_dir, .manual_dir), the one to set, not the section's."""
  d, _ = corpora
  kjv = {"name": "k", "dataset": "bible_translate/kjv-sparv", "source_lang": "en",
         "target_lang": "es", "weight": 1}
  for key, value in (("data_dir", str(d / "no_tfds")), ("manual_dir", str(d / "no_sword"))):
    cfg = _cfg(d, mixture=({"name": "a", "weight": 1}, {**kjv, key: value}))
    with pytest.raises(FileNotFoundError, match=rf"^data.mixture\[1\].{key}='{value}' does not "
                                                "exist; expected"):
      sources.prepare(sources.DataSource.of(cfg))
  # The section's own dataset (evaluated, prepared after its sources) keeps its key.
  cfg = DataConfig(dataset="bible_translate/kjv-sparv", source_lang="en", target_lang="es",
                   data_dir=str(d / "no_tfds"), mixture=({"name": "t", "dataset": "text",
                                                          "train_files": str(d / "b.{lang}"),
                                                          "weight": 1},))
  with pytest.raises(FileNotFoundError, match=r"^data.data_dir='.*no_tfds' does not exist"):
    sources.prepare(sources.DataSource.of(cfg))


def test_weights_near_the_float_maximum_normalize_as_any_others(corpora):
  """Each weight is finite and positive, so 1e308:1e308 is the ratio 1:1 (its plain sum is inf,
  which normalized every weight to 0 and drew the last source only)."""
  d, _ = corpora
  for given in ("1e308:1e308", (1e308, 3e307)):
    want = (0.5, 0.5) if isinstance(given, str) else (10 / 13, 3 / 13)
    got = [w for _, w, _ in _cfg(d, mixture_weights=given).mixture_sources]
    assert np.allclose(got, want, rtol=1e-12, atol=0), got


def test_a_run_starts_from_a_copied_mixtures_workdir(corpora, tmp_path):
  """train.init_from a mixture's workdir copied without the sources' text files takes its
  vocabulary (found as `tfm eval` finds it), not an error about the other run's files."""
  from tfm.train import checkpoint as ckpt_lib  # pylint: disable=import-outside-toplevel
  from tfm.train import init_from  # pylint: disable=import-outside-toplevel
  d, _ = corpora
  corpus = _copy_of(d, tmp_path / "corpus")
  overrides = ["data.dataset=text", "data.source_lang=en", "data.target_lang=xx",
               "data.vocab_size=150", "model.vocab_size=150", "data.max_length=32",
               f"data.dev_files={d}/bdev.{{lang}}"]
  mix = (f"data.mixture=({{'name': 'a', 'weight': 7, 'train_files': '{corpus}/a.{{lang}}'}}, "
         f"{{'name': 'b', 'weight': 3, 'train_files': '{corpus}/b.{{lang}}'}})")
  mixed = config_lib.load_config("configs/quickstart.py", overrides + [
      mix, f"data.train_files={corpus}/a.{{lang}}"])
  run = tmp_path / "run"
  trained = vocabulary.get_tokenizer(mixed.data, str(run), source=sources.DataSource.of(mixed.data))
  ckpt_lib.write_config(run, mixed.to_dict())
  for path in corpus.iterdir():
    path.unlink()
  one = config_lib.load_config("configs/quickstart.py", overrides + [
      f"data.train_files={d}/b.{{lang}}", f"train.init_from={run}"])
  assert init_from.share_vocabulary(one, str(tmp_path / "tuned")) == trained.model_sha256
  mine = vocabulary.get_tokenizer(one.data, str(tmp_path / "tuned"), train=False)
  assert mine.model_sha256 == trained.model_sha256
