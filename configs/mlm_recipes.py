"""Why the mlm quickstart leaves the unigram plateau: its recipe's changes to BERT's, one row each.

configs/mlm_quickstart.py trains BERT's objective at the CPU quickstart's size (4 encoder layers,
d_model 128, 1,500 steps of 32 rows of 128 pieces on the World English Bible's verses). BERT's own
recipe at that size stays near the unigram level; the quickstart's changes, each from the
literature on small-budget masked LMs (its docstring says which and why), leave it. The rows take
them apart, nothing else changed and nothing tuned on any row:

  bert        BERT's recipe (mlm_quickstart.baseline()): post-LN, ReLU, sinusoidal positions,
              dropout 0.1, the paper's Adam schedule (peak 4.4e-3 at step 400), 15% masked
  bert_rope   bert with rotary positions, nothing else
  small       bert with the small-budget choices, positions aside: pre-LN, GELU, no dropout,
              AdamW 1e-3 (6% warmup, decayed to 0), 40% masked (mlm_quickstart.small_budget())
  quickstart  small with rotary positions: configs/mlm_quickstart.py itself

Every row is scored on the same dev pieces (the first 200 held-out verses, 15% masked with a fixed
seed: 1,075 pieces), perplexity and accuracy every 250 steps; one seed a row (15-23 minutes
each on a 2-core CPU beside other jobs; --seeds=2 gives the spread).

  tfm sweep --config=configs/mlm_recipes.py --publish=experiments/results/mlm_recipes
"""

from configs import mlm_quickstart
from tfm.config import check_rows

ROWS = ("bert", "bert_rope", "small", "quickstart")


def get_config(row=None):
  if row is None:
    c = mlm_quickstart.baseline()
    c.rows, c.row, c.paper = ROWS, None, None
    return c
  check_rows(row, ROWS, "configs/mlm_recipes.py")
  if row == "quickstart":
    c = mlm_quickstart.get_config()
  else:
    c = mlm_quickstart.baseline()
    if row == "small":
      c = mlm_quickstart.small_budget(c)
    if row == "bert_rope":
      c.model.positions = "rope"
  c.row = row
  c.paper = dict(reference=True) if row == "bert" else None
  return c
