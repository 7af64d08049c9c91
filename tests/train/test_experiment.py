"""Experiments of equal model, train and mesh sections share their traced steps within a process."""
# pylint: disable=protected-access

import dataclasses

import jax
import numpy as np

from tests.train.helpers import FAST_COMPILE as FAST, experiment_config, mesh_cfg, packed_batch, train_cfg
from tfm import experiment as experiment_lib
from tfm.experiment import Experiment
from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer

MODEL = ModelConfig(vocab_size=64, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                    num_encoder_layers=1, num_decoder_layers=1)


def test_equal_sections_share_steps_and_each_init_is_a_fresh_state():
  experiment_lib.forget_shared()
  config = experiment_config(MODEL, train_cfg(), mesh_cfg())
  first = Experiment(config, compiler_options=FAST)
  # The data and eval sections do not reach the steps: another batch size or beam shares them.
  other_data = config.replace(data=dataclasses.replace(config.data, tokens_per_batch=999),
                              eval=dataclasses.replace(config.eval, bleu_every=7))
  second = Experiment(other_data, compiler_options=dict(FAST))
  assert second.train_step is first.train_step and second.eval_step is first.eval_step
  assert second.translate_fn(eos_id=1) is first.translate_fn(eos_id=1)
  assert second.translate_fn(beam_size=1) is not first.translate_fn()
  # Nor do the loop's cadences, or the run's length under a schedule that does not decay to it.
  longer = config.replace(train=dataclasses.replace(config.train, steps=77, log_every=2, eval_every=3,
                                                    checkpoint_every=4, nonfinite="stop"))
  assert Experiment(longer, compiler_options=FAST).train_step is first.train_step
  assert Experiment(longer, compiler_options=FAST).config.train.steps == 77
  # Nor does the seed, the init's argument: another seed (a stack's member) shares every piece.
  seeded = Experiment(config.replace(train=dataclasses.replace(config.train, seed=7)),
                      compiler_options=FAST)
  assert seeded.pieces is first.pieces and seeded.config.train.seed == 7
  # Anything the steps are built from, changed, builds them again.
  built = first.pieces
  cosine = dataclasses.replace(config.train, schedule="linear_cosine", steps=40)
  cosine_pieces = Experiment(config.replace(train=cosine), compiler_options=FAST).pieces
  assert cosine_pieces is not built  # linear_cosine decays to train.steps: another length, another step
  assert Experiment(config.replace(train=dataclasses.replace(cosine, steps=41)),
                    compiler_options=FAST).pieces is not cosine_pieces
  for changed in (config.replace(train=dataclasses.replace(config.train, label_smoothing=0.0)),
                  config.replace(model=dataclasses.replace(MODEL, dropout_rate=0.2)),
                  config.replace(mesh=dataclasses.replace(config.mesh, rules=config.mesh.rules[1:]))):
    assert Experiment(changed, compiler_options=FAST).pieces is not built
  assert Experiment(config).pieces is not built  # other compiler options
  # ... and starts from its own seed's state: its key the third of PRNGKey(7)'s split in three,
  # its parameters its own, from the one compiled init.
  seed_0, seed_7 = jax.device_get(first.init_state()), jax.device_get(seeded.init_state())
  np.testing.assert_array_equal(seed_7.rng, jax.random.split(jax.random.PRNGKey(7), 3)[2])
  np.testing.assert_array_equal(seed_0.rng, jax.random.split(jax.random.PRNGKey(0), 3)[2])
  drawn = [(x, y) for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(seed_0.params),
                                           jax.tree.leaves(seed_7.params))
           if path[-1].key in ("kernel", "embedding")]  # biases and norms start as 0 and 1
  assert drawn and all(not np.array_equal(x, y) for x, y in drawn)
  # A shared init still gives each run its own arrays: a step donating one leaves the other intact.
  a, b = first.init_state(), second.init_state()
  initial = jax.device_get(b)
  first.train_step(a, packed_batch(2, 12, MODEL.vocab_size))
  for x, y in zip(jax.tree.leaves(jax.device_get(b)), jax.tree.leaves(initial)):
    assert np.array_equal(x, y)


def test_a_given_model_is_never_shared():
  config = experiment_config(MODEL, train_cfg(), mesh_cfg())
  shared = Experiment(config)
  assert Experiment(config, model=shared.model).train_step is not shared.train_step
  experiment_lib.forget_shared()
  assert Experiment(config).train_step is not shared.train_step


def test_parameters_alone_equal_the_states_parameters():
  """Inference builds the abstract parameters without an optimizer; once training has built the
  abstract state, they are its parameters (no second trace): the same shapes and shardings."""
  config = experiment_config(MODEL, train_cfg(), mesh_cfg())
  alone = Experiment(config, model=Transformer(MODEL))  # a given model: its own pieces, unshared
  params, shardings = alone.abstract_params, alone.param_shardings
  assert "state_and_shardings" not in alone.pieces
  trained = Experiment(config, model=Transformer(MODEL))
  assert trained.abstract_state.params is trained.abstract_params
  assert jax.tree.structure(trained.abstract_params) == jax.tree.structure(params)
  for got, want in zip(jax.tree.leaves(trained.abstract_params), jax.tree.leaves(params)):
    assert (got.shape, got.dtype, got.sharding) == (want.shape, want.dtype, want.sharding)
  assert jax.tree.leaves(trained.param_shardings) == jax.tree.leaves(shardings)


def test_matmul_precision_reaches_every_product_of_the_train_step():
  """model.matmul_precision sets the precision of the step's products when it is traced: at
  "highest" every dot_general of the lowered train step carries HIGHEST, at "default" none does
  (LayerNorm's own full-precision reduction aside, which asks for HIGHEST itself)."""
  texts = {}
  for precision in ("default", "highest"):
    model = dataclasses.replace(MODEL, matmul_precision=precision)
    exp = Experiment(experiment_config(model, train_cfg(), mesh_cfg()), compiler_options=FAST)
    assert jax.config.jax_default_matmul_precision == (None if precision == "default" else precision)
    texts[precision] = exp.train_step.lower(exp.abstract_state, exp.abstract_batch(2, 8)).as_text()
  dots = lambda text: [line for line in text.splitlines() if "dot_general" in line]
  highest = lambda text: [line for line in dots(text) if "HIGHEST" in line]
  assert dots(texts["highest"]) and highest(texts["highest"]) == dots(texts["highest"])
  assert len(highest(texts["default"])) < len(dots(texts["default"]))
  Experiment(experiment_config(MODEL, train_cfg(), mesh_cfg()))  # the process's default again
