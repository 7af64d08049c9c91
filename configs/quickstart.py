"""A CPU-sized Transformer on the offline Bible corpus (English WEB -> Spanish 1909): about 10
minutes of training on a 2-core CPU, ending in translations a reader recognizes.

Same architecture as the paper (post-LN, ReLU, sinusoids, tied embeddings), scaled down. Chosen by
measuring candidates on the 2-core machine (same corpus, batch and schedule shape; dev sacreBLEU
on the first 200 dev verses):
  - the earlier quickstart: 8000-piece vocabulary, 1500 steps, warmup 300: ~25 minutes for
    sacreBLEU 4.0;
  - the same with 600 steps and warmup 150 (10 minutes): the shorter warmup peaks the learning rate
    at 1.4e-2 and training stalls (dev perplexity 397 at step 300);
  - a 4000-piece vocabulary, 800 steps, warmup 200 (this config): the output projection and softmax
    over the vocabulary, half the step's compute at d_model 128, cost half as much, so 10 minutes
    buy more steps, and each piece is seen twice as often.
"""

from configs import base


def get_config():
  c = base.get_config()
  c.model.update(
      vocab_size=4000,  # a shared BPE vocabulary for one book pair: cheaper output layer
      d_model=128, d_ff=512,  # base / 4, keeping d_ff = 4 d_model
      num_heads=4, d_k=32, d_v=32,  # heads x d_k = d_model, as in base
      num_encoder_layers=2, num_decoder_layers=2,  # a third of base's depth
      dtype="float32")  # CPUs compute in float32
  c.data.update(
      dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",  # offline corpus
      vocab_size=4000,  # = model.vocab_size
      max_length=128,  # verses are short: 99.9% fit in 128 pieces
      tokens_per_batch=2048,  # 16 rows of 128 tokens a side
      eval_max_examples=200)  # dev loss on the first 200 dev verses
  c.train.update(
      steps=800, warmup_steps=200,  # ~10 CPU-minutes; warmup a quarter of the run
      learning_rate=2.0,  # twice the paper's schedule: short runs gain from a higher peak
      log_every=50, eval_every=400, checkpoint_every=400)
  c.eval.update(
      bleu_every=800,  # dev BLEU at the end of training
      bleu_examples=200)  # on the first 200 dev verses
  return c
