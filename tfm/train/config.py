"""The `train` and `mesh` config sections: defaults and validation.

`default_train_config()` holds the paper's optimisation settings (section 5.3, 5.4): Adam(0.9, 0.98,
1e-9), lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) with warmup_steps = 4000, label
smoothing 0.1, 100K steps. `default_mesh_config()` is pure data parallelism over every device.

The validators raise ValueError naming the offending key (`train.warmup_steps`, `mesh.rules`, ...), so a
bad value fails before anything is compiled.
"""

from __future__ import annotations

from typing import Any

import ml_collections

SCHEDULES = ("rsqrt_warmup", "linear_cosine", "constant", "rsqrt")
NONFINITE = ("skip", "stop")
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
)


def default_train_config() -> ml_collections.ConfigDict:
  """The paper's training hyperparameters (base model)."""
  return ml_collections.ConfigDict(dict(
      steps=100_000,
      warmup_steps=4000,
      schedule="rsqrt_warmup",
      learning_rate=1.0,  # scale factor for rsqrt_warmup; the peak learning rate for the others
      end_learning_rate_fraction=0.0,  # linear_cosine: final lr = fraction * peak
      adam_b1=0.9,
      adam_b2=0.98,
      adam_eps=1e-9,
      weight_decay=0.0,  # decoupled (AdamW-style), matrices only; 0 = off
      grad_clip_norm=0.0,  # global-norm clipping; 0 = off
      label_smoothing=0.1,
      microbatches=1,  # gradient accumulation: the batch is split in this many slices
      seed=0,
      nonfinite="skip",  # non-finite loss/gradients: 'skip' the update, or 'stop' training
      log_every=100,
      eval_every=5000,
      checkpoint_every=1500,
      keep_checkpoints=5,
      average_checkpoints=5,  # 5 for base, 20 for big (section 6.1)
  ))


def default_mesh_config() -> ml_collections.ConfigDict:
  """Pure data parallelism over all devices, with the default logical-axis rules."""
  return ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1, rules=DEFAULT_RULES))


def _fail(key: str, expected: str, got: Any):
  raise ValueError(f"config key {key}: expected {expected}, got {got!r}")


def _is_int(x) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool)


def _as_config(section) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(section) if isinstance(section, dict) else section


def _check_keys(section, defaults, prefix: str):
  keys = set(section.keys())
  missing = sorted(set(defaults.keys()) - keys)
  unknown = sorted(keys - set(defaults.keys()))
  if missing:
    raise ValueError(f"config section {prefix} lacks key(s) {[prefix + '.' + k for k in missing]}")
  if unknown:
    raise ValueError(f"unknown config key(s) {[prefix + '.' + k for k in unknown]}; "
                     f"known keys: {', '.join(sorted(defaults.keys()))}")


def validate_train_config(train) -> None:
  """Checks the `train` section (a ConfigDict or dict); raises ValueError naming the key."""
  train = _as_config(train)
  _check_keys(train, default_train_config(), "train")
  for key in ("steps", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
              "average_checkpoints", "microbatches"):
    if not _is_int(train[key]) or train[key] < 1:
      _fail(f"train.{key}", "a positive integer", train[key])
  for key in ("warmup_steps", "seed"):
    if not _is_int(train[key]) or train[key] < 0:
      _fail(f"train.{key}", "a non-negative integer", train[key])
  if train.schedule not in SCHEDULES:
    _fail("train.schedule", f"one of {SCHEDULES}", train.schedule)
  if train.schedule == "rsqrt_warmup" and train.warmup_steps < 1:
    _fail("train.warmup_steps", "at least 1 with schedule 'rsqrt_warmup'", train.warmup_steps)
  if train.schedule == "linear_cosine" and train.steps <= train.warmup_steps:
    _fail("train.steps", f"more than train.warmup_steps={train.warmup_steps} with 'linear_cosine'",
          train.steps)
  if not _is_number(train.learning_rate) or train.learning_rate <= 0:
    _fail("train.learning_rate", "a positive number", train.learning_rate)
  if not _is_number(train.end_learning_rate_fraction) or not 0 <= train.end_learning_rate_fraction <= 1:
    _fail("train.end_learning_rate_fraction", "a number in [0, 1]", train.end_learning_rate_fraction)
  for key in ("adam_b1", "adam_b2"):
    if not _is_number(train[key]) or not 0 <= train[key] < 1:
      _fail(f"train.{key}", "a number in [0, 1)", train[key])
  if not _is_number(train.adam_eps) or train.adam_eps < 0:
    _fail("train.adam_eps", "a non-negative number", train.adam_eps)
  for key in ("weight_decay", "grad_clip_norm"):
    if not _is_number(train[key]) or train[key] < 0:
      _fail(f"train.{key}", "a non-negative number (0 = off)", train[key])
  if not _is_number(train.label_smoothing) or not 0 <= train.label_smoothing < 1:
    _fail("train.label_smoothing", "a number in [0, 1)", train.label_smoothing)
  if train.nonfinite not in NONFINITE:
    _fail("train.nonfinite", f"one of {NONFINITE}", train.nonfinite)
  if train.keep_checkpoints < train.average_checkpoints:
    _fail("train.keep_checkpoints",
          f"at least train.average_checkpoints={train.average_checkpoints}", train.keep_checkpoints)


def validate_rules(rules, key: str = "mesh.rules") -> None:
  """Rules: a sequence of (logical_name, mesh_axis | tuple of mesh axes | None)."""
  if not isinstance(rules, (tuple, list)):
    _fail(key, "a tuple of (logical_name, mesh_axis or tuple or None) pairs", rules)
  for rule in rules:
    if not isinstance(rule, (tuple, list)) or len(rule) != 2 or not isinstance(rule[0], str):
      _fail(key, "pairs (logical_name, mesh_axis or tuple or None)", rule)
    target = rule[1]
    axes = () if target is None else (target,) if isinstance(target, str) else target
    if not isinstance(axes, (tuple, list)) or any(a not in MESH_AXES for a in axes):
      _fail(key, f"mesh axes among {MESH_AXES} in rule for {rule[0]!r}", target)


def validate_mesh_config(mesh) -> None:
  """Checks the `mesh` section (a ConfigDict or dict); `rules` None means DEFAULT_RULES."""
  mesh = _as_config(mesh)
  _check_keys(mesh, default_mesh_config(), "mesh")
  for key in MESH_AXES:
    if not _is_int(mesh[key]) or (mesh[key] < 1 and mesh[key] != -1):
      _fail(f"mesh.{key}", "a positive integer or -1 (all remaining devices)", mesh[key])
  fill = [k for k in MESH_AXES if mesh[k] == -1]
  if len(fill) > 1:
    _fail(f"mesh.{fill[1]}", "at most one mesh axis set to -1", mesh[fill[1]])
  if mesh.rules is not None:
    validate_rules(mesh.rules)
