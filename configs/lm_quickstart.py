"""A CPU-sized language model on the offline Bible's English side (World English Bible):
configs/quickstart.py's cost, about 10 minutes alone on a 2-core CPU (not yet timed alone: below),
ending in a model `tfm generate` continues verses with.

configs/quickstart.py's model, schedule and batch, as one decoder-only stack (config.task='lm',
GPT's next-token prediction): its 2+2 layers become 4 decoder layers (no cross-attention), d_model
128, d_ff 512, 4 heads of d_k 32, post-LN, ReLU, sinusoidal positions (a prompt and its
continuation may run past the 128 trained positions), tied embeddings; a BPE vocabulary of 2000
pieces trained on the English side alone; Adam and the paper's schedule with warmup 400 (peak
learning rate (128 x 400)^-0.5 = 4.4e-3), 1500 steps. Changed from the quickstart: no label
smoothing (a language model is scored by its perplexity, which smoothing raises), no dev BLEU.

Train batches are the shuffled verses as one stream (each ending in EOS) cut into rows of 128
pieces, 32 rows a step (4096 tokens; tfm/data/stream.py); dev perplexity (per piece and per
whitespace word) on the first 200 held-out verses every 500 steps.

  tfm train --config=configs/lm_quickstart.py --workdir=runs/lm_quickstart
  tfm generate --workdir=runs/lm_quickstart --prompt="In the beginning"

Measured (experiments/results/lm_quickstart/, 2-core Intel Xeon (AVX-512) beside other jobs, load 6-7, so
26.6 minutes of wall time): dev perplexity 29.95 per piece, 161.6 per word, accuracy 0.312 after
1,500 steps; scored in rows of 256 and 512 (`tfm eval --context_lengths`), 41.0 and 54.7.
"""

from configs import quickstart


def get_config():
  c = quickstart.get_config()
  c.task = "lm"
  c.model.update(
      architecture="decoder_only",
      num_encoder_layers=0, num_decoder_layers=4)  # the quickstart's 2+2 layers in one stack
  c.data.update(
      text_key="en")  # the World English Bible side of bible_translate/web-sparv
  c.train.update(
      label_smoothing=0.0)  # perplexity is the figure: train on the plain likelihood
  c.eval.update(
      bleu_every=0)  # nothing to translate
  return c
