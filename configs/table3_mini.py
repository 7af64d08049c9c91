"""Table 3 at reduced scale on the offline Bible corpus (English WEB -> Spanish 1909).

Every row is the paper's row (configs/table3.py) with its widths divided by 8 (d_model, d_ff, d_k,
d_v) and its depth by 2 (N), so each keeps its ratios to base: heads x d_k constant in A, d_k alone
in B, N, d_model and d_ff by the paper's factors in C, dropout and label smoothing as in D, learned
positions in E, big scaled the same way. Base becomes N=3, d_model=64, d_ff=256, h=8, d_k=d_v=8
(478k parameters). Every row sees the same tokens (same steps and batch) and the paper's schedule
(rsqrt_warmup, which scales the rate by each row's d_model^-0.5, as the paper's formula does).

  --config=configs/table3_mini.py          every row (tfm sweep, tfm params)
  --config=configs/table3_mini.py:C5       one row

The protocol (docs/table3.md has the pilot's curves; the numbers below were fixed on base alone,
before the full run, and no row is tuned on its own):
  * Widths / 8 and depth / 2: base has 0.48M parameters for ~1.2M target pieces a Bible epoch,
    about the ratio of the paper's base (65M) to WMT14 en-de (4.5M pairs; at ~30 pieces a sentence,
    our estimate, ~130M target pieces an epoch). Narrower rows would not
    be cheaper: on a CPU core a d_model-32 step costs 0.8 x a d_model-64 step at the same tokens
    (small kernels, not FLOPs, set the cost at these widths).
  * Learning rate: the largest scale at which base still trains stably at twice the rate. Base at
    scale 1.0 (peak (64 x 400)^-0.5 = 6.25e-3) trains without a spike or a non-finite step, so the
    rows use LR_SCALE = 0.5 (peak 3.1e-3 at base; 2.2e-3 for the d_model-128 rows, 4.4e-3 for C4).
    The previous protocol's peak of 8.8e-3 made C3 diverge.
  * Length: as long as the budget allows (all 20 rows x 2 seeds in at most 10 hours of the 2-core
    machine, two runs at a time, one per core). A base step of 4096 tokens a side takes 0.44 s on
    a quiet core and the rows together cost ~22 base runs (model FLOPs; big 3.1, C5 2.5) per seed:
    3000 steps, ~11M target tokens (~9 epochs; by the same estimate the paper's 100K steps of 25000
    target tokens were ~19 epochs of WMT14). Big gets
    the same steps, not the paper's 3x: that alone would add ~5 hours.
  * Whether base has stopped improving at 3000 steps is measured, not assumed: every run logs its
    dev perplexity every 250 steps, and docs/table3.md reports base's change over the last fifth.
"""

from configs import table3

WIDTH, DEPTH = 8, 2  # paper / mini
STEPS, WARMUP, LR_SCALE = 3000, 400, 0.5  # the protocol above
ROWS = table3.ROWS


def scaled(c, width=WIDTH, depth=DEPTH):
  """The paper's model of a row, at 1 / width of its widths and 1 / depth of its depth."""
  m = c.model
  for key in ("d_model", "d_ff", "d_k", "d_v"):
    m[key] = m[key] // width
  for key in ("num_encoder_layers", "num_decoder_layers"):
    m[key] = m[key] // depth
  m.vocab_size = 2000  # a BPE vocabulary for the Bible corpus at this width (paper: 37000)
  m.dtype = "float32"  # CPUs compute in float32
  m.max_length = 128 + 50  # row E's table: data.max_length, and decoding's + 50
  return c


def get_config(row=None):
  return protocol(row, width=WIDTH, depth=DEPTH, steps=STEPS, warmup=WARMUP, lr_scale=LR_SCALE)


def protocol(row, *, width, depth, steps, warmup, lr_scale):
  """A row (None: every row) of the paper's Table 3 on the Bible corpus at 1 / width of its widths
  and 1 / depth of its depth, trained `steps` steps; shared by this protocol and
  configs/table3_v3.py."""
  c = scaled(table3.get_config(row), width, depth)
  c.data.update(
      dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",  # offline corpus
      vocab_size=2000,  # = model.vocab_size
      max_length=128,  # verses are short: 99.9% fit
      tokens_per_batch=4096,  # 32 rows of 128 tokens a side (paper: ~25000)
      eval_max_examples=None)  # dev perplexity on every dev verse (953)
  c.train.update(
      steps=steps, warmup_steps=warmup, learning_rate=lr_scale,
      log_every=250, eval_every=250,  # the dev curve of every run, for the plateau check
      checkpoint_every=1000, keep_checkpoints=1, average_checkpoints=1,  # rows use no averaging
      curves=False)
  c.eval.update(
      bleu_every=0,  # BLEU once, by the sweep's tfm eval
      bleu_examples=200)  # the first 200 dev verses
  return c
