"""T5's span corruption of a batch of token rows (task span), in numpy.

Raffel et al. (2020), section 3.1.4 and the t5 preprocessors `random_spans_noise_mask`,
`noise_span_to_unique_sentinel` and `random_spans_helper`, implemented from their description. A
raw row of n tokens (a slice of the stream of texts, each ending with EOS) with noise density d
(data.noise_density, 0.15) and mean noise span length m (data.mean_noise_span_length, 3):

  noise      = min(max(round(n d), 1), n - 1)         tokens dropped from the inputs
  spans      = max(round(noise / m), 1)               noise spans (and as many non-noise spans)
  the noise and the n - noise other tokens are each split into `spans` parts by a uniformly random
  segmentation (every part >= 1 token: spans - 1 cut points drawn without replacement), and the
  parts interleave starting with non-noise: keep_1 noise_1 keep_2 noise_2 ... keep_k noise_k.
  inputs     = keep_1 s_1 keep_2 s_2 ... keep_k s_k EOS     (each noise span -> one sentinel)
  targets    = s_1 noise_1 s_2 noise_2 ... s_k noise_k EOS  (each sentinel, then its span)
  s_i        = V - i, V the vocabulary's size (the model's): sentinels count down from the top

so len(inputs) = n - noise + spans + 1 and len(targets) = noise + spans + 1. round is Python's
(half to even, as T5's tf.round), on float64. A row of one token is masked as one of two and cut
to one (no noise), as T5 does. T5 leaves `spans` > n - noise undefined (a density near 1); here
`spans` is also at most n - noise, so that every non-noise part holds a token.

Lengths (`lengths`, T5's random_spans_helper): for inputs of L = data.max_length tokens the raw
rows are the longest n whose inputs fit, n - noise(n) + spans(n) + 1 <= L, and the targets'
length is noise(n) + spans(n) + 1 (L = 512, d = 0.15, m = 3: n = 568, targets 114). Both counts
grow with n, so a shorter row (the end of a finite stream) fits too; a full row needs
spans(n) sentinels, the vocabulary's top `sentinel_count` ids (tfm/data/vocabulary.py trains the
SentencePiece model with data.vocab_size minus them).

Randomness: a numpy PCG64 generator seeded with (seed, process_index, counter, _TAG), drawing the
rows in order: train batches use data.shuffle_seed and the stream batcher's batch counter (in the
iterator's checkpointed state: a resumed run draws the spans the run it continues would have);
evaluation draws the whole dev stream, cut into raw rows, as one batch with EVAL_SEED, so every run
and every evaluation scores the same spans whatever the rows of a batch.
"""

from __future__ import annotations

import numpy as np

from tfm.data.tokenizer import EOS_ID

EVAL_SEED = 20200723  # evaluation spans: the same for every run and every evaluation
_TAG = 0x7370616E  # keeps these streams apart from any other use of the same seeds


def noise_counts(length: int, density: float, mean_span: float) -> tuple[int, int]:
  """(noise tokens, noise spans) of a raw row of `length` >= 2 tokens (the module docstring)."""
  noise = min(max(round(length * density), 1), length - 1)
  spans = min(max(round(noise / mean_span), 1), length - noise)
  return noise, spans


def corrupted_lengths(length: int, density: float, mean_span: float) -> tuple[int, int]:
  """(inputs, targets) lengths, EOS included, of a raw row of `length` >= 2 tokens."""
  noise, spans = noise_counts(length, density, mean_span)
  return length - noise + spans + 1, noise + spans + 1


def lengths(inputs_length: int, density: float, mean_span: float) -> tuple[int, int]:
  """(raw row length, targets length) for inputs of `inputs_length` >= 3 tokens: T5's
  random_spans_helper (the longest raw row whose inputs fit, and its targets' length). Inputs of
  3 hold the shortest row with noise (2 tokens: one kept, one sentinel, EOS)."""
  if inputs_length < 3:
    raise ValueError(f"inputs of {inputs_length} tokens hold no corrupted row; expected >= 3")
  raw = max(2, inputs_length - 1)
  while corrupted_lengths(raw + 1, density, mean_span)[0] <= inputs_length:
    raw += 1
  return raw, corrupted_lengths(raw, density, mean_span)[1]


def geometry(data) -> tuple[int, int, int]:
  """(raw row length, targets length, sentinels a row needs) of the data config `data`
  (data.max_length is the inputs' length; data.noise_density, data.mean_noise_span_length)."""
  raw, targets = lengths(data.max_length, data.noise_density, data.mean_noise_span_length)
  return raw, targets, noise_counts(raw, data.noise_density, data.mean_noise_span_length)[1]


def random_segmentation(rng: np.random.Generator, items: int, segments: int) -> np.ndarray:
  """int64 [segments] part lengths, each >= 1, summing to `items`: a uniformly random composition
  (segments - 1 distinct cut points among the items - 1 gaps)."""
  cuts = np.sort(rng.choice(items - 1, segments - 1, replace=False)) + 1
  return np.diff(np.concatenate([[0], cuts, [items]])).astype(np.int64)


def noise_mask(rng: np.random.Generator, length: int, density: float,
               mean_span: float) -> np.ndarray:
  """bool [length]: the noise tokens of a raw row (the module docstring)."""
  n = max(length, 2)
  noise, spans = noise_counts(n, density, mean_span)
  noise_lengths = random_segmentation(rng, noise, spans)
  keep_lengths = random_segmentation(rng, n - noise, spans)
  interleaved = np.stack([keep_lengths, noise_lengths], axis=1).reshape(-1)  # keep first
  is_noise = np.repeat(np.tile([False, True], spans), interleaved)
  return is_noise[:length]


def corrupt_row(ids: np.ndarray, noise: np.ndarray, first_sentinel: int):
  """(inputs, targets) int32 of one raw row `ids` [n] and its noise mask [n]: each noise span of
  the inputs, and each kept span of the targets, replaced by one sentinel (first_sentinel,
  first_sentinel - 1, ...), then EOS."""
  def replaced(dropped: np.ndarray) -> np.ndarray:
    starts = dropped & ~np.concatenate([[False], dropped[:-1]])
    sentinels = first_sentinel + 1 - np.cumsum(starts)
    out = np.where(starts, sentinels, ids)
    return np.concatenate([out[starts | ~dropped], [EOS_ID]]).astype(np.int32)
  return replaced(noise), replaced(~noise)


def _row_batch(rows: int, length: int, values: list[np.ndarray], side: str) -> dict:
  """{side, side_segmentation, side_position: int32 [rows, length]}: `values` left-aligned."""
  out = {key: np.zeros((rows, length), np.int32)
         for key in (side, f"{side}_segmentation", f"{side}_position")}
  for r, row in enumerate(values):
    n = len(row)
    out[side][r, :n] = row
    out[f"{side}_segmentation"][r, :n] = 1
    out[f"{side}_position"][r, :n] = np.arange(n)
  return out


class SpanCorrupter:
  """Corrupts stream batches of raw rows: corrupter(batch, counter) -> the span batch.

  batch: {'targets', 'targets_segmentation': int32 [rows, raw_length], ...} (a stream batch,
  tfm/data/stream.py; a row's real tokens come first, segmentation 1). The result: 'inputs*' int32
  [rows, inputs_length], 'targets*' int32 [rows, targets_length] (tokens, segmentation 1 on them,
  positions 0..), rows without tokens all zero.
  """

  def __init__(self, *, density: float, mean_span: float, inputs_length: int, vocab_size: int,
               sentinels: int, seed: int, process_index: int = 0):
    self.density, self.mean_span = float(density), float(mean_span)
    self.inputs_length = int(inputs_length)
    self.raw_length, self.targets_length = lengths(self.inputs_length, density, mean_span)
    needed = noise_counts(self.raw_length, density, mean_span)[1]
    if sentinels < needed:
      raise ValueError(f"a vocabulary with {sentinels} sentinels for rows that need {needed} "
                       "(get_tokenizer(..., task=<span>) reserves them)")
    self.first_sentinel = int(vocab_size) - 1
    self.seed, self.process_index = int(seed), int(process_index)

  @classmethod
  def of(cls, cfg, tokenizer, *, seed: int, process_index: int = 0) -> "SpanCorrupter":
    """The corrupter of data config `cfg` (data.max_length, noise_density,
    mean_noise_span_length) and a vocabulary whose top `tokenizer.sentinels` ids are sentinels."""
    return cls(density=cfg.noise_density, mean_span=cfg.mean_noise_span_length,
               inputs_length=cfg.max_length, vocab_size=tokenizer.vocab_size,
               sentinels=tokenizer.sentinels, seed=seed, process_index=process_index)

  def generator(self, counter: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([self.seed, self.process_index, int(counter), _TAG]))

  def __call__(self, batch: dict[str, np.ndarray], counter: int) -> dict[str, np.ndarray]:
    ids, segmentation = batch["targets"], batch["targets_segmentation"]
    if ids.shape[1] > self.raw_length:
      raise ValueError(f"raw rows of {ids.shape[1]} tokens; the inputs of {self.inputs_length} "
                       f"hold rows of at most {self.raw_length}")
    rng = self.generator(counter)
    inputs, targets = [], []
    for row, real in zip(ids, segmentation):
      n = int(np.count_nonzero(real))
      if n == 0:
        inputs.append(row[:0])
        targets.append(row[:0])
        continue
      row_inputs, row_targets = corrupt_row(
          row[:n], noise_mask(rng, n, self.density, self.mean_span), self.first_sentinel)
      inputs.append(row_inputs)
      targets.append(row_targets)
    rows = len(ids)
    return {**_row_batch(rows, self.inputs_length, inputs, "inputs"),
            **_row_batch(rows, self.targets_length, targets, "targets")}
