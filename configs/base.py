"""Transformer base (Vaswani et al. 2017, Table 3 row "base"), WMT14 English->German.

Every number here is the paper's unless a comment says otherwise. Other configs are changes of this one.
"""

import ml_collections
from ml_collections.config_dict import placeholder


def get_config():
  c = ml_collections.ConfigDict()

  c.model = ml_collections.ConfigDict(dict(
      vocab_size=37000,          # shared BPE vocabulary, section 5.1
      d_model=512, d_ff=2048, num_heads=8, num_kv_heads=placeholder(int), d_k=64, d_v=64,
      num_encoder_layers=6, num_decoder_layers=6,
      architecture="encoder_decoder", norm="post", norm_epsilon=1e-6,
      positions="sinusoidal", max_length=1024, rope_base=10000.0,
      relative_buckets=32, relative_max_distance=128,
      ffn="relu", tie_embeddings=True, use_bias=True,
      dropout_rate=0.1,          # P_drop
      attention_dropout_rate=0.0, ffn_dropout_rate=0.0,
      dtype="bfloat16",          # ours: compute dtype on accelerators; parameters stay float32
      attention_impl="auto", remat="none",
  ))

  c.data = ml_collections.ConfigDict(dict(
      dataset="wmt14_translate/de-en", source_lang="en", target_lang="de",
      data_dir=placeholder(str), manual_dir=placeholder(str),
      vocab_size=37000, vocab_dir=placeholder(str),
      max_length=256,            # ours: packed row length
      tokens_per_batch=24576,    # ~25000 source + ~25000 target tokens per step (96 rows x 256)
      packing=True, overlong="filter",
      shuffle_seed=0, num_workers=0, eval_max_examples=placeholder(int),
  ))

  c.train = ml_collections.ConfigDict(dict(
      steps=100_000, warmup_steps=4000,
      schedule="rsqrt_warmup",   # lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
      learning_rate=1.0,         # scale factor on the paper's schedule
      end_learning_rate_fraction=0.0,
      adam_b1=0.9, adam_b2=0.98, adam_eps=1e-9,
      weight_decay=0.0, grad_clip_norm=0.0,
      label_smoothing=0.1,
      microbatches=1, seed=0, nonfinite="skip",
      log_every=100, eval_every=5000,
      checkpoint_every=1500,     # the paper wrote a checkpoint every 10 minutes at 0.4 s/step
      keep_checkpoints=5, average_checkpoints=5,
  ))

  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1, rules=None))

  c.eval = ml_collections.ConfigDict(dict(
      beam_size=4, length_penalty=0.6, max_extra_length=50,  # section 6.1
      bleu_every=0, bleu_examples=500, batch_size=32,
  ))
  return c
