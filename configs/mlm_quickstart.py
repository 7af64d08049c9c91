"""A CPU-sized masked language model on the offline Bible's English side (World English Bible)
that leaves the unigram plateau: configs/quickstart.py's size and steps, a small-budget recipe.

The model is configs/quickstart.py's, as one encoder-only stack (config.task='mlm', BERT's
masked-token prediction): its 2+2 layers become 4 encoder layers, d_model 128, d_ff 512, 4 heads
of d_k 32, tied embeddings (the output is the embedding matrix's products); a BPE vocabulary of
2000 pieces trained on the English side alone, with <mask> at id 3; 32 rows of 128 pieces a step,
1500 steps. Train batches are the shuffled verses as one stream cut into rows, masked as BERT does
(of the selected pieces 80% <mask>, 10% a random piece, 10% unchanged); the loss is over the
selected pieces alone. Dev: the first 200 held-out verses, 15% of their pieces masked with a fixed
seed (data.eval_mask_rate): the same 1,075 pieces in every run and at every evaluation.

`baseline()` is BERT's own recipe at this size (post-LN, ReLU, sinusoidal positions, dropout 0.1,
the paper's Adam schedule peaking at 4.4e-3, 15% masking): it stays on the unigram plateau (dev
perplexity 278.9 over the masked pieces after 1,500 steps, where each piece's frequency gives
436.4), as transformers' BertForMaskedLM does on the same verses. `get_config()` changes, each
from the literature on training masked LMs on small budgets, nothing tuned here:
  * pre-LN (Izsak et al. 2021; Geiping & Goldstein 2022, "cramming"): the norm before each
    sublayer, which takes a higher learning rate without warmup trouble;
  * AdamW with decoupled weight decay 0.01, beta2 0.98, epsilon 1e-6, peak learning rate 1e-3 after
    a warmup of 6% of the steps (Izsak et al.'s; they decay linearly to 0, tfm's linear_cosine
    decays by a half cosine to 0);
  * GELU in the feed-forward layers (BERT's) and no dropout (cramming: dropout only slows a run
    that sees its data a few times);
  * 40% of the pieces masked in training (Wettig et al. 2023, "Should you mask 15%?"): 1,640
    scored pieces a step where 15% gives 615; dev stays at 15% (data.eval_mask_rate);
  * rotary positions (Su et al. 2021, RoFormer, whose BERT-style pretraining converged faster
    with them than with absolute positions): attention by relative offset, which the masked piece
    needs to read its neighbours; with sinusoids added to the input, the same four changes stay
    near the plateau (configs/mlm_recipes.py measures each).

  tfm train --config=configs/mlm_quickstart.py --workdir=runs/mlm_quickstart

Measured (experiments/results/mlm_recipes/, one seed, 2-core Intel Xeon (AVX-512) beside other
jobs, 22.7 minutes): dev perplexity 23.2 and accuracy 0.378 over the 1,075 masked pieces after
1,500 steps (156.1 at step 250), where BERT's recipe ends at 278.9. Rotary positions alone, BERT's
recipe otherwise (configs/mlm_recipes.py:bert_rope), end lower, at 18.1: this recipe's cosine
schedule has decayed to zero by then. docs/lm.md#results has the curves.
"""

from configs import quickstart


def baseline():
  """BERT's recipe at the quickstart's size (the module docstring): the plateau's reference."""
  c = quickstart.get_config()
  c.task = "mlm"
  c.model.update(
      architecture="encoder_only",
      num_encoder_layers=4, num_decoder_layers=0)  # the quickstart's 2+2 layers in one stack
  c.data.update(
      text_key="en")  # the World English Bible side of bible_translate/web-sparv
  c.train.update(
      label_smoothing=0.0,  # perplexity over the masked pieces is the figure
      eval_every=250)  # a finer dev curve: 0.3 s an evaluation
  c.eval.update(
      bleu_every=0)  # nothing to translate
  return c


def small_budget(c):
  """The small-budget choices of the docstring, positions aside, applied to config `c`."""
  c.model.update(norm="pre", ffn="gelu", dropout_rate=0.0)
  c.train.update(optimizer="adamw", adam_eps=1e-6, schedule="linear_cosine", learning_rate=1e-3,
                 warmup_steps=c.train.get_ref("steps") * 6 // 100)  # 6%, whatever train.steps
  c.data.update(mask_rate=0.4, eval_mask_rate=0.15)
  return c


def get_config():
  c = small_budget(baseline())
  c.model.positions = "rope"
  return c
