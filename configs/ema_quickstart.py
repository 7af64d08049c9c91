"""EMA against checkpoint averaging on the quickstart's model (configs/quickstart.py), on a CPU.

The quickstart's model, data and 1500 steps, with a checkpoint every 100 steps (the last 5 kept
and averaged by `tfm eval`: steps 1100-1500) and an EMA of the parameters (train.ema_decay,
tfm/train/ema.py), so one run gives the three models compared: its last parameters
(`tfm eval --average 1`), the average of its last 5 checkpoints (`tfm eval`, the default) and the
EMA (`tfm eval --checkpoint ema`). Dev perplexity of the parameters and of the EMA is logged every
500 steps (`[dev]`, `[dev_ema]`), dev BLEU of both at the end.

  --config=configs/ema_quickstart.py          every row (tfm sweep, tfm params): the decays
  --config=configs/ema_quickstart.py:d995     one row

`tfm sweep` scores each run's average of 5 (the table's dev PPL, BLEU) and its EMA (the EMA dev
PPL, EMA BLEU columns). The rows' parameters are the same run's (the EMA does not change training):
`tfm eval --average 1` of any of them gives the last parameters' figures.

Rows: the decay d, plain (train.ema_warmup=False): ema <- d * ema + (1 - d) * params. With a
checkpoint every 100 steps the average of 5 weighs steps 1100..1500 equally, its mean 200 steps
before the end; the EMA's weights (1 - d) d^k have their mean d / (1 - d) steps back: 99 for
d=0.99, 199 for 0.995 (the row matched to the average), 499 for 0.998. The initial parameters keep
the weight d^1500: 3e-7, 5e-4 and 0.05 (0.998 is long for 1500 steps: its row shows the cost).
No warm-up, so the rows differ in d alone: with it (the default) d_t = min(d, (1 + t)/(10 + t))
would be below each of these d throughout 1500 steps (0.9940 at the last) and the rows would be
one run.
"""

from configs import quickstart
from tfm.config import check_rows

ROWS = {"d990": 0.99, "d995": 0.995, "d998": 0.998}


def get_config(row=None):
  c = quickstart.get_config()
  c.train.update(
      checkpoint_every=100, keep_checkpoints=5, average_checkpoints=5,  # tfm eval: steps 1100-1500
      ema_warmup=False)
  if row is None:
    c.rows = tuple(ROWS)
    return c
  check_rows(row, tuple(ROWS), "configs/ema_quickstart.py")
  c.train.ema_decay = ROWS[row]
  c.row = row
  return c
