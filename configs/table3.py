"""Table 3 of the paper: every row as a change of the base model, with the paper's figures.

  --config=configs/table3.py          the whole table (a sweep; `tfm params` prints every row)
  --config=configs/table3.py:C5       one row
Rows use no checkpoint averaging (PAPER.md, Inference). Perplexity is per word-piece on newstest2013.
What a row costs on one H100 (base's and big's steps measured) and on a v5e-16 (`tfm plan`), and
the one sweep command for the whole table: docs/table3.md, "At the paper's scale".
"""

from configs import base, big
from tfm.config import check_rows

# row: (changes to config.model, changes to config.train, paper PPL, paper BLEU, paper params in M;
# where the paper prints ".", same as base, the base's 65)
ROWS = {
    "base": ({}, {}, 4.92, 25.8, 65),
    "A1": (dict(num_heads=1, d_k=512, d_v=512), {}, 5.29, 24.9, 65),
    "A2": (dict(num_heads=4, d_k=128, d_v=128), {}, 5.00, 25.5, 65),
    "A3": (dict(num_heads=16, d_k=32, d_v=32), {}, 4.91, 25.8, 65),
    "A4": (dict(num_heads=32, d_k=16, d_v=16), {}, 5.01, 25.4, 65),
    "B1": (dict(d_k=16), {}, 5.16, 25.1, 58),
    "B2": (dict(d_k=32), {}, 5.01, 25.4, 60),
    "C1": (dict(num_encoder_layers=2, num_decoder_layers=2), {}, 6.11, 23.7, 36),
    "C2": (dict(num_encoder_layers=4, num_decoder_layers=4), {}, 5.19, 25.3, 50),
    "C3": (dict(num_encoder_layers=8, num_decoder_layers=8), {}, 4.88, 25.5, 80),
    "C4": (dict(d_model=256, d_k=32, d_v=32), {}, 5.75, 24.5, 28),
    "C5": (dict(d_model=1024, d_k=128, d_v=128), {}, 4.66, 26.0, 168),
    "C6": (dict(d_ff=1024), {}, 5.12, 25.4, 53),
    "C7": (dict(d_ff=4096), {}, 4.75, 26.2, 90),
    "D1": (dict(dropout_rate=0.0), {}, 5.77, 24.6, 65),
    "D2": (dict(dropout_rate=0.2), {}, 4.95, 25.5, 65),
    "D3": ({}, dict(label_smoothing=0.0), 4.67, 25.3, 65),
    "D4": ({}, dict(label_smoothing=0.2), 5.47, 25.7, 65),
    "E": (dict(positions="learned"), {}, 4.92, 25.7, 65),
    "big": (None, {}, 4.33, 26.4, 213),
}


def get_config(row=None):
  if row is None:
    c = base.get_config()
    c.rows = tuple(ROWS)  # a table: `tfm params` and `tfm sweep` run every row
    return c
  check_rows(row, tuple(ROWS), "configs/table3.py")
  model, train, ppl, bleu, params = ROWS[row]
  if model is None:
    c = big.get_config()
  else:
    c = base.get_config()
    c.model.update(model)
  c.train.update(train)
  c.train.average_checkpoints = 1  # Table 3 rows use no averaging (section 6.1)
  c.eval.bleu_examples = 0  # BLEU over all of newstest2013, as Table 3 (`tfm sweep`'s default limit)
  c.row = row
  c.paper = dict(ppl=ppl, bleu=bleu, params_m=params)
  return c
