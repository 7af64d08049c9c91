"""tfm/export/lm_parity.py's masked-piece figures (fast tier, no torch): masked_counts against a
count written out position by position, on two logit arrays that differ where the test says."""

import math

import numpy as np

from tfm.export import lm_parity


def _by_hand(ours, theirs, targets):
  scored = same = 0
  nll = 0.0
  for r in range(targets.shape[0]):
    for p in range(targets.shape[1]):
      if targets[r, p] == 0:
        continue
      scored += 1
      a, b = list(ours[r, p]), list(theirs[r, p])
      same += a.index(max(a)) == b.index(max(b))
      nll += math.log(sum(math.exp(float(x)) for x in a)) - float(a[targets[r, p]])
  return scored, same, nll


def test_masked_counts_count_scored_pieces_and_their_argmaxes():
  rng = np.random.default_rng(0)
  rows, length, vocab = 3, 7, 11
  ours = rng.normal(size=(rows, length, vocab)).astype(np.float32)
  targets = np.zeros((rows, length), np.int32)
  scored = [(0, 1), (0, 4), (1, 0), (1, 6), (2, 2), (2, 3)]
  for r, p in scored:
    targets[r, p] = rng.integers(4, vocab)
  theirs = ours + np.float32(1e-6)
  # a different argmax at two scored positions and at two unscored ones (not counted)
  for r, p in [(0, 4), (2, 3), (0, 0), (1, 3)]:
    runner_up = int(np.argsort(ours[r, p])[-2])
    theirs[r, p, runner_up] = ours[r, p].max() + 1.0
  found = lm_parity.masked_counts(ours, theirs, targets)
  scored_n, same, nll = _by_hand(ours, theirs, targets)
  assert (found["masked_pieces"], found["masked_argmax_identical"]) == (scored_n, same) == (6, 4)
  assert math.isclose(found["nll"], nll, rel_tol=1e-9)
  # identical logits: every scored piece agrees; none scored: nothing counted
  assert lm_parity.masked_counts(ours, ours, targets)["masked_argmax_identical"] == 6
  empty = lm_parity.masked_counts(ours, theirs, np.zeros_like(targets))
  assert empty == {"masked_pieces": 0, "masked_argmax_identical": 0, "nll": 0.0}
