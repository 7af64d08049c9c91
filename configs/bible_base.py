"""The paper's base model on the offline Bible corpus (English WEB -> Spanish 1909) for about ten
minutes of one GPU: the "Bible base" row of the GPU table (experiments/gpu_table.py).

Model: Table 3's base (6+6 layers, d_model 512, d_ff 2048, 8 heads, sinusoids, tied embeddings) in
bfloat16, the paper's Adam, warmup 4000 and label smoothing 0.1, at the paper's ~25k tokens a side
per step (192 rows of 128: verses are short). Ours, for a corpus ~1/100 of WMT14's size:
  - a shared BPE vocabulary of 8000 pieces (29,092 training verse pairs, about 1.2M tokens a side);
  - P_drop 0.3 (the paper's big-model value) instead of 0.1: ten GPU-minutes is hundreds of epochs
    of this corpus, so the model sees each verse hundreds of times;
  - the token cache and two pipeline workers, so the host keeps up with the GPU.
train.steps here is a projection, not a measurement: 7.4 model TFLOP a step (tfm/train/flops.py)
at 40% MFU of an H100's 989 bf16 TFLOP/s is 19 ms a step, 32,000 steps in 10 minutes.
experiments/gpu_table.py replaces it by 600 s / the step time it measures on the GPU at hand
(`steps_for`) and sets the checkpoint and evaluation cadences from that (`cadences`). Warmup stays
the paper's 4000 steps: a fifth of the run or less on a GPU that runs 20,000 steps in ten minutes.
The whole dev split (953 verses) gives the dev loss and the dev BLEU (beam 4, alpha 0.6).
"""

from configs import base

STEPS = 32_000  # projected ten minutes on one H100 (see above); gpu_table.py measures its own


def steps_for(seconds: float, step_seconds: float) -> int:
  """The steps that fill `seconds` at `step_seconds` a step, a multiple of 20 (at least 20), so that
  `cadences` divides the run evenly."""
  return max(20, round(seconds / step_seconds / 20) * 20)


def cadences(steps: int) -> dict[str, dict[str, int]]:
  """train/eval settings for a run of `steps`: dev loss every tenth of the run, dev BLEU every fifth
  (both also at the end), a checkpoint every twentieth, of which `tfm eval --average 5` averages the
  last five, as the paper averaged its last five 10-minute checkpoints (section 6.1): here the last
  fifth of the run. By config section: {"train": {...}, "eval": {...}}."""
  every = lambda n: max(1, steps // n)
  return {"train": dict(steps=steps, log_every=min(100, every(20)), eval_every=every(10),
                        checkpoint_every=every(20)),
          "eval": dict(bleu_every=every(5))}


def get_config():
  c = base.get_config()
  c.model.update(vocab_size=8000, dropout_rate=0.3)
  c.data.update(
      dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",
      vocab_size=8000,  # = model.vocab_size
      max_length=128, tokens_per_batch=24576,  # 192 rows of 128, the paper's ~25k tokens a side
      cache=True, num_workers=2)
  run = cadences(STEPS)
  c.train.update(**run["train"], keep_checkpoints=5, average_checkpoints=5)
  c.eval.update(**run["eval"], bleu_examples=0,  # 0: every dev verse
                batch_size=128)  # sentences decoded together on the GPU
  return c
