"""A CPU-sized masked language model on the offline Bible's English side (World English Bible):
configs/quickstart.py's cost, about 10 minutes alone on a 2-core CPU (not yet timed alone: below).

configs/quickstart.py's model, schedule and batch, as one encoder-only stack (config.task='mlm',
BERT's masked-token prediction): its 2+2 layers become 4 encoder layers, d_model 128, d_ff 512, 4
heads of d_k 32, post-LN, ReLU, sinusoidal positions, tied embeddings (the output is the embedding
matrix's products); a BPE vocabulary of 2000 pieces trained on the English side alone, with <mask>
at id 3; Adam and the paper's schedule with warmup 400 (peak learning rate 4.4e-3), 1500 steps.
Changed from the quickstart: no label smoothing, no dev BLEU.

Train batches are the shuffled verses as one stream cut into rows of 128 pieces, 32 rows a step,
masked as BERT does (the data section's defaults: 15% of the pieces other than EOS selected; of
those, 80% <mask>, 10% a random piece, 10% unchanged); the loss and the dev figures (perplexity
and accuracy) are over the selected pieces alone, about 600 a step. Dev on the first 200 held-out
verses, masked with a fixed seed: the same masks at every evaluation and in every run.

  tfm train --config=configs/mlm_quickstart.py --workdir=runs/mlm_quickstart

Measured (experiments/results/lm_quickstart/, 2-core Intel Xeon (AVX-512), 11m45s of wall time beside
a few tests): dev perplexity 278.9 and accuracy 0.147 over the 1,075 masked pieces after
1,500 steps, below the pieces' unigram perplexity (436.4) but not far: about 600 pieces a step are
scored against the lm's 4,096, and 1,500 steps leave the model near the unigram level.
"""

from configs import quickstart


def get_config():
  c = quickstart.get_config()
  c.task = "mlm"
  c.model.update(
      architecture="encoder_only",
      num_encoder_layers=4, num_decoder_layers=0)  # the quickstart's 2+2 layers in one stack
  c.data.update(
      text_key="en")  # the World English Bible side of bible_translate/web-sparv
  c.train.update(
      label_smoothing=0.0)  # perplexity over the masked pieces is the figure
  c.eval.update(
      bleu_every=0)  # nothing to translate
  return c
