"""`tfm sweep --publish`: a finished run's result kept outside the root is taken by a sweep on a fresh
root when its config and vocabulary match, and only then."""

import hashlib
import json
import os

import pytest

from tests.integration.conftest import sweep_overrides
from tfm import cli
from tfm.sweep import execute, publish


def _argv(corpus, root, published, *extra):
  overrides = sweep_overrides(corpus, 2, "train.curves=False", *extra)
  return (["tfm", "sweep", "--config=configs/quickstart.py", f"--root={root}", "--eval_limit=4",
           f"--publish={published}"]
          + [f"--config.{o}" for o in overrides])


@pytest.mark.long  # two sweeps, each run a `tfm train` and a `tfm eval` process: CI runs it after the README's command
def test_published_runs_resume_a_sweep_on_a_fresh_root(corpus, tmp_path, capsys):
  published = tmp_path / "results"
  assert cli.main(_argv(corpus, tmp_path / "root1", published)) == 0
  name = "run-s0"
  files = sorted(os.listdir(published / name))
  assert files[-2:] == ["sweep.log", "sweep_result.json"] and files[0].startswith("eval_dev_2_")
  assert [p.suffix for p in (published / "vocab").iterdir()] == [".model"]
  assert (published / "table.md").exists() and (published / "sweep.png").exists()
  mine = execute.read_result(str(published / name))
  assert mine.status == "ok" and len(mine.fingerprint) == 64
  capsys.readouterr()

  assert [json.loads(line) for line in (published / "results.jsonl").read_text().splitlines()] == [
      mine.to_json()]

  # A fresh root (another machine, the workdirs gone): the published run is taken, not trained,
  # with the published vocabulary.
  root2 = tmp_path / "root2"
  assert cli.main(_argv(corpus, root2, published)) == 0
  out = capsys.readouterr().out
  assert f"1 finished runs taken from {published}: {name}" in out
  assert "1 runs under" in out and "1 finished before, 0 to run" in out
  assert not (root2 / name / "checkpoints").exists()
  assert (root2 / "vocab").exists() and sorted(os.listdir(root2 / name)) == files
  lines = [json.loads(line) for line in (root2 / "results.jsonl").read_text().splitlines()]
  assert lines == [mine.to_json()]

  # Another step count or fingerprint (another config or vocabulary): not taken.
  root3 = tmp_path / "root3"
  steps = mine.steps
  assert publish.take_published([(name, mine.fingerprint, steps + 1)], str(root3),
                                str(published)) == []
  assert publish.take_published([(name, "0" * 64, steps)], str(root3), str(published)) == []
  assert publish.take_published([(name, mine.fingerprint, steps)], str(root3),
                                str(published)) == [name]


def test_fingerprint_ignores_machine_paths_and_sees_everything_else():
  from tfm.config import load_config  # pylint: disable=import-outside-toplevel
  base = load_config("configs/quickstart.py")
  moved = load_config("configs/quickstart.py", ["data.vocab_dir=/elsewhere",
                                                "data.data_dir=/data", "train.compilation_cache_dir="])
  assert publish.fingerprint(base, "v", 200) == publish.fingerprint(moved, "v", 200)
  # LayerNorm's backward pass is chosen per platform: a CPU's run is a GPU's.
  autodiff = load_config("configs/quickstart.py", ["model.layer_norm_grad=autodiff"])
  assert publish.fingerprint(autodiff, "v", 200) == publish.fingerprint(base, "v", 200)
  # So are the platform's forms of input, saves, guard and dropout masks.
  forms = load_config("configs/quickstart.py", ["train.input=process", "train.saves=sync",
                                                "train.guard=select", "train.dropout_prng=rbg"])
  assert publish.fingerprint(forms, "v", 200) == publish.fingerprint(base, "v", 200)
  # A config written before the key existed has the same fingerprint (published runs stay valid).
  values = base.to_dict()
  del values["model"]["layer_norm_grad"]
  for key in ("input", "saves", "guard", "dropout_prng"):
    del values["train"][key]
  del values["model"]["matmul_precision"]  # added later: left out at its earlier value
  for key in ("norm_kind", "share_embeddings", "token_types", "embedding_norm", "mlm_head",
              "gelu"):
    del values["model"][key]  # T5's and BERT's parts, added later, off; GELU's form, tanh
  for key in ("train_files", "dev_files", "test_files", "eval_sets"):  # so were these
    del values["data"][key]
  del values["eval"]["length_buckets"]
  del values["eval"]["context_lengths"]  # an lm's evaluation lengths, added with the task
  for key in ("best_metric", "patience", "init_from", "init_checkpoint", "init_optimizer",
              "optimizer", "ema_decay", "ema_warmup", "adafactor_decay_rate",
              "adafactor_clipping_threshold", "adafactor_factored",
              "adafactor_min_dim_size_to_factor", "adafactor_multiply_by_parameter_scale",
              "adafactor_epsilon", "adafactor_momentum"):
    del values["train"][key]
  for key in ("mixture", "mixture_weights", "text_key", "mask_rate", "mask_token_rate",
              "mask_random_rate", "eval_mask_rate", "noise_density", "mean_noise_span_length",
              "sentinels"):
    del values["data"][key]
  del values["task"]  # the task keys (translate, no text key, BERT's rates: read by mlm alone)
  for key in execute.MACHINE_KEYS:
    section, name = key.split(".")
    del values[section][name]
  text = json.dumps(values, sort_keys=True, default=str) + "\nv\n200"
  assert hashlib.sha256(text.encode("utf-8")).hexdigest() == publish.fingerprint(base, "v", 200)
  # Another precision is another computation: its runs are trained, not taken.
  for precision in ("highest", "tensorfloat32"):
    other = load_config("configs/quickstart.py", [f"model.matmul_precision={precision}"])
    assert publish.fingerprint(other, "v", 200) != publish.fingerprint(base, "v", 200)
  # One of T5's parts is another model.
  rms = load_config("configs/quickstart.py", ["model.norm_kind=rms"])
  assert publish.fingerprint(rms, "v", 200) != publish.fingerprint(base, "v", 200)
  erf = load_config("configs/quickstart.py", ["model.gelu=erf"])  # every key it holds counts
  assert publish.fingerprint(erf, "v", 200) != publish.fingerprint(base, "v", 200)
  # Early stopping or another start is another run.
  for change in ("train.best_metric=dev_ppl", "train.init_from=/elsewhere"):
    other = load_config("configs/quickstart.py", [change])
    assert publish.fingerprint(other, "v", 200) != publish.fingerprint(base, "v", 200), change
  smoothing = load_config("configs/quickstart.py", ["train.label_smoothing=0.2"])
  assert publish.fingerprint(smoothing, "v", 200) != publish.fingerprint(base, "v", 200)
  assert publish.fingerprint(base, "w", 200) != publish.fingerprint(base, "v", 200)
  assert publish.fingerprint(base, "v", 100) != publish.fingerprint(base, "v", 200)
