"""A translation run started from a span-corruption run (train.init_from across tasks, T5's
pretraining then fine-tuning) on the fake Bible corpus: its step-0 parameters are the span run's
checkpoint bit for bit, it keeps the span run's vocabulary with its sentinels above the pieces
(data.sentinels) and trains; a source of another architecture, a forgotten data.sentinels and
another shape are refused in one line with nothing written."""

import dataclasses
import json
import pathlib
import re

import jax
import numpy as np
import pytest

from tests.integration.conftest import run_train, tiny_flags
from tfm import cli, tasks
from tfm import config as config_lib
from tfm.data import pipeline, sources, vocabulary
from tfm.experiment import Experiment
from tfm.train import checkpoint as ckpt_lib
from tfm.train import init_from as init_from_lib

# The span run: the tiny encoder-decoder on the English verses, inputs of 32, so 2 sentinels
# (tfm/data/spans.py) above 298 pieces of data.vocab_size = model.vocab_size = 300.
SPAN = ("task=span", "data.text_key=en", "train.steps=4", "train.checkpoint_every=2")
SENTINELS = 2


def _own_vocabulary(config):
  """The config with its vocabulary in its workdir (data.vocab_dir unset)."""
  return config.replace(data=dataclasses.replace(config.data, vocab_dir=None))


@pytest.fixture(scope="module")
def span_run(experiment_module, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("span")
  config = _own_vocabulary(experiment_module(*SPAN))
  run_train(config, workdir)
  assert tasks.get("span").sentinels(config.data) == SENTINELS
  return str(workdir)


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_a_translation_run_starts_from_the_span_runs_weights_and_vocabulary(span_run, experiment,
                                                                             tmp_path):
  config = _own_vocabulary(experiment(f"train.init_from={span_run}",
                                      f"data.sentinels={SENTINELS}", "train.steps=3"))
  exp = Experiment(config)
  start = init_from_lib.start_state(config, exp, str(tmp_path / "probe"))
  saved = ckpt_lib.restore_params(span_run, 4, exp.abstract_params)
  for ours, theirs in zip(_leaves(start.params), _leaves(saved), strict=True):
    np.testing.assert_array_equal(ours, theirs)  # step 0 is the span run's step 4, bit for bit
  assert int(start.step) == 0

  state, out = run_train(config, tmp_path / "run")
  assert f"tfm: started from the parameters of {span_run} (last checkpoint, step 4)" in out
  assert int(state.step) == 3
  assert any(not np.array_equal(a, b) for a, b in zip(_leaves(state.params), _leaves(saved)))
  losses = [float(m) for m in re.findall(r"loss[ =:]+([\d.]+)", out)]
  assert losses and all(np.isfinite(losses))
  # Its vocabulary file is the span run's, named by its 298 pieces; read with the sentinels above
  # them, it has the span model's 300 ids.
  (theirs,) = list(pathlib.Path(span_run).glob("spm_*.model"))
  (ours,) = list((tmp_path / "run").glob("spm_*.model"))
  assert ours.read_bytes() == theirs.read_bytes()
  assert ours.name.endswith("_en-es_298.model") and theirs.name.endswith("_en_298.model")
  tok = vocabulary.get_tokenizer(config.data, str(tmp_path / "run"), train=False,
                                 task=tasks.get("translate"))
  span_data = config_lib.build(ckpt_lib.read_config(span_run)).data
  span_tok = vocabulary.get_tokenizer(span_data, span_run, train=False, task=tasks.get("span"))
  assert (tok.vocab_size, tok.sentinels) == (span_tok.vocab_size, span_tok.sentinels) == (300, 2)
  assert tok.pieces(range(300)) == span_tok.pieces(range(300))  # every id the same piece
  # The sentinels (ids 298, 299) are never in the translation data: the dev batches' ids are
  # below them.
  batches = pipeline.eval_batches(config.data, sources.DataSource.of(config.data), tok, "dev",
                                  task=tasks.get("translate"))
  assert max(int(b[k].max()) for b in batches for k in ("inputs", "targets")) < 300 - SENTINELS
  assert json.loads((tmp_path / "run" / "config.json").read_text())["data"]["sentinels"] == 2


def _refused(args, tmp_path, capsys) -> str:
  code = cli.main(["tfm", "train", *args, f"--workdir={tmp_path / 'new'}"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1 and not (tmp_path / "new").exists()
  return err[-1]


def test_a_forgotten_data_sentinels_is_refused(span_run, corpus, tmp_path, capsys):
  line = _refused([*tiny_flags(corpus), f"--init_from={span_run}"], tmp_path, capsys)
  assert line == (f"tfm train: error: config key train.init_from: {span_run}'s vocabulary (task "
                  "'span') holds 2 sentinel ids above its pieces and this run's 0, so the ids "
                  "would differ; set data.sentinels=2 (kept above the pieces, never in this "
                  "run's data)")


def test_a_span_run_from_a_translation_run_is_refused(experiment, corpus, tmp_path, capsys):
  """The other way round: span reserves its own sentinels, a translation vocabulary has none."""
  source = tmp_path / "translate"
  source.mkdir()
  (source / "config.json").write_text(json.dumps(experiment().to_dict()))
  line = _refused([*tiny_flags(corpus, *SPAN[:2]), f"--init_from={source}"], tmp_path, capsys)
  assert line.endswith("holds 0 sentinel ids above its pieces and this run's 2, so the ids would "
                       "differ; task 'span' reserves its own 2; start from a run whose vocabulary "
                       "holds as many"), line


@pytest.mark.parametrize("task,architecture", [("lm", "decoder_only"), ("mlm", "encoder_only")])
def test_a_source_of_another_architecture_is_refused(experiment, corpus, tmp_path, capsys, task,
                                                     architecture):
  """An lm (decoder-only) or mlm (encoder-only) run's parameters are another tree than the
  encoder-decoder's: refused from the source's config.json, before its checkpoints are read or
  anything is written."""
  layers = "model.num_encoder_layers=0" if task == "lm" else "model.num_decoder_layers=0"
  source = tmp_path / task
  source.mkdir()
  (source / "config.json").write_text(json.dumps(experiment(
      f"task={task}", f"model.architecture={architecture}", layers, "data.text_key=en").to_dict()))
  line = _refused([*tiny_flags(corpus), f"--init_from={source}"], tmp_path, capsys)
  assert line == (f"tfm train: error: config key train.init_from: {source} is a run of task "
                  f"{task!r} on model.architecture={architecture!r}, this run's is "
                  "'encoder_decoder': another parameter tree, which tfm maps to no other; start "
                  "from a run of 'encoder_decoder'")


def test_another_shape_is_refused_naming_the_parameter(span_run, experiment, tmp_path):
  """model.d_ff 32 -> 64: the existing one-line refusal, naming the parameter and both shapes."""
  config = _own_vocabulary(experiment(f"train.init_from={span_run}",
                                      f"data.sentinels={SENTINELS}", "model.d_ff=64"))
  with pytest.raises(ValueError, match=r"config key train.init_from: \S+ \(last checkpoint, "
                                       r"step 4\) is another model: parameter \S+ffn\S+: "
                                       r"\((32|\d+, 32|32, \d+),?\) there, "
                                       r"\((64|\d+, 64|64, \d+),?\) here$"):
    run_train(config, tmp_path / "new")
  assert not (tmp_path / "new").exists()
