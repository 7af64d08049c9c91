"""Train short, test long: the six positional encodings on sentences longer than any trained on.

Section 3.5 of the paper chose sinusoids because they "may allow the model to extrapolate to
sequence lengths longer than the ones encountered during training"; its Table 3 compares learned
and sinusoidal positions (row E) only at the training lengths. This table measures it, on the
offline Bible corpus (English WEB -> Spanish 1909), with every encoding of tfm/model/positions.py:

  --config=configs/positions.py               every row (tfm sweep, tfm params)
  --config=configs/positions.py:rope          one row
  python3 experiments/gpu_queue.py            the table on a GPU, after Table 3 v3 (docs/gpu.md)

The protocol, fixed before any run; no encoding is tuned on its own:
  * Model: Table 3 v3's base (configs/table3_v3.py: N=3, d_model 128, d_ff 512, 8 heads of d_k 16,
    its learning rate, warmup, dropout and label smoothing), one row per encoding, nothing else
    changed: sinusoidal (the paper's, the reference row), learned (row E; its table has a row for
    every position up to the last bucket's sources plus the decoded tokens, 128 + 50, and the rows
    past 32 are never trained, so they keep their initial values), relative (T5's 32 buckets up to
    distance 128), rope, alibi, none (no positions: the decoder's causal mask alone).
  * Train short: only pairs whose source and target both fit L = 32 pieces (data.max_length=32,
    data.overlong='filter'): 9,718 of the 29,092 training verses.
  * Test long: every dev verse, by source length: 1-32 (370 verses), 33-48 (331), 49-64 (184),
    65-128 (68): the training lengths, up to 1.5 L, up to 2 L, up to 4 L (no dev source is longer
    than 126 pieces). Dev perplexity and BLEU per bucket, the beam and scoring of Table 3 (beam 4,
    alpha 0.6, sacreBLEU and the paper's tokenized BLEU); L and the edges were chosen so that the
    longest bucket has verses in useful numbers.
  * Length by epochs, as v3 (about 19 epochs of its whole training set): 19 epochs of the short
    subset, 238,201 target pieces each, at 3,299 real target pieces a step (128 packed rows of 32;
    the mean of the pipeline's first 200 batches): 1,372 steps.
  * Seeds: 2 a row (tfm sweep --seeds=2; more where stacks make them cheap).
  * Dev perplexity every 250 steps on the short dev verses (the curve); the by-length figures
    once at the end, by the sweep's `tfm eval`. The sweep's plain BLEU column is the first 200
    dev verses, translated whole (the sinusoidal row's, scored before tfm eval translated sources
    whole, cut them at 32 pieces); the by-length table's 1-32 bucket is the figure at the
    training lengths.

The lm form asks the same of a language model (config.task='lm'), where ALiBi's paper measured it:

  --config=configs/positions.py:lm            every lm row (tfm sweep, tfm params)
  --config=configs/positions.py:lm_rope       one row
  tfm eval --workdir=RUN                      each run scored at L, 2L and 4L (eval.context_lengths)

  * Model: v3 base's layers as one decoder-only stack (N=3 decoder layers, d_model 128, d_ff 512,
    8 heads of d_k 16, v3's learning rate, warmup and dropout), no label smoothing (perplexity is
    the figure), one row per encoding, nothing else changed; the learned table has 4 L rows, those
    past L never trained.
  * Train at one context length: the WEB English verses (the Bible's English side, data.text_key
    'en', a 2000-piece vocabulary of that side) as one shuffled stream cut into rows of LM_L = 64
    pieces, 64 rows a step (4,096 tokens).
  * Test at L, 2 L and 4 L: every one of the 953 dev verses (34,226 pieces with their EOS) as one
    stream cut into rows of 64, 128 and 256 pieces, each piece scored once (eval.context_lengths,
    which the sweep's `tfm eval` reads): perplexity per piece and per word at each length, in
    each run's result and the sweep's report (ppl@64, ppl@128, ppl@256).
  * Length: LM_STEPS = 1,600 steps, about 6 epochs of the 1,050,064 training pieces with their
    EOS (256 steps an epoch), sized for the 2-core CPU: a row's two seeds as one stack took 0.65 s
    a step there (measured over 150 steps beside light other work), so the 6 stacks are 1.7 hours
    of training, about 1.8 with vocabulary, compiles and evaluation; the 12 runs took 2.1 hours.
  * Seeds: 2 a row (tfm sweep --seeds=2).
"""

from configs import table3_v3
from tfm.config import check_rows

L = 32  # training's longest source and target, in pieces
EDGES = (L, 48, 2 * L, 4 * L)  # the buckets of source length, see above
STEPS = 1372  # 19 epochs of the short subset at its packing (the docstring's rule)

PAPER_HYPOTHESIS = ("The paper's hypothesis (section 3.5): sinusoids extrapolate better than "
                    "learned positions")
# row: (model.positions, the claim set beside its longest bucket)
ROWS = {
    "sinusoidal": ("sinusoidal", "Vaswani et al. 2017, section 3.5: 'may allow the model to "
                   "extrapolate to sequence lengths longer than the ones encountered during "
                   "training'"),
    "learned": ("learned", "Vaswani et al. 2017, Table 3 row E: as sinusoids at the training "
                "lengths (4.92 PPL both)"),
    "relative": ("relative", "Shaw et al. 2018, Raffel et al. 2020 (T5's buckets); Neishi & "
                 "Yoshinaga 2019: absolute positions fail on sentences longer than training's, "
                 "relative ones do better"),
    "rope": ("rope", "Su et al. 2021: relative positions by rotation; Press et al. 2022: "
             "extrapolates a little past the training length, less than ALiBi"),
    "alibi": ("alibi", "Press et al. 2022, 'Train Short, Test Long': extrapolates to inputs much "
              "longer than training's"),
    "none": ("none", "no positions: order only from the decoder's causal mask (a baseline)"),
}


LM_L = 64  # the lm rows' training context, in pieces
LM_CONTEXTS = (LM_L, 2 * LM_L, 4 * LM_L)  # scored by tfm eval --context_lengths
LM_STEPS = 1600  # about 6 epochs of the English side at 4,096 tokens a step (the docstring)
LM_ROWS = tuple(f"lm_{name}" for name in ROWS)  # the lm form's rows: lm_sinusoidal, ...


def get_config(row=None):
  if row is not None and row.startswith("lm"):
    # 'lm' (the table), 'lm_rope' (a row), or 'lm:lm_rope': a row as commands load the rows of
    # --config=configs/positions.py:lm (FILE:ARG, then :ROW)
    row = row.split(":")[-1]
    return lm_config(None if row == "lm" else row)
  c = table3_v3.get_config("base")
  c.row = c.paper = None
  c.model.max_length = EDGES[-1] + c.eval.max_extra_length  # the learned table: every test position
  c.data.update(max_length=L, overlong="filter")  # train short: both sides fit L pieces
  c.train.update(steps=STEPS)
  c.eval.length_buckets = EDGES
  if row is None:
    c.rows = tuple(ROWS)
    return c
  check_rows(row, tuple(ROWS), "configs/positions.py")
  positions, claim = ROWS[row]
  c.model.positions = positions
  c.row = row
  c.paper = dict(claim=claim)
  if row == "sinusoidal":
    c.paper["reference"] = True  # the report sets every row against it
  if row == "learned":
    c.paper["hypothesis"] = PAPER_HYPOTHESIS  # the report answers it from the seeds
  return c


def lm_config(row=None):
  """The lm form (the docstring's second protocol): every lm row (None) or one ('lm_rope')."""
  c = table3_v3.get_config("base")
  c.row = c.paper = None
  c.task = "lm"
  c.model.update(architecture="decoder_only", num_encoder_layers=0,
                 max_length=LM_CONTEXTS[-1])  # the learned table: a row for every scored position
  c.data.update(text_key="en",  # the WEB English side of bible_translate/web-sparv
                max_length=LM_L, tokens_per_batch=64 * LM_L)  # 64 rows of L: 4,096 tokens
  c.train.update(steps=LM_STEPS, label_smoothing=0.0)
  c.eval.update(length_buckets=(), max_extra_length=0,  # no translations: no buckets, no decoding
                context_lengths=LM_CONTEXTS)  # the sweep's tfm eval scores L, 2 L and 4 L
  if row is None:
    c.rows = LM_ROWS
    return c
  check_rows(row, LM_ROWS, "configs/positions.py")
  positions, claim = ROWS[row[len("lm_"):]]
  c.model.positions = positions
  c.row = row
  c.paper = dict(claim=claim)
  if row == "lm_sinusoidal":
    c.paper["reference"] = True
  if row == "lm_learned":
    c.paper["hypothesis"] = PAPER_HYPOTHESIS
  return c
