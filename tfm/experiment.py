"""One front door: an experiment config -> the mesh, rules, model, optimizer, state and steps of a run.

Every command, benchmark and test helper assembles a run here and nowhere else:

  exp = Experiment(config)                # nothing is built yet
  exp.data_source                         # config.data's dataset resolved: where it lives, splits
  exp.mesh, exp.rules                     # Mesh('data', 'fsdp', 'tensor') and the fitted rule table
  exp.model                               # Transformer(config.model)
  exp.tx, exp.schedule                    # train.optimizer and its schedule (train section)
  exp.abstract_state, exp.state_shardings # shapes + shardings of the TrainState, nothing allocated
  exp.abstract_params                     # parameters only (inference: no optimizer built)
  exp.init_state()                        # a fresh TrainState created in its shards
  exp.train_step, exp.eval_step           # jitted over the mesh (OnMesh), state donated
  exp.stacked_train_step(k)               # the same step vmapped over k runs (tfm/train/stack.py)
  exp.translate_fn(...)                   # beam search / greedy / sampling under the same mesh
  exp.score_fn()                          # log P of given translations, teacher-forced
  exp.generator(...)                      # a decoder-only model's prompt continuation, same mesh
  exp.attention_weights_fn()              # the model's attention weights of a teacher-forced pass
  exp.batch_sharding, exp.batch_row_multiple, exp.abstract_batch(rows, length)
  exp.train_rows(hosts), exp.rows_note(hosts)  # the packed batch's rows, rounded up to split

Building an Experiment points JAX's persistent compilation cache at train.compilation_cache_dir
(tfm/train/compile_cache.py), so a restart, an eval or a plan reuses compiled steps, and sets the
process's float32 product precision to model.matmul_precision (jax_default_matmul_precision: JAX
reads it when it traces, so it is a process's setting, the last Experiment built's, and it replaces
$JAX_DEFAULT_MATMUL_PRECISION). Each piece is
built on first use and kept; the optimizer is built only when training asks for it, so eval and
translate pay for the parameters alone. `model` replaces the Transformer with another module of
the same call contract (the train tests' tiny model); `devices` replaces jax.devices() (a TPU
topology's devices for ahead-of-time compilation).

The pieces are built from the Experiment's `key` (PiecesKey) alone: the model and mesh sections,
the train section's step fields (less what only the loop reads, and the seed, which init_state
passes the init as its argument: tfm/train/config.step_fields), the devices and the compiler
options. Within one process, Experiments of equal keys share their `pieces` (the last SHARED_KEEP
keys are kept): a second run, a resume, a longer run, an evaluation after training, the next run
of a sweep or another seed (a stack's members) calls the jitted steps the first one traced and
compiled, instead of tracing them again and loading them from the persistent cache. Nothing else
feeds a step (data and eval settings, the seed, reach it as arguments), so equal sections give
the same computation. Code that replaces a builder at run time (a test's monkeypatch) calls forget_shared().
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Sequence

import flax.linen as nn
import jax
import numpy as np

from tfm.config import Config
from tfm.data.batching import BATCH_KEYS, global_rows, rows_note
from tfm.data.sources import DataSource
from tfm.decode.generate import Generator, make_generator
from tfm.decode.score import make_score_fn
from tfm.decode.translate import make_translate_fn
from tfm.model.attention_weights import attention_weights
from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer
from tfm.train import compile_cache, platform_choices
from tfm.train.config import MeshConfig, TrainConfig, step_fields
from tfm.train.mesh import create_mesh
from tfm.train.optimizer import make_optimizer
from tfm.train.sharding import (OnMesh, axes_size, batch_row_multiple, batch_sharding, batch_spec,
                                rules_for_model)
from tfm.train.ema import EmaSettings
from tfm.train.state import (abstract_params, abstract_train_state, check_default_prng,
                             make_init)
from tfm.train.step import make_eval_step, make_train_step


SHARED_KEEP = 8


@dataclasses.dataclass(frozen=True)
class PiecesKey:
  """Everything an Experiment's built pieces read, and so the key of Experiments that share them.

  step_train is the train section as the steps see it (tfm/train/config.step_fields): the fields
  only the training loop reads hold their defaults there, never the run's (read those from
  Experiment.config).
  """
  model: ModelConfig
  mesh: MeshConfig
  step_train: TrainConfig
  devices: tuple
  compiler_options: tuple[tuple[str, Any], ...]  # sorted (name, value) pairs

  @classmethod
  def of(cls, config: Config, devices: Sequence | None, compiler_options: dict | None) -> PiecesKey:
    return cls(model=config.model, mesh=config.mesh, step_train=step_fields(config.train),
               devices=tuple(jax.devices() if devices is None else devices),
               compiler_options=tuple(sorted((compiler_options or {}).items())))


_shared: collections.OrderedDict[PiecesKey, dict] = collections.OrderedDict()


def forget_shared() -> None:
  """Drops the pieces kept for later Experiments (after replacing a function they are built from)."""
  _shared.clear()


def _shared_pieces(key: PiecesKey) -> dict:
  """The pieces built for `key`, shared within the process (the SHARED_KEEP last used kept)."""
  if key in _shared:
    _shared.move_to_end(key)
  else:
    _shared[key] = {}
    while len(_shared) > SHARED_KEEP:
      _shared.popitem(last=False)
  return _shared[key]


def _piece(build):
  """An Experiment property: build(experiment), run on first use and kept in experiment.pieces
  under its name (so Experiments of an equal PiecesKey build it once). A builder reads
  experiment.key, never experiment.config: the key is all a piece may depend on."""
  name = build.__name__

  def get(self):
    if name not in self.pieces:
      self.pieces[name] = build(self)
    return self.pieces[name]

  return property(get, doc=build.__doc__)


class Experiment:
  """The pieces of a run, built lazily from a validated Config (see the module docstring)."""

  def __init__(self, config: Config, *, model: nn.Module | None = None,
               devices: Sequence | None = None, compiler_options: dict | None = None):
    check_default_prng()  # every key threefry's, whatever the process's default
    self.config = config
    self._model = model
    self._devices = devices
    self.compiler_options = compiler_options
    self.compilation_cache_dir = compile_cache.enable(config.train.compilation_cache_dir)
    precision = config.model.matmul_precision
    jax.config.update("jax_default_matmul_precision", None if precision == "default" else precision)

  @functools.cached_property
  def data_source(self) -> DataSource:
    """config.data's dataset, resolved once: the TFDS name and languages, the export or TFDS
    directory it is read from, its splits (tfm/data/sources.py). The loop, the tokenizer, the
    token cache and the pipeline read through it."""
    return DataSource.of(self.config.data)

  @functools.cached_property
  def key(self) -> PiecesKey:
    """What the pieces are built from (the devices are looked up on first use)."""
    return PiecesKey.of(self.config, self._devices, self.compiler_options)

  @functools.cached_property
  def pieces(self) -> dict:
    """The pieces built so far, by name; shared with the process's other Experiments of an equal
    key (what only the training loop reads builds nothing, so Experiments differing there share).
    A given model is not described by its config, so its pieces are never shared."""
    return {} if self._model is not None else _shared_pieces(self.key)

  @_piece
  def mesh(self) -> jax.sharding.Mesh:
    """Mesh('data', 'fsdp', 'tensor') over the devices."""
    return create_mesh(self.key.mesh, self.key.devices)

  @_piece
  def rules(self):
    """mesh.rules with every rule whose model dimension its mesh axes do not divide replicated."""
    return rules_for_model(self.key.mesh.rules, self.mesh, self.key.model)

  @_piece
  def model(self) -> nn.Module:
    """Transformer(config.model), or the module given."""
    return self._model if self._model is not None else Transformer(self.key.model)

  @_piece
  def optimizer(self):
    """(tx, schedule): train.optimizer (the paper's Adam by default) and its schedule."""
    return make_optimizer(self.key.step_train, self.key.model.d_model)

  tx = property(lambda self: self.optimizer[0])
  schedule = property(lambda self: self.optimizer[1])

  @_piece
  def state_and_shardings(self):
    """(the TrainState as jax.ShapeDtypeStructs carrying their shardings, a restore target; the
    shardings alone)."""
    return abstract_train_state(self.model, self.optimizer[0], self.mesh, self.rules,
                                ema=self.key.step_train.ema_decay > 0)  # any seed's shapes

  abstract_state = property(lambda self: self.state_and_shardings[0])
  state_shardings = property(lambda self: self.state_and_shardings[1])

  @_piece
  def params_and_shardings(self):
    """(the parameters as ShapeDtypeStructs with shardings, without building an optimizer; the
    shardings alone)."""
    if "state_and_shardings" in self.pieces:  # built for training already: the same tree, no trace
      state, shardings = self.state_and_shardings
      return state.params, shardings.params
    return abstract_params(self.model, self.mesh, self.rules)

  abstract_params = property(lambda self: self.params_and_shardings[0])
  param_shardings = property(lambda self: self.params_and_shardings[1])

  @_piece
  def _init(self):
    return make_init(self.model, self.optimizer[0], self.mesh, self.state_shardings,
                     self._compiler_options)

  def init_state(self):
    """A fresh TrainState (seed train.seed: the init's argument, so Experiments that differ in
    their seeds share it), every array created directly in its shards."""
    return self._init(self.config.train.seed)

  @property
  def _compiler_options(self) -> dict | None:
    return dict(self.key.compiler_options) or None

  @property
  def platform(self) -> str:
    """The platform of the mesh's devices ("cpu", "gpu", "tpu"; a TPU topology's for a plan)."""
    return self.mesh.devices.flat[0].platform

  @property
  def choices(self) -> platform_choices.Choices:
    """How the run executes on this platform: train.input, saves, guard and dropout_prng with
    "auto" resolved (tfm/train/platform_choices.py)."""
    return platform_choices.resolve(self.config.train, self.platform)

  @_piece
  def train_step(self) -> OnMesh:
    """train_step(state, batch) -> (state, metrics), jitted over the mesh, state donated; with the
    non-finite guard and the dropout PRNG of `choices`."""
    t = self.key.step_train
    tx, schedule = self.optimizer
    choices = platform_choices.resolve(t, self.platform)
    return make_train_step(self.model, tx, schedule, label_smoothing=t.label_smoothing,
                           microbatches=t.microbatches, mesh=self.mesh, rules=self.rules,
                           state_shardings=self.state_shardings,
                           compiler_options=self._compiler_options, guard=choices.guard,
                           prng=choices.dropout_prng, ema=EmaSettings.of(t))

  def stacked_train_step(self, members: int, scalars=None) -> OnMesh:
    """train_step's stacked form for `members` runs of this model (tfm/train/stack.py: this
    Experiment's config is stack.structure_config's) that differ in their seeds and in `scalars`
    (a stack.MemberScalars): every leaf of the state and the batch has a leading member axis."""
    built = self.pieces.setdefault("stacked_train_steps", {})  # one per members and scalars
    if (members, scalars) not in built:
      t = self.key.step_train
      tx, schedule = self.optimizer
      choices = platform_choices.resolve(t, self.platform, stacked=True)
      built[members, scalars] = make_train_step(
          self.model, tx, schedule, label_smoothing=t.label_smoothing,
          microbatches=t.microbatches, mesh=self.mesh, rules=self.rules,
          state_shardings=self.state_shardings, compiler_options=self._compiler_options,
          guard=choices.guard, prng=choices.dropout_prng, members=members,
          member_scalars=scalars, ema=EmaSettings.of(t))
    return built[members, scalars]

  @_piece
  def eval_step(self) -> OnMesh:
    """eval_step(params, batch) -> loss sums, jitted over the mesh."""
    return make_eval_step(self.model, self.key.step_train.label_smoothing, self.mesh, self.rules,
                          self.param_shardings, self._compiler_options)

  @property
  def batch_sharding(self) -> jax.sharding.NamedSharding:
    return batch_sharding(self.mesh, self.rules)

  @property
  def batch_shards(self) -> int:
    """How many ways the rows of a batch are split (the mesh axes of `act_batch`)."""
    return axes_size(self.mesh, batch_spec(self.rules)[0])

  @property
  def batch_row_multiple(self) -> int:
    """Training batches must have a multiple of this many rows: microbatches x batch shards."""
    return batch_row_multiple(self.mesh, self.rules, self.config.train.microbatches)

  def train_rows(self, process_count: int = 1) -> int:
    """Global rows of a packed training batch: data.tokens_per_batch // data.max_length rounded up
    to a multiple of the hosts and of batch_row_multiple (tfm/data/batching.py global_rows)."""
    return global_rows(self.config.data, process_count, self.batch_row_multiple)

  def rows_note(self, process_count: int = 1) -> str | None:
    """The one line saying train_rows rounded the configured rows up (None when it did not)."""
    m = self.config.train.microbatches
    split = f"{self.batch_shards} batch shards" + (f" x train.microbatches={m}" if m > 1 else "")
    return rows_note(self.config.data, process_count, self.batch_row_multiple, split)

  def decode_rows(self, wanted: int) -> int:
    """`wanted` decode rows rounded up to a multiple of the batch shards."""
    return -(-max(wanted, 1) // self.batch_shards) * self.batch_shards

  def abstract_batch(self, rows: int, length: int,
                     target_length: int | None = None) -> dict[str, jax.ShapeDtypeStruct]:
    """A global packed batch of int32 as ShapeDtypeStructs on the batch sharding: inputs [rows,
    length], targets [rows, target_length] (None: length; task span's targets are shorter, its
    task's target_length)."""
    keys = BATCH_KEYS if self.config.model.has_encoder else tuple(
        k for k in BATCH_KEYS if k.startswith("targets"))
    wide = lambda k: target_length if k.startswith("targets") and target_length else length
    return {k: jax.ShapeDtypeStruct((rows, wide(k)), np.int32, sharding=self.batch_sharding)
            for k in keys}

  def translate_fn(self, *, beam_size: int | None = None, length_penalty: float | None = None,
                   max_extra_length: int | None = None, n_best: int | None = None,
                   temperature: float | None = None, top_k: int = 0, top_p: float = 1.0,
                   eos_id: int = 1) -> OnMesh:
    """translate(params, inputs, rng) on this mesh: beam search with the eval section's settings
    (beam_size, length_penalty, max_extra_length override eval's; beam_size 1 = greedy; n_best:
    the n best hypotheses, see make_translate_fn), or sampling when `temperature` is set."""
    if not self.config.translates:
      raise ValueError(f"config key task={self.config.task!r}: translating (dev BLEU, tfm "
                       "translate) needs task 'translate' and model.architecture "
                       "'encoder_decoder'")
    e = self.config.eval
    pick = lambda given, configured: configured if given is None else given
    settings = dict(beam_size=pick(beam_size, e.beam_size),
                    alpha=pick(length_penalty, e.length_penalty),
                    max_extra_length=pick(max_extra_length, e.max_extra_length), eos_id=eos_id,
                    temperature=temperature, top_k=top_k, top_p=top_p,
                    cache_phases=e.cache_phases, n_best=n_best)
    if settings["beam_size"] == 1:  # greedy search reads no length penalty: one function for all
      settings["alpha"] = 0.0
    built = self.pieces.setdefault("translate_fns", {})  # one per setting, shared as the rest
    key = tuple(sorted(settings.items()))
    if key not in built:
      built[key] = OnMesh(make_translate_fn(self.model, **settings), self.mesh, self.rules)
    return built[key]

  def generator(self, *, max_new_tokens: int, temperature: float = 1.0, top_k: int = 0,
                top_p: float = 1.0, eos_id: int = 1) -> Generator:
    """The prompt continuation of a decoder-only model on this mesh (tfm/decode/generate.py): its
    generate, start, prepare and advance, the jitted ones each an OnMesh; temperature 0 is
    greedy."""
    architecture = self.key.model.architecture
    if architecture != "decoder_only":
      raise ValueError(f"model.architecture={architecture!r}: continuing prompts (tfm generate) "
                       "needs a 'decoder_only' language model")
    settings = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                    top_p=top_p, eos_id=eos_id)
    built = self.pieces.setdefault("generators", {})  # one per setting, shared as the rest
    key = tuple(sorted(settings.items()))
    if key not in built:
      made = make_generator(self.model, **settings)
      built[key] = Generator(*(OnMesh(f, self.mesh, self.rules) if hasattr(f, "lower") else f
                               for f in made))  # (an unscanned model's prepare is no jit)
    return built[key]

  def score_fn(self) -> OnMesh:
    """score(params, inputs [b, s], targets [b, t]) on this mesh -> (log P(target | input) [b],
    target lengths [b]): the teacher-forced log-probability of given translations
    (tfm/decode/score.py)."""
    return self._score

  @_piece
  def _score(self) -> OnMesh:
    return OnMesh(make_score_fn(self.model), self.mesh, self.rules)

  def attention_weights_fn(self) -> OnMesh:
    """weights(params, inputs [b, s], targets [b, t]) on this mesh -> {kind: float32 [layers, b,
    heads, q_length, kv_length]}: the model's own softmax probabilities of a teacher-forced forward
    pass (tfm/model/attention_weights.py), kinds 'encoder', 'decoder' and 'cross'."""
    return self._attention_weights

  @_piece
  def _attention_weights(self) -> OnMesh:
    return OnMesh(jax.jit(functools.partial(attention_weights, self.model)), self.mesh, self.rules)
