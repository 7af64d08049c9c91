"""BERT's masking (tfm/data/masking.py): the rates of selection and of each replacement within
binomial bounds, what is never selected, what the targets hold, and masks that are the same
wherever they must be (eval: every call, run and host count; train: every instance and resume)."""

import numpy as np
import pytest

from tfm import tasks
from tfm.data import masking, pipeline, sources
from tfm.data.stream import stream_batch

VOCAB, FIRST = 1000, 4  # a vocabulary with <mask> at 3: ordinary pieces 4..999


def _within(count, n, p, sigmas=5.0):
  """count ~ Binomial(n, p): |count - n p| <= sigmas * sqrt(n p (1 - p))."""
  return abs(count - n * p) <= sigmas * np.sqrt(n * p * (1 - p))


def _batches(rng, n=12, rows=32, length=256):
  """Stream batches of ordinary ids with EOS every ~20 tokens; the last batch half padding."""
  out = []
  for b in range(n):
    count = rows * length if b < n - 1 else rows * length // 2
    ids = rng.integers(FIRST, VOCAB, count)
    ids[rng.random(count) < 0.05] = 1
    out.append(stream_batch(ids.astype(np.int32), rows, length))
  return out


@pytest.mark.parametrize("rate,token_rate,random_rate", [(0.15, 0.8, 0.1), (0.4, 0.5, 0.3)])
def test_rates_are_berts_within_binomial_bounds(rate, token_rate, random_rate):
  masker = masking.Masker(rate=rate, token_rate=token_rate, random_rate=random_rate, mask_id=3,
                          first_ordinary_id=FIRST, vocab_size=VOCAB, seed=5)
  maskable = selected = to_mask = replaced = unchanged = 0
  for counter, batch in enumerate(_batches(np.random.default_rng(0))):
    ids, seg = batch["targets"], batch["targets_segmentation"]
    out = masker(batch, counter)
    inputs, targets = out["inputs"], out["targets"]
    sel = targets != 0
    # Never selected: EOS and padding; the targets are the original ids exactly where selected.
    assert not sel[(ids == 1) | (seg == 0)].any()
    assert np.array_equal(targets[sel], ids[sel])
    assert np.array_equal(inputs[~sel], ids[~sel])  # unselected tokens unchanged (padding 0)
    is_mask, changed = inputs == 3, (inputs != ids) & (inputs != 3)
    assert (inputs[changed] >= FIRST).all() and (inputs[changed] < VOCAB).all()
    for key in ("segmentation", "position"):
      assert np.array_equal(out[f"inputs_{key}"], batch[f"targets_{key}"])
      assert np.array_equal(out[f"targets_{key}"], batch[f"targets_{key}"])
    maskable += int(((seg == 1) & (ids != 1)).sum())
    selected += int(sel.sum())
    to_mask += int(is_mask[sel].sum())
    replaced += int(changed[sel].sum())
    unchanged += int((inputs == ids)[sel].sum())
  assert maskable > 80_000 and _within(selected, maskable, rate)
  # A random piece equals the original with probability 1 / (VOCAB - FIRST): unchanged.
  p_same = random_rate / (VOCAB - FIRST)
  assert _within(to_mask, selected, token_rate)
  assert _within(replaced, selected, random_rate - p_same)
  assert _within(unchanged, selected, 1 - token_rate - random_rate + p_same)


def test_random_replacements_are_uniform_over_ordinary_pieces():
  """Chi-square of the replacement ids over 12 bins of 83 ids each, [4, 1000): below the 1e-6
  tail."""
  masker = masking.Masker(rate=1.0, token_rate=0.0, random_rate=1.0, mask_id=3,
                          first_ordinary_id=FIRST, vocab_size=VOCAB, seed=1)
  ids = np.full(64 * 256, 7, np.int32)
  out = masker(stream_batch(ids, 64, 256), 0)["inputs"].reshape(-1)
  assert out.min() >= FIRST and out.max() < VOCAB
  counts = np.bincount((out - FIRST) // 83, minlength=12)
  expected = len(out) / 12
  assert len(counts) == 12 and ((counts - expected) ** 2 / expected).sum() < 50  # chi2(11): ~1e-6


def test_eval_masks_are_fixed_and_train_masks_follow_the_seed(lm_env):
  """mlm eval batches: identical for two calls, for another data.shuffle_seed, and for two hosts
  (merged); train batches: identical for two iterator instances, other for another seed."""
  cfg, tok = lm_env["cfg"], lm_env["mlm"]
  source = sources.DataSource.of(cfg)
  first = pipeline.eval_batches(cfg, source, tok, "dev", task=tasks.get("mlm"))
  again = pipeline.eval_batches(cfg.replace(shuffle_seed=9), source, tok, "dev", task=tasks.get("mlm"))
  halves = [pipeline.eval_batches(cfg, source, tok, "dev", task=tasks.get("mlm"), process_index=h,
                                  process_count=2) for h in (0, 1)]
  assert any((b["targets"] != 0).any() for b in first)
  for a, b, h0, h1 in zip(first, again, *halves):
    for key in a:
      assert np.array_equal(a[key], b[key])
      assert np.array_equal(a[key], np.concatenate([h0[key], h1[key]]))

  def train(seed):
    it = pipeline.train_iterator(cfg.replace(shuffle_seed=seed), source, tok, task=tasks.get("mlm"))
    try:
      return [next(it) for _ in range(3)]
    finally:
      it.close()

  one, two, other = train(0), train(0), train(1)
  assert all(np.array_equal(a["inputs"], b["inputs"]) for a, b in zip(one, two))
  assert not all(np.array_equal(a["inputs"], b["inputs"]) for a, b in zip(one, other))


def test_a_vocabulary_without_mask_is_refused():
  with pytest.raises(ValueError, match="needs a vocabulary with <mask>"):
    masking.Masker(rate=0.15, token_rate=0.8, random_rate=0.1, mask_id=None, first_ordinary_id=3,
                   vocab_size=100, seed=0)
