"""The EMA of the parameters (train.ema_decay, tfm/train/ema.py) in the train state and step: its
formula over a few steps (computed here in numpy from the parameters of each step), float32 with
bfloat16 activations, sharded as the parameters, skipped with a refused update."""

import dataclasses

import jax
import numpy as np
import pytest

from tests.train import helpers
from tests.train.tiny_model import TinySeq2Seq, tiny_config
from tfm.data.prefetch import to_device
from tfm.train.config import TrainConfig, decay_rate
from tfm.train.sharding import batch_sharding

STEPS = 4


def _setup(dtype="float32", **train):
  model = TinySeq2Seq(tiny_config(dropout_rate=0.1, dtype=dtype))
  return helpers.Setup(model, helpers.train_cfg(**train), helpers.mesh_cfg(), jax.devices()[:1])


def _batch(setup, i):
  return to_device(helpers.packed_batch(8, 12, setup.model.cfg.vocab_size, seed=i),
                   batch_sharding(setup.mesh, setup.rules))


def _numpy_ema(trajectory, decay, warmup):
  """ema_0 = p_0; ema_{t+1} = d_t ema_t + (1 - d_t) p_{t+1}, d_t = decay or min(decay,
  (1 + t) / (10 + t)), in float64 over the host copies of each step's parameters."""
  ema = [np.asarray(x, np.float64) for x in trajectory[0]]
  for t, params in enumerate(trajectory[1:]):
    d = min(decay, (1 + t) / (10 + t)) if warmup else decay
    ema = [d * e + (1 - d) * np.asarray(p, np.float64) for e, p in zip(ema, params)]
  return ema


@pytest.fixture(scope="module")
def ema_setup():
  """The tiny model with bfloat16 activations and dropout, EMA decay 0.8 with the warm-up."""
  return _setup("bfloat16", ema_decay=0.8)


def _check_formula(setup, warmup):
  """STEPS steps: the state's EMA equals, to float32 rounding, the EMA computed in numpy from the
  parameters saved after each step; it is float32, and its shardings are the parameters'."""
  assert setup.shardings.ema == setup.shardings.params
  state = setup.fresh_state()
  trajectory = [jax.tree.leaves(jax.device_get(state.params))]
  assert helpers.max_diff(jax.device_get(state.ema), jax.device_get(state.params)) == 0
  for i in range(STEPS):
    state, metrics = setup.step(state, _batch(setup, i))
    assert int(metrics["nonfinite"]) == 0
    trajectory.append(jax.tree.leaves(jax.device_get(state.params)))
  got = jax.tree.leaves(jax.device_get(state.ema))
  assert {x.dtype for x in got} == {np.dtype(np.float32)}
  expected = _numpy_ema(trajectory, 0.8, warmup)
  other = _numpy_ema(trajectory, 0.8, not warmup)  # the other form: far from it
  for g, e in zip(got, expected):
    np.testing.assert_allclose(g, e, rtol=0, atol=2e-7)
  assert max(float(np.max(np.abs(g - p))) for g, p in zip(got, other)) > 1e-3
  assert max(float(np.max(np.abs(g - p))) for g, p in zip(got, trajectory[-1])) > 1e-3


def test_the_ema_follows_its_formula_over_a_few_steps(ema_setup):
  """With the warm-up (d_t = min(0.8, (1 + t) / (10 + t)): 0.1, 0.18, 0.25, 0.31), bfloat16
  activations (tfm's parameters are float32; the EMA is float32 by its own cast too)."""
  _check_formula(ema_setup, warmup=True)


@pytest.mark.long
def test_the_plain_ema_follows_its_formula():
  """Without the warm-up (d = 0.8 from the first update), float32 activations."""
  _check_formula(_setup("float32", ema_decay=0.8, ema_warmup=False), warmup=False)


def test_the_decay_with_and_without_warmup():
  from tfm.train.ema import EmaSettings, decay_at  # pylint: disable=import-outside-toplevel
  counts = np.array([0, 1, 8, 90, 1000, 10_000])
  np.testing.assert_allclose(decay_at(EmaSettings(0.999, True), counts),
                             np.minimum(0.999, (1 + counts) / (10 + counts)), rtol=1e-7)
  np.testing.assert_allclose(decay_at(EmaSettings(0.999, False), counts), 0.999, rtol=1e-7)
  assert EmaSettings.of(TrainConfig()) is None
  assert EmaSettings.of(TrainConfig(ema_decay=0.99, ema_warmup=False)) == EmaSettings(0.99, False)


def _refused_then_applied(setup, decay):
  """A NaN parameter: the update is refused and the EMA comes back bit for bit; the next finite
  update moves it by its formula at the count of applied updates (t = 0: d = min(decay, 1/10))."""
  host = jax.device_get(setup.fresh_state())
  poisoned = host.params["wi"].copy()
  poisoned[0, 0] = np.nan
  bad = host.replace(params={**host.params, "wi": poisoned})
  state, metrics = setup.step(jax.device_put(bad, setup.shardings), _batch(setup, 0))
  assert int(metrics["nonfinite"]) == 1
  after = jax.device_get(state)
  assert helpers.max_diff(after.ema, host.ema) == 0
  repaired = after.replace(params={**after.params, "wi": host.params["wi"]})
  state, metrics = setup.step(jax.device_put(repaired, setup.shardings), _batch(setup, 0))
  assert int(metrics["nonfinite"]) == 0 and int(state.nonfinite_count) == 1
  new = jax.device_get(state)
  d = min(decay, 0.1)
  for e0, p1, e1 in zip(jax.tree.leaves(host.ema), jax.tree.leaves(new.params),
                        jax.tree.leaves(new.ema)):
    np.testing.assert_allclose(e1, d * e0 + (1 - d) * p1, rtol=0, atol=2e-7)


def test_a_refused_update_leaves_the_ema_as_it_is(ema_setup):
  """The CPU's guard (branch)."""
  _refused_then_applied(ema_setup, 0.8)


@pytest.mark.long
def test_the_select_guard_refuses_the_emas_update_too():
  _refused_then_applied(_setup(ema_decay=0.9, guard="select"), 0.9)


def test_without_an_ema_the_state_holds_none(tiny_setup):
  assert tiny_setup.state.ema is None and tiny_setup.shardings.ema is None


@pytest.mark.parametrize("key, value, expected", [
    ("ema_decay", 1.0, r"a number in \[0, 1\) \(0 = no EMA\)"),
    ("ema_decay", -0.1, r"a number in \[0, 1\)"),
    # below 1, but 1 in float32, where the step computes the decay: an EMA frozen at p_0
    ("ema_decay", 0.99999999, r"a number in \[0, 1\) \(0 = no EMA\), at most 0\.99999994"),
    ("ema_warmup", 1, "True or False"),
    ("optimizer", "sgd", r"one of \('adam', 'adamw', 'adafactor'\)"),
    ("weight_decay", -1.0, "None .* or a non-negative finite number"),
    ("adafactor_decay_rate", 0.0, r"a number in \(0, 1\]"),
    ("adafactor_clipping_threshold", 0.5, r"0 \(off\) or a number >= 1"),
    ("adafactor_min_dim_size_to_factor", 0, "a positive integer"),
    ("adafactor_epsilon", 0.0, "a positive finite number"),
    ("adafactor_momentum", 1.0, r"a number in \[0, 1\)"),
    ("adafactor_factored", "yes", "True or False"),
    ("adafactor_multiply_by_parameter_scale", None, "True or False"),
])
def test_bad_keys_are_named(key, value, expected):
  with pytest.raises(ValueError, match=rf"^config key train\.{key}: expected {expected}"):
    TrainConfig(**{key: value})


def test_the_defaults_are_t5x_adafactor_and_the_paper_adam():
  t = TrainConfig()
  assert (t.optimizer, t.ema_decay, t.weight_decay) == ("adam", 0.0, None)
  assert (t.adafactor_decay_rate, t.adafactor_clipping_threshold, t.adafactor_factored,
          t.adafactor_min_dim_size_to_factor, t.adafactor_multiply_by_parameter_scale,
          t.adafactor_epsilon, t.adafactor_momentum) == (0.8, 1.0, True, 128, True, 1e-30, 0.0)
  from tfm.train.config import decay_rate  # pylint: disable=import-outside-toplevel
  assert [decay_rate(dataclasses.replace(t, optimizer=o)) for o in ("adam", "adamw", "adafactor")
          ] == [0.0, 0.01, 0.0]
  assert decay_rate(dataclasses.replace(t, optimizer="adamw", weight_decay=0.0)) == 0.0


@pytest.mark.parametrize("optimizer", ["adam", "adafactor"])
def test_the_ema_and_full_size_optimizer_state_take_the_parameters_logical_axes(optimizer):
  """The shardings come from the boxes' logical axes (tfm/train/state.py): the EMA's are the
  parameters' leaf for leaf, and so are Adam's moments and Adafactor's unfactored statistics
  (nothing factored here: min_dim_size_to_factor 1000; factored row and column means are small
  and unboxed, replicated)."""
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  from tfm.train.optimizer import make_optimizer  # pylint: disable=import-outside-toplevel
  from tfm.train.state import _boxed_state  # pylint: disable=import-outside-toplevel
  model = TinySeq2Seq(tiny_config())
  tx, _ = make_optimizer(helpers.train_cfg(optimizer=optimizer,
                                           adafactor_min_dim_size_to_factor=1000), 32)
  boxed = jax.eval_shape(lambda: _boxed_state(model, tx, jax.random.PRNGKey(0), 1, ema=True))
  specs = nn.get_partition_spec(boxed)
  assert specs.ema == specs.params
  params, treedef = jax.tree.flatten(specs.params)
  assert any(s != jax.sharding.PartitionSpec() for s in params)
  if optimizer == "adam":
    assert specs.opt_state["adam"].mu == specs.params
  else:
    per_leaf = treedef.flatten_up_to(specs.opt_state["adafactor"])
    assert [state[0].v for state in per_leaf] == params


def test_runs_written_before_these_keys_keep_their_fingerprints():
  """Every key this module's features add is in config.ADDED_LATER at its default (a sweep's
  fingerprint leaves it out there, so published runs keep matching), and config.json writes the
  weight decay in force: 0.0 for adam, as every earlier run wrote it, 0.01 for adamw."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  new = ("optimizer", "ema_decay", "ema_warmup", "adafactor_decay_rate",
         "adafactor_clipping_threshold", "adafactor_factored", "adafactor_min_dim_size_to_factor",
         "adafactor_multiply_by_parameter_scale", "adafactor_epsilon", "adafactor_momentum")
  default = config_lib.flatten(config_lib.Config().to_dict())
  for key in new:
    assert config_lib.ADDED_LATER[f"train.{key}"] == default[f"train.{key}"], key
  assert default["train.weight_decay"] == 0.0
  adamw = config_lib.Config(train=TrainConfig(optimizer="adamw")).to_dict()
  assert adamw["train"]["weight_decay"] == 0.01
  # Read back, config.json's 0.01 is adamw's default again: the same config, hashing alike (one
  # form for one run), and an explicit other decay stays as given.
  back = config_lib.build(adamw)
  assert back == config_lib.Config(train=TrainConfig(optimizer="adamw")) and hash(back) == hash(
      config_lib.Config(train=TrainConfig(optimizer="adamw")))
  assert decay_rate(back.train) == 0.01
  assert TrainConfig(optimizer="adamw", weight_decay=0.0).weight_decay == 0.0
  assert TrainConfig(optimizer="adam", weight_decay=0.0) == TrainConfig()


def test_a_checkpoint_written_before_the_state_had_an_ema_resumes(tiny_setup, tmp_path):
  """An older tfm's TrainState had no `ema` field, so its checkpoints' trees have no `ema` node
  (this tfm saves None there): a run without an EMA resumes them, bit for bit, through the loop's
  Checkpointer and through restore_state (tfm convert, train.init_from with init_optimizer)."""
  from tfm.train import checkpoint as ckpt_lib  # pylint: disable=import-outside-toplevel
  state = jax.device_get(tiny_setup.initial).replace(step=np.int32(3))
  older = {name: getattr(state, name) for name in
           ("step", "params", "opt_state", "rng", "nonfinite_count")}  # the older TrainState
  checkpointer = ckpt_lib.Checkpointer(tmp_path, keep=2)
  checkpointer.save(3, older)
  checkpointer.wait()
  restored, _, step = checkpointer.restore(tiny_setup.experiment.abstract_state)
  checkpointer.close()
  again, _ = ckpt_lib.restore_state(tmp_path, 3, tiny_setup.experiment.abstract_state)
  for got in (restored, again):
    assert step == 3 and got.ema is None and int(got.step) == 3
    assert helpers.max_diff(jax.device_get(got.params), state.params) == 0
    assert helpers.max_diff(jax.device_get(got.opt_state), state.opt_state) == 0
  # A run with an EMA is still told, in one line, that this checkpoint holds none.
  with_ema = tiny_setup.experiment.abstract_state.replace(
      ema=tiny_setup.experiment.abstract_state.params)
  with pytest.raises(ValueError, match=r"config key train\.ema_decay: .* holds no EMA"):
    ckpt_lib.restore_state(tmp_path, 3, with_ema)


def test_a_sweep_reads_the_ema_result_scored_with_its_length_buckets(tmp_path):
  """A sweep whose config sets eval.length_buckets (configs/positions.py) has its `tfm eval` and
  `tfm eval --checkpoint ema` results named ..._len<edges>.json: the run's result takes the EMA's
  figures from the file scored as the series is (its limit and buckets), not a hand-run one."""
  import json  # pylint: disable=import-outside-toplevel
  from tfm.commands.sweep_results import SweepResults  # pylint: disable=import-outside-toplevel
  from tfm.config import load_config  # pylint: disable=import-outside-toplevel
  from tfm.sweep.runs import Run  # pylint: disable=import-outside-toplevel
  config = load_config("configs/quickstart.py", ["train.steps=6", "train.ema_decay=0.9",
                                                 "eval.length_buckets=10,20"])
  run = Run("configs/quickstart.py", None, (("train.ema_decay", "0.9"),), 0)
  results = SweepResults([run], {run: config}, load_config("configs/quickstart.py"),
                         eval_limit=lambda r: 4)
  results._fingerprints[run] = "-"  # pylint: disable=protected-access  (no vocabulary here)
  figures = lambda ppl: {"perplexity": ppl, "bleu": ppl / 10, "tokenized_bleu": 0.0,
                         "checkpoints": [4, 6]}
  for name, ppl in [("eval_dev_6_avg2_first4_len10-20.json", 50.0),
                    ("eval_dev_ema6_first4_len10-20.json", 40.0),
                    ("eval_dev_ema6_first4.json", 99.0)]:  # a hand-run eval without buckets
    (tmp_path / name).write_text(json.dumps(figures(ppl)))
  result = results.describe(run, str(tmp_path), 1.0)
  assert (result.dev_ppl, result.trained_steps) == (50.0, 6)
  assert (result.ema_dev_ppl, result.ema_bleu) == (40.0, 4.0)
