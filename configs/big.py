"""Transformer big (Table 3 row "big"): 300K steps, P_drop 0.3, last 20 checkpoints averaged."""

from configs import base


def get_config():
  c = base.get_config()
  c.model.d_model = 1024  # Table 3, big
  c.model.d_ff = 4096  # Table 3, big
  c.model.num_heads = 16  # Table 3, big (d_k = d_v = 64 as in base)
  c.model.dropout_rate = 0.3  # Table 3, big (P_drop)
  c.train.steps = 300_000  # section 5.2: 300K steps (3.5 days on 8 P100)
  c.train.keep_checkpoints = 20  # enough to average
  c.train.average_checkpoints = 20  # section 6.1: the last 20 checkpoints
  return c
