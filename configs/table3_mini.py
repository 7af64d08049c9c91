"""Table 3 at reduced scale on the offline Bible corpus (English WEB -> Spanish 1909).

Every row is the paper's row (configs/table3.py) with its widths divided by 8 (d_model, d_ff, d_k,
d_v) and its depth by 2 (N), so each keeps its ratios to base: heads x d_k constant in A, d_k alone
in B, N, d_model and d_ff by the paper's factors in C, dropout and label smoothing as in D, learned
positions in E, big scaled the same way. Base becomes N=3, d_model=64, d_ff=256, h=8, d_k=d_v=8.
Every row sees the same tokens (same steps and batch), as the issue asks; the paper trained big
three times longer.

  --config=configs/table3_mini.py          every row (tfm sweep, tfm params)
  --config=configs/table3_mini.py:C5       one row
Sized so that all 20 rows x 2 seeds train and evaluate in about 2 hours on a 2-core CPU with
`tfm sweep --parallel=2` (experiments/results/table3_mini/).
"""

from configs import table3

WIDTH, DEPTH = 8, 2  # paper / mini
ROWS = table3.ROWS


def scaled(c):
  """The paper's model of a row, at 1 / WIDTH of its widths and 1 / DEPTH of its depth."""
  m = c.model
  for key in ("d_model", "d_ff", "d_k", "d_v"):
    m[key] = m[key] // WIDTH
  for key in ("num_encoder_layers", "num_decoder_layers"):
    m[key] = m[key] // DEPTH
  m.vocab_size = 2000  # a BPE vocabulary for the Bible corpus at this width (paper: 37000)
  m.dtype = "float32"  # CPUs compute in float32
  m.max_length = 128 + 50  # row E's table: data.max_length, and decoding's + 50
  return c


def get_config(row=None):
  c = scaled(table3.get_config(row))
  c.data.update(
      dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",  # offline corpus
      vocab_size=2000,  # = model.vocab_size
      max_length=128,  # verses are short: 99.9% fit
      tokens_per_batch=2048,  # 16 rows of 128 tokens a side (paper: ~25000)
      eval_max_examples=None)  # dev perplexity on every dev verse (953)
  c.train.update(
      steps=600,  # ~1.2M target tokens, about 1.2 epochs of the corpus
      warmup_steps=200,  # the paper's schedule and scale; peak lr (64 x 200)^-0.5 = 8.8e-3 at base
      log_every=100, eval_every=600, checkpoint_every=300,
      keep_checkpoints=2, average_checkpoints=1)  # Table 3 rows use no averaging
  c.eval.update(
      bleu_every=0,  # BLEU once, by the sweep's tfm eval
      bleu_examples=200)  # the first 200 dev verses
  return c
