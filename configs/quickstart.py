"""A CPU-sized Transformer on the offline Bible corpus (English WEB -> Spanish 1909), minutes per run.

Same architecture as the paper (post-LN, ReLU, sinusoids, tied embeddings), scaled down.
"""

from configs import base


def get_config():
  c = base.get_config()
  c.model.update(
      vocab_size=8000,  # a Bible-sized shared BPE vocabulary
      d_model=128, d_ff=512,  # base / 4, keeping d_ff = 4 d_model
      num_heads=4, d_k=32, d_v=32,  # heads x d_k = d_model, as in base
      num_encoder_layers=2, num_decoder_layers=2,  # a third of base's depth
      dtype="float32")  # CPUs compute in float32
  c.data.update(
      dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",  # offline corpus
      vocab_size=8000,  # = model.vocab_size
      max_length=128,  # verses are short: 99.9% fit in 128 pieces
      tokens_per_batch=2048,  # 16 rows of 128 tokens a side
      eval_max_examples=200)  # dev loss and BLEU on the first 200 dev verses
  c.train.update(
      steps=1500, warmup_steps=300,  # a few CPU-minutes; warmup a fifth of the run
      learning_rate=2.0,  # twice the paper's schedule: short runs gain from a higher peak
      log_every=50, eval_every=250, checkpoint_every=250)
  c.eval.update(
      bleu_every=750,  # dev BLEU twice during the run
      bleu_examples=100)  # on the first 100 dev verses
  return c
