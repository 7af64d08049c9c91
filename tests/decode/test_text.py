"""Texts through the decoders (tfm/decode/text.py): every source decoded whole where the positions
allow it; a learned table too short for a source refuses it, or cuts it only when asked, and says
which."""

import jax
import numpy as np

from tests.model.helpers import draw, tiny
from tfm.decode.score import make_score_fn
from tfm.decode.text import score_texts, source_limit, table_rows, translate_texts
from tfm.decode.translate import make_translate_fn

EXTRA = 3  # max_extra_length


class Numbers:
  """A tokenizer of space-separated ids: encode('5 6') = [5, 6, EOS]; decode joins them back."""

  @staticmethod
  def encode(text):
    return [int(w) for w in text.split()] + [1]

  @staticmethod
  def decode(ids):
    return " ".join(map(str, ids))


def _setup(**changes):
  cfg = tiny(vocab_size=12, d_model=16, num_heads=2, d_k=8, d_v=8, num_encoder_layers=1,
             num_decoder_layers=1, **changes)
  x = np.ones((1, 4), np.int32)
  model, variables = draw(cfg, x, x, seed=5)
  return cfg, model, variables["params"], make_translate_fn(model, beam_size=1,
                                                            max_extra_length=EXTRA)


def _direct(compiled, params, ids, length):
  """The search's tokens for `ids` alone, padded to `length`: a batch of two, the other empty."""
  inputs = np.zeros((2, length), np.int32)
  inputs[0, :len(ids)] = ids
  tokens, scores = compiled[inputs.shape](params, inputs, jax.random.PRNGKey(0))
  assert np.isfinite(np.asarray(scores)[0])
  return Numbers.decode([int(t) for t in np.asarray(tokens)[0] if t])


def _ids(n, first=3):
  return " ".join(str(first + i % 8) for i in range(n))


def test_a_source_longer_than_any_training_row_is_decoded_whole():
  """Sinusoids take any length: a 40-piece source (training rows of 16, say) is decoded whole,
  as the search decodes it given directly, beside a short one; nothing refused or cut."""
  cfg, _, params, translate = _setup()
  assert source_limit(cfg, EXTRA) is None and table_rows(cfg) is None
  texts, compiled = [_ids(39), _ids(3)], {}
  out, stats = translate_texts(translate, params, Numbers, texts, batch_size=2, compiled=compiled)
  assert (stats["refused"], stats["truncated"]) == ([], [])
  assert list(compiled) == [(2, 48)]  # 40 pieces padded to 48: the whole source
  for text, got in zip(texts, out):
    assert got == _direct(compiled, params, Numbers.encode(text), 48)


def test_a_learned_table_refuses_a_longer_source_or_cuts_it_when_asked():
  """A learned table of 20 rows, outputs of up to the source + 3: sources of up to 17 pieces.
  A 25-piece source is refused (an empty translation, its index in `refused`) or, with truncate,
  cut to 16 pieces and EOS and decoded so (`truncated`); the short one is decoded as it is. No
  batch is padded past the table (the gather past it would read no row). Scoring refuses a pair
  whose target passes the table, whatever truncate says."""
  cfg, model, params, translate = _setup(positions="learned", max_length=20)
  limit = source_limit(cfg, EXTRA)
  assert (limit, table_rows(cfg)) == (17, 20)
  texts = [_ids(3), _ids(24)]
  compiled = {}
  out, stats = translate_texts(translate, params, Numbers, texts, batch_size=2,
                               max_input_length=limit, compiled=compiled)
  assert (stats["refused"], stats["truncated"]) == ([1], [])
  assert out[1] == "" and out[0] == _direct(compiled, params, Numbers.encode(texts[0]), 16)
  out, stats = translate_texts(translate, params, Numbers, texts, batch_size=2,
                               max_input_length=limit, truncate=True, compiled=compiled)
  assert (stats["refused"], stats["truncated"]) == ([], [1])
  assert sorted(compiled) == [(2, 16), (2, 17)]  # never past the table's 20 - 3
  cut = Numbers.encode(texts[1])[:16] + [1]
  assert out[1] == _direct(compiled, params, cut, 17)
  pairs = [(_ids(3), _ids(24)), (_ids(24), _ids(3)), (_ids(3), _ids(3))]
  scored, stats = score_texts(make_score_fn(model), params, Numbers, pairs, batch_size=2,
                              max_length=20, truncate=True)
  assert (stats["refused"], stats["truncated"]) == ([0], [1])
  assert scored[0] is None and all(np.isfinite(s[0]) for s in scored[1:])
