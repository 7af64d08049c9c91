"""The language-model configs against what their docstrings say they are: the quickstarts are
configs/quickstart.py with only the named keys changed; GPT-2 small and BERT-base have their
papers' batches, contexts and schedules."""

import pytest

from tfm.config import flatten, load_config
from tfm.train.config import decay_rate

QUICKSTART_CHANGES = {"task", "model.architecture", "model.num_encoder_layers",
                      "model.num_decoder_layers", "data.text_key", "train.label_smoothing",
                      "eval.bleu_every"}


@pytest.mark.parametrize("name, task, architecture", [
    ("lm_quickstart", "lm", "decoder_only"), ("mlm_recipes.py:bert", "mlm", "encoder_only")])
def test_a_quickstart_is_the_translation_quickstart_as_one_stack(name, task, architecture):
  """The lm quickstart and the mlm's BERT recipe (its plateau reference): the translation
  quickstart's model, data and schedule as one stack (the mlm's dev curve every 250 steps)."""
  base = load_config("configs/quickstart.py")
  c = load_config(f"configs/{name}" if ".py" in name else f"configs/{name}.py")
  ours, theirs = flatten(c.to_dict()), flatten(base.to_dict())
  changed = QUICKSTART_CHANGES | ({"train.eval_every"} if task == "mlm" else set())
  assert {k for k in ours if ours[k] != theirs.get(k) and k not in ("row", "paper")} == changed
  assert (c.task, c.model.architecture, c.data.text_key) == (task, architecture, "en")
  layers = c.model.num_decoder_layers if task == "lm" else c.model.num_encoder_layers
  assert layers == base.model.num_encoder_layers + base.model.num_decoder_layers == 4
  assert c.train.label_smoothing == 0.0 and c.eval.bleu_every == 0


def test_the_mlm_quickstart_is_berts_recipe_with_the_literatures_changes_alone():
  """configs/mlm_quickstart.py = the BERT row with its docstring's changes and nothing else: pre-LN,
  GELU, no dropout, AdamW (1e-3, warmup 6% of the steps, epsilon 1e-6), 40% masked in training and
  15% in evaluation, rotary positions; the table's rows are the steps between them."""
  rows = {row: flatten(load_config(f"configs/mlm_recipes.py:{row}").to_dict())
          for row in ("bert", "bert_rope", "small", "quickstart")}
  quick = flatten(load_config("configs/mlm_quickstart.py").to_dict())
  assert {k: v for k, v in quick.items() if k not in ("row", "paper")} == {
      k: v for k, v in rows["quickstart"].items() if k not in ("row", "paper")}

  def changes(row):
    return {k: rows[row][k] for k in rows[row]
            if rows[row][k] != rows["bert"].get(k) and k not in ("row", "paper")}

  small = {"model.norm": "pre", "model.ffn": "gelu", "model.dropout_rate": 0.0,
           "train.optimizer": "adamw", "train.adam_eps": 1e-6, "train.schedule": "linear_cosine",
           "train.learning_rate": 1e-3, "train.warmup_steps": 90, "data.mask_rate": 0.4,
           "data.eval_mask_rate": 0.15, "train.weight_decay": 0.01}  # AdamW's default decay
  assert changes("small") == small
  assert changes("bert_rope") == {"model.positions": "rope"}
  assert changes("quickstart") == {**small, "model.positions": "rope"}
  assert rows["bert"]["train.steps"] * 0.06 == 90
  for steps, warmup in ((20, 1), (200, 12), (3000, 180)):  # 6% of whatever train.steps is
    shorter = load_config("configs/mlm_quickstart.py", [f"train.steps={steps}"]).train
    assert (shorter.steps, shorter.warmup_steps) == (steps, warmup)
  assert load_config("configs/mlm_quickstart.py", ["train.steps=20", "train.warmup_steps=3"]
                     ).train.warmup_steps == 3  # set, it is what is given
  assert decay_rate(load_config("configs/mlm_quickstart.py").train) == 0.01


def test_gpt2_small_and_bert_base_batches_and_schedules():
  gpt2, bert = load_config("configs/gpt2_small.py"), load_config("configs/bert_base.py")
  # GPT-2: 512 rows of 1024 (its paper); GPT-3's 125M schedule: warmup over 375M tokens, cosine
  # to 10% over ~260B tokens.
  assert gpt2.data.tokens_per_batch // gpt2.data.max_length == 512 and gpt2.data.max_length == 1024
  assert gpt2.train.warmup_steps == round(375e6 / gpt2.data.tokens_per_batch)
  assert abs(gpt2.train.steps * gpt2.data.tokens_per_batch / 260e9 - 1) < 0.01
  assert (gpt2.train.learning_rate, gpt2.train.end_learning_rate_fraction) == (6e-4, 0.1)
  assert (gpt2.train.adam_b1, gpt2.train.adam_b2, decay_rate(gpt2.train)) == (0.9, 0.95, 0.1)
  # BERT: 256 sequences of 512, 1M steps, 10,000 warmup steps to 1e-4.
  assert bert.data.tokens_per_batch // bert.data.max_length == 256 and bert.data.max_length == 512
  assert (bert.train.steps, bert.train.warmup_steps, bert.train.learning_rate) == (
      1_000_000, 10_000, 1e-4)
  assert (bert.train.adam_b1, bert.train.adam_b2, decay_rate(bert.train)) == (
      0.9, 0.999, 0.01)  # adamw's default decay
  for c in (gpt2, bert):  # the learned table is exactly the context; no smoothing, no averaging
    assert c.model.positions == "learned" and c.model.max_length == c.data.max_length
    assert c.train.label_smoothing == 0.0 and c.train.average_checkpoints == 1
    assert c.data.text_key == "text" and c.model.vocab_size == c.data.vocab_size


def test_the_span_quickstart_is_the_translation_quickstart_on_both_sides_as_text():
  """configs/span_quickstart.py: the quickstart's encoder-decoder, schedule and batch; the Bible's
  English and Spanish sides as two monolingual sources; the lengths, spans and sentinels its
  docstring states (T5's arithmetic for inputs of 128)."""
  from tfm.data import spans, vocabulary  # pylint: disable=import-outside-toplevel
  from tfm import tasks  # pylint: disable=import-outside-toplevel
  base = load_config("configs/quickstart.py")
  c = load_config("configs/span_quickstart.py")
  ours, theirs = flatten(c.to_dict()), flatten(base.to_dict())
  assert {k for k in ours if ours[k] != theirs.get(k)} == {
      "task", "data.text_key", "data.mixture", "train.label_smoothing", "eval.bleu_every"}
  assert (c.task, c.model.architecture, c.data.text_key) == ("span", "encoder_decoder", "en")
  assert [(name, weight, sub.text_key) for name, weight, sub in c.data.mixture_sources] == [
      ("en", 0.5, "en"), ("es", 0.5, "es")]
  assert spans.geometry(c.data) == (141, 29, 7)
  assert spans.noise_counts(141, c.data.noise_density, c.data.mean_noise_span_length) == (21, 7)
  assert c.data.tokens_per_batch // c.data.max_length == 32
  assert c.model.vocab_size == c.data.vocab_size == 2000
  assert vocabulary.pieces(c.data, tasks.get("span")) == 1993
