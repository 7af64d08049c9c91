"""Task span's corruption (tfm/data/spans.py) against T5's rules written here independently, in
plain Python: the counts, T5's length arithmetic (568 raw tokens and targets of 114 for inputs of
512), each row's spans (their count, lengths, alternation, the sentinels counting down from the
top of the vocabulary, the original row rebuilt from inputs and targets), the spans' statistics
over many rows, and the refusals."""

import math

import numpy as np
import pytest

from tfm import tasks
from tfm.config import Config
from tfm.data import spans, vocabulary
from tfm.data.config import DataConfig
from tfm.model.config import ModelConfig

EOS = 1


def ref_counts(n, density, mean):
  """(noise tokens, noise spans) by the rules: round(n d) clamped to [1, n - 1]; round(noise / m),
  at least 1 (and at most the kept tokens)."""
  noise = int(round(n * density))
  noise = max(1, min(noise, n - 1))
  count = max(1, int(round(noise / mean)))
  return noise, min(count, n - noise)


def ref_lengths(inputs_length, density, mean):
  """T5's random_spans_helper by brute force: the longest raw row whose inputs (kept tokens, a
  sentinel a span, EOS) fit, and its targets' length (noise, a sentinel a span, EOS)."""
  best = None
  for n in range(2, 3 * inputs_length):
    noise, count = ref_counts(n, density, mean)
    if n - noise + count + 1 <= inputs_length:
      best = (n, noise + count + 1)
  return best


def test_t5s_arithmetic_for_inputs_of_512():
  assert spans.lengths(512, 0.15, 3) == (568, 114) == ref_lengths(512, 0.15, 3)
  assert spans.noise_counts(568, 0.15, 3) == (85, 28)  # 483 kept + 28 sentinels + EOS = 512
  cfg = DataConfig(text_key="en", max_length=512, vocab_size=32128)
  assert spans.geometry(cfg) == (568, 114, 28)
  span = tasks.get("span")
  assert span.sentinels(cfg) == 28 and span.stream_length(cfg) == 568
  assert vocabulary.pieces(cfg, span) == 32100 and vocabulary.pieces(cfg, tasks.get("lm")) == 32128


@pytest.mark.parametrize("density,mean", [(0.15, 3), (0.1, 2), (0.3, 5), (0.5, 1), (0.15, 1.5)])
def test_lengths_are_the_longest_row_that_fits(density, mean):
  for length in list(range(3, 80)) + [128, 256, 511, 1024]:
    assert spans.lengths(length, density, mean) == ref_lengths(length, density, mean), length


def _parse(batch, r, first_sentinel, sentinels):
  """A row's inputs and targets, EOS checked and stripped, split at the sentinels: (kept spans,
  noise spans, the sentinels of each side in order)."""
  def side(key):
    real = batch[key][r][batch[f"{key}_segmentation"][r] == 1].tolist()
    assert real and real[-1] == EOS
    assert batch[f"{key}_position"][r][:len(real)].tolist() == list(range(len(real)))
    return real[:-1]
  is_sentinel = lambda t: first_sentinel - sentinels < t <= first_sentinel
  def split(values):
    parts, marks = [[]], []
    for t in values:
      if is_sentinel(t):
        marks.append(t)
        parts.append([])
      else:
        parts[-1].append(t)
    return parts, marks
  kept, in_marks = split(side("inputs"))
  noise, out_marks = split(side("targets"))
  return kept, noise, in_marks, out_marks


@pytest.mark.parametrize("inputs_length", [3, 12, 32, 128])
def test_each_row_follows_t5s_rules_and_rebuilds_the_original(inputs_length):
  raw, targets_length = ref_lengths(inputs_length, 0.15, 3)
  need = ref_counts(raw, 0.15, 3)[1]
  vocab = 1000
  corrupt = spans.SpanCorrupter(density=0.15, mean_span=3, inputs_length=inputs_length,
                                vocab_size=vocab, sentinels=need, seed=3, process_index=1)
  rng = np.random.default_rng(0)
  rows = 40
  ids = rng.integers(1, vocab - need, (rows, raw)).astype(np.int32)  # EOS (1) among them
  real = np.full(rows, raw)
  real[-6:] = np.minimum([0, 1, 2, 3, raw // 2, raw - 1], raw)  # a stream's last rows: shorter,
  # and empty
  segmentation = (np.arange(raw) < real[:, None]).astype(np.int32)
  ids *= segmentation
  batch = corrupt({"targets": ids, "targets_segmentation": segmentation}, 7)
  assert batch["inputs"].shape == (rows, inputs_length)
  assert batch["targets"].shape == (rows, targets_length)
  for r, n in enumerate(real):
    if n == 0:
      assert not any(batch[k][r].any() for k in batch)
      continue
    kept, noise, in_marks, out_marks = _parse(batch, r, vocab - 1, need)
    noise_count, count = ref_counts(max(n, 2), 0.15, 3)
    if n == 1:  # masked as a row of two, cut to one: no noise left
      assert kept == [[ids[r, 0]]] and in_marks == [] and out_marks == [vocab - 1]
      continue
    assert in_marks == out_marks == [vocab - 1 - i for i in range(count)]  # counting down
    assert len(kept) == len(noise) == count + 1
    assert kept[-1] == [] and noise[0] == []  # inputs end with a sentinel; targets start with one
    assert all(kept[:-1]) and all(noise[1:])  # every span holds a token: kept first, alternating
    assert sum(map(len, noise)) == noise_count
    rebuilt = sum((k + z for k, z in zip(kept[:-1], noise[1:])), [])
    assert rebuilt == ids[r, :n].tolist()
    assert sum(map(len, kept)) + len(in_marks) == n - noise_count + count  # and EOS: T5's lengths
    assert sum(map(len, noise)) + len(out_marks) == noise_count + count


def test_spans_over_many_rows_have_t5s_statistics():
  """Rows of 568 (inputs of 512): every row has 85 noise tokens in 28 spans; the first position
  is never noise and the last always is (kept spans first, noise last); in the middle each
  position is noise with probability 85/568 within 6 binomial sigmas; a span's length is
  distributed as one part of a uniformly random composition of 85 into 28 parts,
  P(len = j) = C(85 - j - 1, 26) / C(84, 27)."""
  rng = np.random.default_rng(11)
  rows = 3000
  masks = np.array([spans.noise_mask(rng, 568, 0.15, 3) for _ in range(rows)])
  assert (masks.sum(1) == 85).all()
  starts = masks & ~np.pad(masks, ((0, 0), (1, 0)))[:, :-1]
  assert (starts.sum(1) == 28).all()
  assert not masks[:, 0].any() and masks[:, -1].all()
  p, sigma = 85 / 568, math.sqrt(85 / 568 * (1 - 85 / 568) / rows)
  middle = masks[:, 142:426].mean(0)
  assert np.abs(middle - p).max() < 6 * sigma
  lengths = []
  for mask in masks[:300]:
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(int), [0]])))
    lengths += (edges[1::2] - edges[::2]).tolist()
  observed = np.bincount(lengths, minlength=9)[1:]
  expected_p = [math.comb(85 - j - 1, 26) / math.comb(84, 27) for j in range(1, 9)]
  observed = np.append(observed[:7], observed[7:].sum())
  expected = len(lengths) * np.append(expected_p[:7], 1 - sum(expected_p[:7]))
  assert ((observed - expected) ** 2 / expected).sum() < 40  # chi2(7) > 40: ~1e-6


def test_a_counter_and_a_seed_give_their_own_spans_and_the_same_again():
  make = lambda seed, process=0: spans.SpanCorrupter(
      density=0.15, mean_span=3, inputs_length=32, vocab_size=300, sentinels=2, seed=seed,
      process_index=process)
  ids = np.arange(4 * 34, dtype=np.int32).reshape(4, 34) + 3
  batch = {"targets": ids, "targets_segmentation": np.ones_like(ids)}
  first = make(0)(batch, 5)
  assert all(np.array_equal(first[k], make(0)(batch, 5)[k]) for k in first)
  for other in (make(0)(batch, 6), make(1)(batch, 5), make(0, 1)(batch, 5)):
    assert not np.array_equal(other["inputs"], first["inputs"])


def test_refusals_name_the_key():
  with pytest.raises(ValueError, match=r"^config key data.noise_density: expected a number in "
                     r"\(0, 1\)"):
    DataConfig(noise_density=0.0)
  with pytest.raises(ValueError, match=r"^config key data.noise_density: "):
    DataConfig(noise_density=1)
  with pytest.raises(ValueError, match=r"^config key data.mean_noise_span_length: expected a "
                     r"number >= 1"):
    DataConfig(mean_noise_span_length=0.5)
  span = tasks.get("span")
  with pytest.raises(ValueError) as raised:
    span.check_data(DataConfig(text_key="en", max_length=512, vocab_size=30))
  assert str(raised.value) == (
      "config keys task='span' and data.vocab_size=30: its top 28 ids are the sentinels a row "
      "of 568 tokens needs (inputs 512, targets 114), which leaves 2 pieces; expected "
      "data.vocab_size >= 36")
  with pytest.raises(ValueError, match=r"^config keys task='span' and data.max_length=2: "):
    span.check_data(DataConfig(text_key="en", max_length=2))
  with pytest.raises(ValueError, match=r"^config keys task='span' and data.text_key=None: "):
    span.check_data(DataConfig())
  with pytest.raises(ValueError, match=r"^config keys task='span' and model.architecture="
                     r"'decoder_only': span needs 'encoder_decoder'"):
    Config(model=ModelConfig(architecture="decoder_only", num_encoder_layers=0),
           data=DataConfig(text_key="en"), task="span")
  with pytest.raises(ValueError, match=r"^config keys task='span' and data.vocab_size=30: "):
    Config(model=ModelConfig(vocab_size=30), data=DataConfig(text_key="en", max_length=512,
                                                             vocab_size=30), task="span")
  with pytest.raises(ValueError, match=r"^the vocabulary of \S+ has 290 pieces and 2 sentinels "
                     r"above them but model.vocab_size is 300; set model.vocab_size and "
                     r"data.vocab_size to 292"):
    vocabulary.check_size(DataConfig(), 292, 300, sentinels=2)
  with pytest.raises(ValueError, match="a vocabulary with 1 sentinels for rows that need 2"):
    spans.SpanCorrupter(density=0.15, mean_span=3, inputs_length=32, vocab_size=300,
                        sentinels=1, seed=0)
