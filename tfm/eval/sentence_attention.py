"""What a trained model attends to for one sentence (the paper's figures 3-5).

The sentence is translated as `tfm translate` does (the Experiment's beam search, or greedy with
beam_size 1), whole (a sentence longer than a learned position table holds is refused, naming the
table); then one teacher-forced forward pass over source + translation returns the model's own
attention weights (Experiment.attention_weights_fn). Queries and keys carry SentencePiece pieces:
  encoder   queries and keys: the source pieces (ending in '</s>')
  decoder   queries: the translation pieces, each row the position that predicts that piece;
            keys: the decoder's inputs at those positions, '<s>' (the start token) then the
            translation shifted right, so row y_i sees the keys <s>, y_1, ..., y_{i-1}
  cross     queries as for decoder; keys: the source pieces
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from tfm.decode.text import source_limit
from tfm.eval.restore import Trained

START = "<s>"  # the label of the decoder's start token (id 0, the pad id)


@dataclasses.dataclass
class SentenceAttention:
  source: list[str]  # the source pieces, EOS included
  target: list[str]  # the translation's pieces, EOS included when the search ended on it
  translation: str  # the detokenized translation
  weights: dict[str, np.ndarray]  # kind -> float32 [layers, heads, q_length, kv_length]

  def labels(self, kind: str) -> tuple[list[str], list[str]]:
    """(query labels, key labels) of one kind of attention (see the module docstring)."""
    if kind == "encoder":
      return self.source, self.source
    if kind == "decoder":
      return self.target, [START] + self.target[:-1]
    return self.target, self.source


def sentence_attention(trained: Trained, text: str, beam_size: int | None = None) -> SentenceAttention:
  """Translates `text` with the workdir's model (beam_size: None = eval.beam_size, 1 = greedy) and
  returns the attention weights of every layer and head over source and translation."""
  exp, tokenizer = trained.experiment, trained.tokenizer
  source = tokenizer.encode(text)
  model, extra = trained.config.model, trained.config.eval.max_extra_length
  limit = source_limit(model, extra)
  if limit is not None and len(source) > limit:
    raise ValueError(f"--text: {len(source)} pieces, longer than the {limit} the learned position "
                     f"table holds (model.max_length {model.max_length} - eval.max_extra_length "
                     f"{extra}); expected a shorter sentence")
  rows = exp.decode_rows(1)  # one sentence, padded with empty rows to split over the batch shards
  inputs = np.zeros((rows, len(source)), np.int32)
  inputs[0] = source
  translate = exp.translate_fn(beam_size=beam_size, eos_id=tokenizer.eos_id)
  tokens, _ = jax.device_get(translate(trained.params, inputs, jax.random.PRNGKey(0)))
  target = [int(t) for t in tokens[0] if t != 0]
  targets = np.zeros((rows, max(len(target), 1)), np.int32)
  targets[0, :len(target)] = target
  weights = jax.device_get(exp.attention_weights_fn()(trained.params, inputs, targets))
  return SentenceAttention(tokenizer.pieces(source), tokenizer.pieces(target),
                           tokenizer.decode(target), {k: w[:, 0] for k, w in weights.items()})
