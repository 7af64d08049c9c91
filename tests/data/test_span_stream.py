"""Task span through the pipeline on the monolingual text corpus (tests/data/conftest.py's lm_env):
its vocabulary (lm's model of data.vocab_size less the sentinels, the sentinels above it), train
rows that rebuild lm's stream cut at T5's raw length, bit-exact resume, and dev spans fixed for
every evaluation whatever the rows of a batch or the hosts."""

import numpy as np
import pytest

import tfm_data_testlib as testlib
from tfm import tasks
from tfm.data import pipeline, sources, vocabulary

SPAN = tasks.get("span")
RAW, TARGETS = 34, 8  # inputs of 32 (lm_env's data.max_length): 34 raw tokens, 5 noise in 2 spans


@pytest.fixture(scope="module")
def span_env(lm_env):
  cfg = lm_env["cfg"]
  tok = vocabulary.get_tokenizer(cfg, source=sources.DataSource.of(cfg), task=SPAN)
  return cfg, tok


def _rebuilt(batch, tok):
  """Each row's raw tokens rebuilt from its inputs and targets by putting the spans back at
  their sentinels (written here: the sentinels are the ids >= the pieces' count)."""
  pieces = tok.vocab_size - tok.sentinels
  rows = []
  for r in range(len(batch["inputs"])):
    inputs = batch["inputs"][r][batch["inputs_segmentation"][r] == 1].tolist()[:-1]
    targets = batch["targets"][r][batch["targets_segmentation"][r] == 1].tolist()[:-1]
    spans, current = {}, None
    for t in targets:
      if t >= pieces:
        current = spans.setdefault(t, [])
      else:
        current.append(t)
    rows.append(sum(([t] if t < pieces else spans[t] for t in inputs), []))
  return rows


def test_the_vocabulary_is_lms_of_as_many_pieces_with_the_sentinels_above(span_env, lm_env):
  cfg, tok = span_env
  assert tok.sentinels == 2 and tok.vocab_size == cfg.vocab_size == 120
  lm = vocabulary.get_tokenizer(cfg.replace(vocab_size=118), task=tasks.get("lm"),
                                source=sources.DataSource.of(cfg))
  assert lm.model_sha256 == tok.model_sha256 and lm.vocab_size == 118
  assert tok.pieces([119, 118, 5]) == ["<extra_id_0>", "<extra_id_1>", lm.pieces([5])[0]]
  ids = lm.encode("the river")[:-1]
  assert tok.decode(ids + [119] + ids + [1, 7]) == "the river<extra_id_0>the river"


def test_train_rows_are_lms_stream_at_the_raw_length(span_env):
  cfg, tok = span_env
  lm_cfg = cfg.replace(max_length=RAW, tokens_per_batch=RAW * 4)  # the same 4 rows, raw
  source = sources.DataSource.of(cfg)
  span_it = pipeline.train_iterator(cfg, source, tok, task=SPAN)
  lm_it = pipeline.train_iterator(lm_cfg, source, tok, task=tasks.get("lm"))
  try:
    for _ in range(5):
      batch, raw = next(span_it), next(lm_it)
      assert batch["inputs"].shape == (4, 32) and batch["targets"].shape == (4, TARGETS)
      assert _rebuilt(batch, tok) == [row.tolist() for row in raw["targets"]]
      assert (batch["targets"] >= 118).sum() == 4 * 2  # two spans a row, each its sentinel
  finally:
    span_it.close()
    lm_it.close()


def _take(it, n):
  return [next(it) for _ in range(n)]


def test_resume_continues_bit_exactly_and_the_seed_counts(span_env):
  cfg, tok = span_env
  source = sources.DataSource.of(cfg)
  for hosts in (1, 2):
    keywords = dict(process_index=hosts - 1, process_count=hosts, task=SPAN)
    first = pipeline.train_iterator(cfg, source, tok, **keywords)
    second = pipeline.train_iterator(cfg, source, tok, **keywords)
    other = pipeline.train_iterator(cfg.replace(shuffle_seed=1), source, tok, **keywords)
    try:
      _take(first, 3)
      state = first.get_state()
      tail = _take(first, 3)
      second.set_state(state)
      assert testlib.same_batches(_take(second, 3), tail)
      assert not testlib.same_batches(_take(other, 6)[3:], tail)
    finally:
      for it in (first, second, other):
        it.close()


def test_dev_spans_are_fixed_whatever_the_rows_or_hosts(span_env, lm_env):
  cfg, tok = span_env
  source = sources.DataSource.of(cfg)
  batches = lambda c, **k: pipeline.eval_batches(c, source, tok, "dev", task=SPAN, **k)
  first = batches(cfg)
  rows = lambda bs, key: np.concatenate([b[key] for b in bs])
  for again in (batches(cfg), batches(cfg.replace(shuffle_seed=9)),
                batches(cfg.replace(tokens_per_batch=32 * 2))):
    for key in first[0]:
      whole, other = rows(first, key), rows(again, key)
      n = min(len(whole), len(other))
      assert np.array_equal(whole[:n], other[:n]) and not whole[n:].any() and not other[n:].any()
  halves = [batches(cfg, process_index=h, process_count=2) for h in (0, 1)]
  merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves)]
  assert testlib.same_batches(merged, batches(cfg, row_multiple=2))
  # every dev piece once, in order: the rebuilt rows are the dev texts' stream
  lines = [line.decode() for line in lm_env["lines"]["dev"]]
  stream = sum((tok.encode(line) for line in lines if line.strip()), [])
  rebuilt = sum((_rebuilt(b, tok) for b in first), [])
  assert sum(rebuilt, []) == stream
  assert all(len(row) == RAW for row in rebuilt[:len(stream) // RAW])
