"""Label-smoothed cross-entropy against an independent numpy computation; padding is excluded."""

import jax.numpy as jnp
import numpy as np
import pytest

from tfm.train import loss
from tfm.train.loss import loss_sums, per_token, row_chunks, target_weights, token_losses


@pytest.fixture(autouse=True, params=["whole rows", "rows in parts"])
def row_parts(request, monkeypatch):
  """Every test runs with each vocabulary row reduced whole and, as on CPUs for long rows, in parts
  (CPU_ROW 3: the vocabularies below, of 4, 5, 9 and 11 ids, are cut into 2, 5, 3 and 11 parts)."""
  if request.param == "rows in parts":
    monkeypatch.setattr(loss, "CPU_ROW", 3)


def test_row_chunks(monkeypatch):
  """CPUs cut rows longer than CPU_ROW into the fewest equal parts no longer than it; nothing else
  is cut."""
  monkeypatch.setattr(loss, "CPU_ROW", 16384)
  assert row_chunks(37000, "cpu") == 4  # the paper's vocabulary: 4 x 9250
  assert row_chunks(32768, "cpu") == 2
  assert row_chunks(8000, "cpu") == row_chunks(16384, "cpu") == 1
  assert row_chunks(37000, "tpu") == row_chunks(37000, "gpu") == 1
  assert row_chunks(40009, "cpu") == 1  # a prime: no part divides it


def numpy_log_softmax(logits):
  shifted = logits - logits.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def numpy_smoothed(logits, targets, eps):
  """-sum_v q(v) log p(v) with q = 1 - eps on the target and eps / (V - 1) on every other id."""
  vocab = logits.shape[-1]
  q = np.full(logits.shape, eps / (vocab - 1))
  np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
  return -(q * numpy_log_softmax(logits)).sum(-1)


@pytest.fixture
def example():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 7, 11)).astype(np.float64) * 3
  targets = rng.integers(1, 11, size=(3, 7))
  targets[0, 5:] = 0  # padding
  targets[2, 3:] = 0
  return logits, targets


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_matches_numpy(example, eps):
  logits, targets = example
  smoothed, nll, _ = token_losses(jnp.asarray(logits, jnp.float32), jnp.asarray(targets), eps)
  np.testing.assert_allclose(smoothed, numpy_smoothed(logits, targets, eps), rtol=1e-5)
  expected_nll = -np.take_along_axis(numpy_log_softmax(logits), targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(nll, expected_nll, rtol=1e-5)


def test_sums_exclude_padding(example):
  logits, targets = example
  weights = target_weights(jnp.asarray(targets))
  sums = loss_sums(jnp.asarray(logits, jnp.float32), jnp.asarray(targets), weights, 0.1)
  real = targets != 0
  assert float(sums["tokens"]) == real.sum() == 21 - 2 - 4
  np.testing.assert_allclose(sums["loss"], numpy_smoothed(logits, targets, 0.1)[real].sum(), rtol=1e-5)
  # Whatever the model predicts at padded positions does not count.
  noisy = np.where(real[..., None], logits, 1e3 * np.random.default_rng(1).normal(size=logits.shape))
  sums2 = loss_sums(jnp.asarray(noisy, jnp.float32), jnp.asarray(targets), weights, 0.1)
  for key in ("loss", "nll", "correct", "tokens"):
    assert float(sums2[key]) == pytest.approx(float(sums[key]), rel=1e-6)


def test_segmentation_zero_is_padding():
  targets = jnp.array([[5, 6, 7, 8]])
  np.testing.assert_array_equal(target_weights(targets, jnp.array([[1, 1, 2, 0]])), [[1, 1, 1, 0]])
  np.testing.assert_array_equal(target_weights(jnp.array([[5, 0, 7, 0]])), [[1, 0, 1, 0]])


def test_per_token_and_perplexity(example):
  logits, targets = example
  sums = loss_sums(jnp.asarray(logits, jnp.float32), jnp.asarray(targets),
                   target_weights(jnp.asarray(targets)), 0.1)
  metrics = per_token(sums)
  real = targets != 0
  nll = -np.take_along_axis(numpy_log_softmax(logits), targets[..., None], -1)[..., 0][real].mean()
  assert float(metrics["nll"]) == pytest.approx(nll, rel=1e-5)
  assert float(metrics["perplexity"]) == pytest.approx(np.exp(nll), rel=1e-5)
  assert float(metrics["accuracy"]) == pytest.approx((logits.argmax(-1) == targets)[real].mean())
  empty = per_token({k: jnp.zeros(()) for k in ("loss", "nll", "correct", "tokens")})
  assert float(empty["loss"]) == 0.0 and float(empty["perplexity"]) == 1.0


def test_smoothed_loss_minimum_is_the_entropy_of_q():
  """With p = q the loss equals H(q) > 0: we report H(q, p), not H(q, p) - H(q)."""
  vocab, eps = 5, 0.1
  q = np.full(vocab, eps / (vocab - 1))
  q[2] = 1 - eps
  smoothed, _, _ = token_losses(jnp.log(jnp.asarray(q, jnp.float32))[None, None],
                                       jnp.array([[2]]), eps)
  assert float(smoothed[0, 0]) == pytest.approx(-(q * np.log(q)).sum(), rel=1e-5)


def numpy_softmax(logits):
  return np.exp(numpy_log_softmax(logits))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradients_match_numpy(example, eps):
  """The hand-written backward pass: d(sum w H(q, p))/dl = w (p - q), d(sum w nll)/dl = w (p - onehot)."""
  import jax
  logits, targets = example
  weights = target_weights(jnp.asarray(targets))
  q = np.full(logits.shape, eps / (logits.shape[-1] - 1))
  np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
  onehot = np.zeros(logits.shape)
  np.put_along_axis(onehot, targets[..., None], 1.0, axis=-1)
  w = np.asarray(weights)[..., None]
  for key, target_dist, scale in (("loss", q, 1.0), ("nll", onehot, 1.0), ("both", None, None)):
    def objective(x):
      sums = loss_sums(x, jnp.asarray(targets), weights, eps)
      return sums["loss"] + 2.0 * sums["nll"] if key == "both" else sums[key]
    grad = jax.grad(objective)(jnp.asarray(logits, jnp.float32))
    if key == "both":
      expected = w * (numpy_softmax(logits) - q) + 2.0 * w * (numpy_softmax(logits) - onehot)
    else:
      expected = scale * w * (numpy_softmax(logits) - target_dist)
    np.testing.assert_allclose(grad, expected, atol=2e-6)


def test_accuracy_takes_the_first_maximum_on_ties():
  """'correct' is argmax == target with argmax's tie rule (the lowest index of the maximum)."""
  logits = np.array([[[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 5.0, 5.0]]])
  targets = np.array([[2, 0, 2]])
  sums = loss_sums(jnp.asarray(logits, jnp.float32), jnp.asarray(targets),
                   jnp.ones(targets.shape), 0.1)
  assert float(sums["correct"]) == (logits.argmax(-1) == targets).sum() == 2


def test_accuracy_matches_numpy_argmax_with_many_ties():
  """Rounded logits tie often (values in 0..3): 'correct' counts argmax == target exactly, targets
  before, at and after the first maximum included."""
  rng = np.random.default_rng(3)
  logits = rng.integers(0, 4, (4, 50, 9)).astype(np.float32)
  targets = rng.integers(0, 9, (4, 50))
  targets[:, :9] = np.arange(9)  # every index is a target somewhere
  sums = loss_sums(jnp.asarray(logits), jnp.asarray(targets), jnp.ones(targets.shape), 0.1)
  expected = (logits.argmax(-1) == targets).sum()
  assert 0 < expected < targets.size
  assert float(sums["correct"]) == expected


def test_logits_far_apart_in_different_parts_stay_exact():
  """Each part of a row is shifted by its own maximum before exp: logits 1000 apart in different
  parts give the numpy values, not inf or 0."""
  logits = np.full((2, 3, 12), -500.0)
  logits[0, :, 2] = 500.0
  logits[1, :, 9] = 500.0
  logits[1, 1, 3] = 499.0
  targets = np.array([[2, 3, 9], [9, 3, 0]])
  smoothed, nll, _ = token_losses(jnp.asarray(logits, jnp.float32), jnp.asarray(targets),
                                         0.1)
  np.testing.assert_allclose(smoothed, numpy_smoothed(logits, targets, 0.1), rtol=1e-6)
  expected_nll = -np.take_along_axis(numpy_log_softmax(logits), targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(nll, expected_nll, rtol=1e-6, atol=1e-6)
