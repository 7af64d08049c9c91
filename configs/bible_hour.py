"""The quickstart's model on the offline Bible corpus (English WEB -> Spanish 1909) for about an hour
on a 2-core CPU: 10,000 steps instead of 1500, dev BLEU halfway and at the end.

Same model, batch and schedule as configs/quickstart.py (2+2 layers, d_model 128, 2000-piece
vocabulary, 4096 tokens a side, warmup 400); the learning rate keeps decaying as step^-0.5, so
the first 1500 steps are the quickstart's. Checkpoints every 1000 steps, the last five kept:
`tfm eval --average=5` averages steps 6000-10000 as the paper averaged its last five.
Measured on a 2-core AMD EPYC CPU (experiments/results/bible_hour/): 0.39-0.40 s a step alone (~66
minutes); dev sacreBLEU on the first 200 dev verses 28.5 at step 5000, 29.1 at 10,000, 29.7 with
the last five checkpoints averaged; dev perplexity 6.3 and 5.5 at steps 5000 and 10,000.
"""

from configs import quickstart


def get_config():
  c = quickstart.get_config()
  c.train.update(
      steps=10000,  # ~1 hour on a 2-core CPU
      log_every=200, eval_every=1000, checkpoint_every=1000,
      keep_checkpoints=5, average_checkpoints=1)
  c.eval.update(
      bleu_every=5000)  # dev BLEU halfway and at the end, on the first 200 dev verses
  return c
