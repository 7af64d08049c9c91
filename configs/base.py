"""Transformer base (Vaswani et al. 2017, Table 3 row "base"), WMT14 English->German.

The defaults of every section are this model, each in its one home: `ModelConfig`
(tfm/model/config.py) is Table 3's base row, `DataConfig` (tfm/data/config.py) the paper's data and
batch size, `TrainConfig` (tfm/train/config.py) its Adam, schedule and label smoothing, `EvalConfig`
(tfm/eval/config.py) its beam search. This file states only what we choose differently; other
configs are changes of this one.
"""

from tfm.config import default_config


def get_config():
  c = default_config()
  c.model.dtype = "bfloat16"  # ours: compute dtype on accelerators; parameters stay float32
  return c
