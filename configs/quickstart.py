"""A CPU-sized Transformer on the offline Bible corpus (English WEB -> Spanish 1909): under 10
minutes of training on a 2-core CPU, ending in translations a reader recognizes.

Same architecture as the paper (post-LN, ReLU, sinusoids, tied embeddings, the paper's learning-rate
schedule), scaled down. In 10 CPU-minutes the number of steps matters more than the model's size:
candidates measured on the 2-core machine (batch 2048 tokens a side, dev sacreBLEU on the first 200
dev verses, beam 4; 4 heads at d_model 128, 8 at 64):
  vocabulary  layers  d_model  steps  warmup  lr scale  dev BLEU
  8000        2+2     128      1500   300     2.0        4.0  (the earlier quickstart, ~25 min)
  8000        2+2     128       600   150     2.0        -    (stalled: dev perplexity 397 at 300)
  4000        2+2     128       800   200     2.0        0.8
  2000        2+2     128      1000   250     1.5        2.7
  2000        1+1     128      1200   250     1.5        8.0
  2000        1+1      64      1500   200     1.0       10.6  (8 heads of d_k 8)
  2000        1+1      64      2000   200     1.0       11.5  (this config: 3.5 minutes)
A one-layer stack at d_model 64 costs a fraction of a step of the others (the output layer over a
2000-piece vocabulary included): ~0.1 s a step, 2000 steps in 3.5 minutes
on a quiet machine (more steps would fit 10 minutes: not measured yet); a small vocabulary
sees each piece often enough to learn it from one book pair.
"""

from configs import base


def get_config():
  c = base.get_config()
  c.model.update(
      vocab_size=2000,  # a shared BPE vocabulary small enough to learn from one book pair
      d_model=64, d_ff=256,  # base / 8, keeping d_ff = 4 d_model
      num_heads=8, d_k=8, d_v=8,  # heads x d_k = d_model, as in base
      num_encoder_layers=1, num_decoder_layers=1,  # one layer a stack: more steps in 10 minutes
      dtype="float32")  # CPUs compute in float32
  c.data.update(
      dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",  # offline corpus
      vocab_size=2000,  # = model.vocab_size
      max_length=128,  # verses are short: 99.9% fit in 128 pieces
      tokens_per_batch=2048,  # 16 rows of 128 tokens a side
      eval_max_examples=200)  # dev loss on the first 200 dev verses
  c.train.update(
      steps=2000, warmup_steps=200,  # ~10 CPU-minutes; peak learning rate (64 x 200)^-0.5 = 8.8e-3
      log_every=100, eval_every=1000, checkpoint_every=500,
      keep_checkpoints=4, average_checkpoints=1)  # eval/translate use the final model: 500 steps
                                                  # apart, earlier checkpoints are much weaker
  c.eval.update(
      bleu_every=2000,  # dev BLEU at the end of training
      bleu_examples=200)  # on the first 200 dev verses
  return c
