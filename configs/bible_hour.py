"""The offline Bible corpus (English WEB -> Spanish 1909) for about an hour on a 2-core CPU: the
quickstart's next step up, for a researcher who wants a model worth comparing against.

Twice the quickstart in width and depth (2+2 layers, d_model 128, d_ff 512, 4 heads of d_k 32),
twice its batch (4096 tokens a side, ~95 verses) and five times its steps. The same BPE vocabulary
of 2000 pieces: from one book pair a small vocabulary still learns faster than a larger one (see the
quickstart's candidates). Measured on a quiet 2-core machine, a 100-step probe of this model at
2048 tokens a side took 0.175 s a step; at 4096, ~0.33 s, so 10,000 steps fill about an hour.
The figures of a full run are in experiments/results/bible_hour/.
"""

from configs import quickstart


def get_config():
  c = quickstart.get_config()
  c.model.update(
      d_model=128, d_ff=512,  # base / 4, d_ff = 4 d_model
      num_heads=4, d_k=32, d_v=32,  # heads x d_k = d_model
      num_encoder_layers=2, num_decoder_layers=2)
  c.data.update(
      tokens_per_batch=4096)  # 32 rows of 128 tokens a side
  c.train.update(
      steps=10000, warmup_steps=400,  # warmup 4% of training as the paper's 4000 of 100k;
                                      # peak learning rate (128 x 400)^-0.5 = 4.4e-3
      log_every=200, eval_every=1000, checkpoint_every=1000,
      keep_checkpoints=5, average_checkpoints=1)  # `tfm eval --average=5` averages the last
                                                  # five (steps 6000-10000)
  c.eval.update(
      bleu_every=5000)  # dev BLEU halfway and at the end, on the first 200 dev verses
  return c
