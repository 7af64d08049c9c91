"""The `train` and `mesh` config sections: frozen dataclasses, validated when they are built.

`TrainConfig()` holds the paper's optimisation settings (sections 5.3, 5.4): Adam(0.9, 0.98, 1e-9),
lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) with warmup_steps = 4000, label
smoothing 0.1, 100K steps. `MeshConfig()` is pure data parallelism over every device.

Errors name the offending key (`config key train.warmup_steps: expected ...`), so a bad value fails
before anything is compiled.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tfm import sections
from tfm.sections import fail, is_int, is_number
from tfm.train import platform_choices

SCHEDULES = ("rsqrt_warmup", "linear_cosine", "constant", "rsqrt")
BEST_METRICS = ("none", "dev_ppl", "dev_bleu")  # tfm/train/checkpoint/best.py
INIT_CHECKPOINTS = ("last", "best")
NONFINITE = ("skip", "stop")
TRACKERS = ("tensorboard", "mlflow", "wandb")  # tfm/train/trackers/__init__.py
WANDB_MODES = ("offline", "online")
OPTIMIZERS = ("adam", "adamw", "adafactor")  # tfm/train/optimizer.py
ADAMW_WEIGHT_DECAY = 0.01  # train.weight_decay's default under train.optimizer='adamw'

MESH_AXES = ("data", "fsdp", "tensor")

# Logical axis (tfm/model/partitioning.py) -> mesh axis. One table serves data parallelism, FSDP and
# tensor parallelism: a mesh axis of size 1 shards nothing, so only the mesh sizes change.
DEFAULT_RULES = (
    ("act_batch", ("data", "fsdp")),
    ("act_length", None),
    ("act_embed", None),
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_kv", None),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("position", None),
    ("relpos", None),
    ("layers", None),  # a scanned stack's layers dimension: every device holds every layer's slice
)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Optimisation and bookkeeping of a run; defaults are the paper's base model."""

  steps: int = 100_000  # section 5.2
  warmup_steps: int = 4000  # section 5.3
  schedule: str = "rsqrt_warmup"  # the paper's; or linear_cosine, constant, rsqrt
  learning_rate: float = 1.0  # scale factor for rsqrt_warmup; the peak learning rate for the others
  end_learning_rate_fraction: float = 0.0  # linear_cosine: final lr = fraction * peak
  adam_b1: float = 0.9  # section 5.3
  adam_b2: float = 0.98
  adam_eps: float = 1e-9
  # The update rule (tfm/train/optimizer.py): 'adam' (the paper's), 'adamw' (Adam with decoupled
  # weight decay, 0.01 unless train.weight_decay says) or 'adafactor' (optax's, the adafactor_*
  # keys below; t5x's defaults).
  optimizer: str = "adam"
  # Decoupled weight decay (Loshchilov & Hutter), matrices only, times the learning rate; None =
  # the optimizer's default: 0 (off) for adam and adafactor, ADAMW_WEIGHT_DECAY for adamw.
  weight_decay: float | None = None
  grad_clip_norm: float = 0.0  # global-norm clipping; 0 = off
  # Adafactor (train.optimizer='adafactor'; Shazeer & Stern 2018, optax.adafactor's parts), t5x's
  # defaults: second-moment decay 1 - step^-decay_rate, updates clipped to an RMS of
  # clipping_threshold (0 = off), second moments factored into row and column means for
  # matrices whose two largest dimensions are at least min_dim_size_to_factor, steps scaled by
  # the parameter's RMS (at least 1e-3), epsilon added to the squared gradients, no momentum
  # (0 = none; else the first moment's decay).
  adafactor_decay_rate: float = 0.8
  adafactor_clipping_threshold: float = 1.0
  adafactor_factored: bool = True
  adafactor_min_dim_size_to_factor: int = 128
  adafactor_multiply_by_parameter_scale: bool = True
  adafactor_epsilon: float = 1e-30
  adafactor_momentum: float = 0.0
  # An exponential moving average of the parameters, float32, kept in the train state beside
  # them (tfm/train/ema.py): ema <- d * ema + (1 - d) * params after each applied update, with
  # d = ema_decay, or min(ema_decay, (1 + t) / (10 + t)) at update t with ema_warmup (Marian's
  # and TensorFlow's warm-up, so the initial parameters weigh nothing); 0 = off. Evaluated beside
  # the raw parameters (`dev_ema/...`); `tfm eval --checkpoint ema` reads it.
  ema_decay: float = 0.0
  ema_warmup: bool = True
  label_smoothing: float = 0.1  # section 5.4
  microbatches: int = 1  # gradient accumulation: the batch is split in this many slices
  seed: int = 0  # parameter init and dropout
  nonfinite: str = "skip"  # non-finite loss/gradients/rate: 'skip' the update, or 'stop' training
  log_every: int = 100
  eval_every: int = 5000
  checkpoint_every: int = 1500  # the paper wrote a checkpoint every 10 minutes at 0.4 s/step
  keep_checkpoints: int = 5
  average_checkpoints: int = 5  # 5 for base, 20 for big (section 6.1)
  # Persistent XLA compilation cache (tfm/train/compile_cache.py): None = $JAX_COMPILATION_CACHE_DIR
  # or ~/.cache/tfm/xla, "" = off.
  compilation_cache_dir: str | None = None
  # (a, b): a profiler trace of steps a+1..b into WORKDIR/tensorboard (TensorBoard's profile tab);
  # () = none.
  profile_steps: tuple = ()
  # WORKDIR/curves.png redrawn at each evaluation and at the end (~0.5 s a drawing on a CPU core,
  # ~1 s more for matplotlib's import in a new process); False: `tfm plot` draws it when asked.
  curves: bool = True
  # How the run executes on its platform (tfm/train/platform_choices.py): "auto" is the platform's
  # measured choice, or one of the forms.
  input: str = "auto"  # training batches made inline or in a process of their own
  saves: str = "auto"  # checkpoints written in the background (Orbax's async write) or sync
  guard: str = "auto"  # the non-finite guard: branch (lax.cond) or select (jnp.where)
  dropout_prng: str = "auto"  # dropout masks by threefry or rbg (XLA's RngBitGenerator)
  # The best checkpoint by a dev metric, kept in WORKDIR/best apart from the last keep_checkpoints
  # (tfm/train/checkpoint/best.py): 'none', 'dev_ppl' (every eval_every) or 'dev_bleu' (every
  # eval.bleu_every), of the first evaluation set (data.eval_sets; 'dev' by default);
  # `tfm eval --checkpoint=best` evaluates it.
  best_metric: str = "none"
  # Early stopping: stop once best_metric has not improved for this many of its evaluations; 0 = off.
  patience: int = 0
  # Start from another run's parameters (its workdir), with a fresh optimizer and schedule; a
  # resume of this run continues its own checkpoints (tfm/train/init_from.py).
  init_from: str | None = None
  init_checkpoint: str = "last"  # init_from's 'last' checkpoint, or its 'best' (train.best_metric)
  # True: init_from's whole state, its optimizer moments and its step (the schedule goes on where
  # it left off, and the dropout key), not only its parameters.
  init_optimizer: bool = False
  # Experiment trackers the lead host writes the run to (tfm/train/trackers/__init__.py): 'tensorboard'
  # (WORKDIR/tensorboard's event files, which curves.png, tfm plot and a sweep's dev curves read),
  # 'mlflow' (a run on an MLflow tracking server), 'wandb' (a Weights & Biases run). On the
  # command line: --config.train.trackers=tensorboard,mlflow.
  trackers: tuple = ("tensorboard",)
  # The MLflow tracking server (http://host:5000, or a database URI such as sqlite:///runs.db);
  # None: $MLFLOW_TRACKING_URI.
  mlflow_tracking_uri: str | None = None
  # The MLflow experiment and the W&B project the run goes to; None: under `tfm sweep` the sweep's
  # (its --root's name), else $MLFLOW_EXPERIMENT_NAME / $WANDB_PROJECT, else 'tfm'.
  tracker_experiment: str | None = None
  # W&B: 'offline' (files in WORKDIR/trackers/wandb, no account or network; `wandb sync` uploads
  # them later) or 'online' (needs `wandb login` or $WANDB_API_KEY); the entity (team or user):
  # None = $WANDB_ENTITY, else the account's default.
  wandb_mode: str = "offline"
  wandb_entity: str | None = None

  def __post_init__(self):
    validate_train_config(self)
    # One form for one run: a weight decay equal to the optimizer's default is stored as None, so
    # a config read back from config.json (which writes the decay in force) equals the one that
    # wrote it, and hashes alike.
    if self.weight_decay is not None and float(self.weight_decay) == _default_decay(self.optimizer):
      object.__setattr__(self, "weight_decay", None)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Mesh axis sizes (one may be -1: all remaining devices) and the logical-axis rule table."""

  data: int = -1
  fsdp: int = 1
  tensor: int = 1
  rules: tuple = DEFAULT_RULES  # (logical name, mesh axis | tuple of mesh axes | None) pairs

  def __post_init__(self):
    rules = DEFAULT_RULES if self.rules is None else self.rules
    validate_rules(rules)
    # JSON and ConfigDicts hand back lists: store the canonical tuple form.
    object.__setattr__(self, "rules", tuple(
        (name, tuple(axes) if isinstance(axes, list) else axes) for name, axes in rules))
    validate_mesh_config(self)


# Read by the training loop alone (cadences, the cache's place, profiling, curves, what a skipped
# update does next): runs that differ only in these compile the same steps.
LOOP_FIELDS = ("log_every", "eval_every", "checkpoint_every", "keep_checkpoints", "average_checkpoints",
               "nonfinite", "compilation_cache_dir", "profile_steps", "curves", "input", "saves",
               "best_metric", "patience", "init_from", "init_checkpoint", "init_optimizer",
               "trackers", "mlflow_tracking_uri", "tracker_experiment", "wandb_mode",
               "wandb_entity")


def step_fields(train: TrainConfig) -> TrainConfig:
  """`train` with what the optimizer, init and steps do not read put back to the defaults: the
  LOOP_FIELDS, the seed (the init takes it as its argument: runs that differ in their seeds, a
  stack's members or a sweep's, share one init and every step), and `steps` unless the schedule
  decays to it (linear_cosine)."""
  loop = {key: getattr(TrainConfig, key) for key in LOOP_FIELDS}
  loop["seed"] = TrainConfig.seed
  if train.schedule != "linear_cosine":
    loop["steps"] = TrainConfig.steps
  return dataclasses.replace(train, **loop)


def train_from_mapping(values) -> TrainConfig:
  return sections.from_mapping(TrainConfig, "train", values, profile_steps=tuple,
                               trackers=_tracker_names)


def _tracker_names(value):
  """train.trackers as a tuple of names: from a list (JSON), a string 'tensorboard,mlflow', or
  the one-string tuple ml_collections makes of --config.train.trackers=tensorboard,mlflow."""
  if isinstance(value, str):
    value = (value,)
  if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
    return tuple(name.strip() for v in value for name in v.split(",") if name.strip())
  return value


def mesh_from_mapping(values) -> MeshConfig:
  return sections.from_mapping(MeshConfig, "mesh", values)


def validate_train_config(train: TrainConfig) -> None:
  """Checks the `train` section; raises ValueError naming the key."""
  for key in ("steps", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
              "average_checkpoints", "microbatches"):
    if not is_int(getattr(train, key)) or getattr(train, key) < 1:
      fail(f"train.{key}", "a positive integer", getattr(train, key))
  if not is_int(train.warmup_steps) or train.warmup_steps < 0:
    fail("train.warmup_steps", "a non-negative integer", train.warmup_steps)
  # PRNGKey keeps a seed's low 32 bits: 2**32 + s would start exactly as s (and 2**63 fails).
  if not is_int(train.seed) or not 0 <= train.seed < 2**32:
    fail("train.seed", "an integer in [0, 2**32)", train.seed)
  if train.schedule not in SCHEDULES:
    fail("train.schedule", f"one of {SCHEDULES}", train.schedule)
  profile = tuple(train.profile_steps)
  if profile and not (len(profile) == 2 and all(is_int(s) for s in profile)
                      and 0 <= profile[0] < profile[1] <= train.steps):
    fail("train.profile_steps", f"() or two steps (a, b) with 0 <= a < b <= train.steps={train.steps}",
         train.profile_steps)
  if train.compilation_cache_dir is not None and not isinstance(train.compilation_cache_dir, str):
    fail("train.compilation_cache_dir", "None, '' (off) or a directory", train.compilation_cache_dir)
  for key, forms in platform_choices.KEYS.items():
    if getattr(train, key) not in ("auto", *forms):
      fail(f"train.{key}", f"one of {('auto', *forms)}", getattr(train, key))
  if train.schedule == "rsqrt_warmup" and train.warmup_steps < 1:
    fail("train.warmup_steps", "at least 1 with schedule 'rsqrt_warmup'", train.warmup_steps)
  if train.schedule == "linear_cosine" and train.steps <= train.warmup_steps:
    fail("train.steps", f"more than train.warmup_steps={train.warmup_steps} with 'linear_cosine'",
         train.steps)
  if not is_number(train.learning_rate) or train.learning_rate <= 0:
    fail("train.learning_rate", "a positive finite number", train.learning_rate)
  if not is_number(train.end_learning_rate_fraction) or not 0 <= train.end_learning_rate_fraction <= 1:
    fail("train.end_learning_rate_fraction", "a number in [0, 1]", train.end_learning_rate_fraction)
  for key in ("adam_b1", "adam_b2"):
    if not is_number(getattr(train, key)) or not 0 <= getattr(train, key) < 1:
      fail(f"train.{key}", "a number in [0, 1)", getattr(train, key))
  if not is_number(train.adam_eps) or train.adam_eps <= 0:  # 0 gives 0/0 for a zero gradient
    fail("train.adam_eps", "a positive finite number", train.adam_eps)
  if train.weight_decay is not None and (not is_number(train.weight_decay)
                                         or train.weight_decay < 0):
    fail("train.weight_decay", "None (the optimizer's default) or a non-negative finite number "
         "(0 = off)", train.weight_decay)
  if not is_number(train.grad_clip_norm) or train.grad_clip_norm < 0:
    fail("train.grad_clip_norm", "a non-negative finite number (0 = off)", train.grad_clip_norm)
  validate_optimizer_keys(train)
  if not is_number(train.label_smoothing) or not 0 <= train.label_smoothing < 1:
    fail("train.label_smoothing", "a number in [0, 1)", train.label_smoothing)
  if train.nonfinite not in NONFINITE:
    fail("train.nonfinite", f"one of {NONFINITE}", train.nonfinite)
  if train.best_metric not in BEST_METRICS:
    fail("train.best_metric", f"one of {BEST_METRICS}", train.best_metric)
  if not is_int(train.patience) or train.patience < 0:
    fail("train.patience", "a non-negative integer (0 = no early stopping)", train.patience)
  if train.patience and train.best_metric == "none":
    fail("train.patience", "0 with train.best_metric='none' (early stopping watches the best "
         "metric)", train.patience)
  if train.init_from is not None and (not isinstance(train.init_from, str) or not train.init_from):
    fail("train.init_from", "None or the workdir of a trained run", train.init_from)
  if not isinstance(train.init_optimizer, bool):
    fail("train.init_optimizer", "True or False", train.init_optimizer)
  if train.init_optimizer and train.init_from is None:
    fail("train.init_optimizer", "False without train.init_from", train.init_optimizer)
  if train.init_checkpoint not in INIT_CHECKPOINTS:
    fail("train.init_checkpoint", f"one of {INIT_CHECKPOINTS}", train.init_checkpoint)
  validate_trackers(train)
  if train.keep_checkpoints < train.average_checkpoints:
    fail("train.keep_checkpoints", f"at least train.average_checkpoints={train.average_checkpoints}",
         train.keep_checkpoints)


def validate_trackers(train: TrainConfig) -> None:
  """train.trackers: names among TRACKERS, each once; the MLflow and W&B settings' types."""
  names = train.trackers
  if not isinstance(names, tuple) or any(n not in TRACKERS for n in names) or (
      len(set(names)) != len(names)):
    fail("train.trackers", f"a tuple of distinct names among {TRACKERS} (e.g. "
         "'tensorboard,mlflow')", names)
  for key in ("mlflow_tracking_uri", "tracker_experiment", "wandb_entity"):
    value = getattr(train, key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
      fail(f"train.{key}", "None or a non-empty string", value)
  if train.wandb_mode not in WANDB_MODES:
    fail("train.wandb_mode", f"one of {WANDB_MODES}", train.wandb_mode)


def validate_optimizer_keys(train: TrainConfig) -> None:
  """train.optimizer, the adafactor_* keys and the EMA's; raises ValueError naming the key."""
  if train.optimizer not in OPTIMIZERS:
    fail("train.optimizer", f"one of {OPTIMIZERS}", train.optimizer)
  if not is_number(train.adafactor_decay_rate) or not 0 < train.adafactor_decay_rate <= 1:
    fail("train.adafactor_decay_rate", "a number in (0, 1] (the second-moment decay is "
         "1 - step^-decay_rate)", train.adafactor_decay_rate)
  if (not is_number(train.adafactor_clipping_threshold)
      or (train.adafactor_clipping_threshold != 0 and train.adafactor_clipping_threshold < 1)):
    fail("train.adafactor_clipping_threshold", "0 (off) or a number >= 1 (the largest RMS of an "
         "update)", train.adafactor_clipping_threshold)
  for key in ("adafactor_factored", "adafactor_multiply_by_parameter_scale", "ema_warmup"):
    if not isinstance(getattr(train, key), bool):
      fail(f"train.{key}", "True or False", getattr(train, key))
  if not is_int(train.adafactor_min_dim_size_to_factor) or train.adafactor_min_dim_size_to_factor < 1:
    fail("train.adafactor_min_dim_size_to_factor", "a positive integer",
         train.adafactor_min_dim_size_to_factor)
  if not is_number(train.adafactor_epsilon) or train.adafactor_epsilon <= 0:
    fail("train.adafactor_epsilon", "a positive finite number", train.adafactor_epsilon)
  if not is_number(train.adafactor_momentum) or not 0 <= train.adafactor_momentum < 1:
    fail("train.adafactor_momentum", "a number in [0, 1) (0 = no momentum)",
         train.adafactor_momentum)
  # The step computes d in float32 (tfm/train/ema.py): a decay that rounds to 1 there (above
  # 1 - 2^-25) would leave the EMA at the initial parameters for good.
  if (not is_number(train.ema_decay) or not 0 <= train.ema_decay < 1
      or float(np.float32(train.ema_decay)) >= 1):
    fail("train.ema_decay", "a number in [0, 1) (0 = no EMA), at most 0.99999994 (float32's "
         "largest below 1)", train.ema_decay)


def decay_rate(train: TrainConfig) -> float:
  """The weight decay in force: train.weight_decay, or the optimizer's default where it is None."""
  if train.weight_decay is not None:
    return float(train.weight_decay)
  return _default_decay(train.optimizer)


def _default_decay(optimizer: str) -> float:
  return ADAMW_WEIGHT_DECAY if optimizer == "adamw" else 0.0


def validate_rules(rules, key: str = "mesh.rules") -> None:
  """Rules: a sequence of (logical_name, mesh_axis | tuple of mesh axes | None), each logical name
  one the model uses (a misspelt one would leave its axis replicated without a word)."""
  from tfm.model.partitioning import ACTIVATION_AXES, PARAM_AXES  # pylint: disable=import-outside-toplevel
  if not isinstance(rules, (tuple, list)):
    fail(key, "a tuple of (logical_name, mesh_axis or tuple or None) pairs", rules)
  for rule in rules:
    if not isinstance(rule, (tuple, list)) or len(rule) != 2 or not isinstance(rule[0], str):
      fail(key, "pairs (logical_name, mesh_axis or tuple or None)", rule)
    if rule[0] not in PARAM_AXES + ACTIVATION_AXES:
      fail(key, f"logical axis names among {PARAM_AXES + ACTIVATION_AXES}", rule[0])
    target = rule[1]
    axes = () if target is None else (target,) if isinstance(target, str) else target
    if not isinstance(axes, (tuple, list)) or any(a not in MESH_AXES for a in axes):
      fail(key, f"mesh axes among {MESH_AXES} in rule for {rule[0]!r}", target)


def validate_mesh_config(mesh: MeshConfig) -> None:
  """Checks the mesh axis sizes: positive, or -1 for at most one axis."""
  for key in MESH_AXES:
    if not is_int(getattr(mesh, key)) or (getattr(mesh, key) < 1 and getattr(mesh, key) != -1):
      fail(f"mesh.{key}", "a positive integer or -1 (all remaining devices)", getattr(mesh, key))
  fill = [k for k in MESH_AXES if getattr(mesh, k) == -1]
  if len(fill) > 1:
    fail(f"mesh.{fill[1]}", "at most one mesh axis set to -1", getattr(mesh, fill[1]))
