"""T5's span corruption (config.task='span', Raffel et al. 2020) at the CPU quickstart's size, on
the offline Bible's English (World English Bible) and Spanish (Reina-Valera 1909) verses read as
monolingual text.

The model is configs/quickstart.py's encoder-decoder (2+2 layers, d_model 128, d_ff 512, 4 heads of
d_k 32, post-LN, ReLU, sinusoidal positions, tied embeddings) with its schedule and batch, no label
smoothing and no BLEU: it is trained to fill in dropped spans, not to translate.

The data: the two sides of bible_translate/web-sparv as a mixture of two monolingual sources
(data.text_key 'en' and 'es', weights 1:1), the verses of each ending with EOS, shuffled and drawn
into one stream that is cut into raw rows. T5's rules (tfm/data/spans.py, the data section's
defaults): in each raw row round(0.15 n) tokens (data.noise_density) are noise, in round(noise / 3)
spans (data.mean_noise_span_length); the noise and the other tokens are each split into that many
spans at random, interleaved starting with kept tokens. The inputs are the row with each noise span
replaced by one sentinel, then EOS; the targets are each sentinel followed by its span, then EOS.
The raw rows are as long as T5's arithmetic allows inputs of data.max_length = 128: 141 tokens, of
which 21 in 7 noise spans, so 128 inputs (120 kept, 7 sentinels, EOS) and 29 targets a row, 32
rows a step (data.tokens_per_batch 4096 counts the inputs, as T5's batches do). Why these rules:
they are T5's objective as published (its best trade-off of quality and cost, section 3.3), and
targets of about a fifth of the inputs make a step cheaper than a denoising model that predicts
the whole row.

The sentinels are the vocabulary's top ids, counted down from model.vocab_size - 1 as T5's: the
SentencePiece model is trained on both languages with data.vocab_size less the 7 a row needs (1993
pieces, the ids 1993..1999 the sentinels), and data.vocab_size = model.vocab_size = 2000 counts
them. The dev figures are perplexity and accuracy over the target pieces (sentinels and EOS
included) of the first 200 English dev verses, corrupted once with a fixed seed: the same spans at
every evaluation and in every run.

  tfm train --config=configs/span_quickstart.py --workdir=runs/span_quickstart

Measured so far: its first 300 steps (train.steps=300; the schedule does not depend on the step
count, so these are the 1500-step run's first 300), 2-core Intel Xeon (AVX-512) at load ~8 beside
other jobs, 0.7-0.9 s a step: dev perplexity 143.9 at step 150 and 113.2 at step 300, accuracy
0.29, over the dev spans' 1,601 target pieces; train batches 100% full on both sides (32 x 128
inputs, 32 x 29 targets). The 1,500 steps (experiments/results/pretraining/README.md): dev
perplexity 82.7 at step 500, 66.1 at 1,000 and 60.2 at 1,500, accuracy 0.30 throughout: about the
share of the sentinels and EOS among the targets (8 of 29), a plateau as BERT's recipe has at this
size (docs/lm.md#results).
"""

from configs import quickstart


def get_config():
  c = quickstart.get_config()
  c.task = "span"
  c.data.update(
      text_key="en",  # the section's own text: the dev split's English verses
      mixture=({"name": "en", "text_key": "en", "weight": 1},
               {"name": "es", "text_key": "es", "weight": 1}))  # both sides as monolingual text
  c.train.update(
      label_smoothing=0.0)  # perplexity over the span targets is the figure
  c.eval.update(
      bleu_every=0)  # nothing to translate
  return c
