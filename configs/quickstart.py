"""A CPU-sized Transformer on the offline Bible corpus (English WEB -> Spanish 1909): about 10
minutes of training on a 2-core CPU, ending in translations a reader recognizes.

Same architecture as the paper (post-LN, ReLU, sinusoids, tied embeddings, the paper's learning-rate
schedule and Adam), scaled down: 2+2 layers, d_model 128, d_ff 512, 4 heads of d_k 32, a shared BPE
vocabulary of 2000 pieces (from one book pair a small vocabulary sees each piece often enough to
learn it), 4096 tokens a side per step, warmup 400 (peak learning rate (128 x 400)^-0.5 = 4.4e-3).
Candidates measured on a 2-core AMD EPYC CPU (dev sacreBLEU on the first 200 dev verses, beam 4; the
schedule does not depend on train.steps, so a checkpoint at step s of a longer run is the s-step
run; the rows with "*" ran two at a time beside other jobs, so only their BLEU compares):
  vocab  layers  d_model  tokens/step  steps  warmup  lr scale  dev BLEU
  8000   2+2     128      2048         1500   300     2.0        4.0  * (an earlier quickstart)
  8000   2+2     128      2048          600   150     2.0        -    * (stalled: perplexity 397)
  4000   2+2     128      2048          800   200     2.0        0.8  *
  2000   2+2     128      2048         1000   250     1.5        2.7  *
  2000   1+1     128      2048         1200   250     1.5        8.0  *
  2000   1+1      64      2048         1500   200     1.0       10.6  * (8 heads of d_k 8)
  2000   1+1      64      2048         2000   200     1.0       11.5  (the previous quickstart, 3.5 min)
  2000   1+1      64      2048         3000   200     1.0       12.3  *
  2000   2+2     128      4096         1000   400     1.0       17.3  * (step 1000 of bible_hour)
  2000   2+2     128      4096         1500   400     1.0       22.1  (this config; 22.1-22.2 as rounding changed)
The earlier 2+2 candidates lost to the one-layer model at 2048 tokens a step with a peak learning
rate of 8-18e-3; at twice the batch and the paper's schedule scale (lr scale 1, 4.4e-3) the wider
model passes it within 1000 steps. configs/bible_hour.py trains this model for 10,000 steps.
"""

from configs import base


def get_config():
  c = base.get_config()
  c.model.update(
      vocab_size=2000,  # a shared BPE vocabulary small enough to learn from one book pair
      d_model=128, d_ff=512,  # base / 4, keeping d_ff = 4 d_model
      num_heads=4, d_k=32, d_v=32,  # heads x d_k = d_model, as in base
      num_encoder_layers=2, num_decoder_layers=2,  # a third of base's depth
      dtype="float32")  # CPUs compute in float32
  c.data.update(
      dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",  # offline corpus
      vocab_size=2000,  # = model.vocab_size
      max_length=128,  # verses are short: 99.9% fit in 128 pieces
      tokens_per_batch=4096,  # 32 rows of 128 tokens a side, ~95 verses
      cache=True,  # the train split tokenized once (~10 s), ids read back: the same batches
      eval_max_examples=200)  # dev loss on the first 200 dev verses
  c.train.update(
      steps=1500, warmup_steps=400,  # ~10 CPU-minutes; peak learning rate (128 x 400)^-0.5 = 4.4e-3
      log_every=100, eval_every=500, checkpoint_every=500,
      keep_checkpoints=4, average_checkpoints=1)  # eval/translate use the final model: 500 steps
                                                  # apart, earlier checkpoints are much weaker
  c.eval.update(
      bleu_every=1500,  # dev BLEU at the end of training
      bleu_examples=200)  # on the first 200 dev verses
  return c
