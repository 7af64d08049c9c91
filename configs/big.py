"""Transformer big (Table 3 row "big"): 300K steps, P_drop 0.3, last 20 checkpoints averaged."""

from configs import base


def get_config():
  c = base.get_config()
  c.model.update(d_model=1024, d_ff=4096, num_heads=16, d_k=64, d_v=64, dropout_rate=0.3)
  c.train.update(steps=300_000, keep_checkpoints=20, average_checkpoints=20)
  return c
