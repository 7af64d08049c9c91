"""train.optimizer (tfm/train/optimizer.py): Adafactor's updates against a numpy computation of its
rule with tfm's wiring (the schedule, global-norm clipping, the decay mask, the learning rate last),
per layer in a scanned stack; adamw against adam."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.train.helpers import train_cfg
from tfm.model.scan_convert import stack_layers
from tfm.train.optimizer import make_optimizer

D_MODEL = 16  # rsqrt_warmup: lr = 16^-0.5 * min(step^-0.5, step * warmup^-1.5)


def _params(rng):
  """A matrix [6, 8] (factored with min_dim_size_to_factor 6), a vector [8], a small matrix [3, 8]
  (not factored: 3 < 6), and a scanned stack of two [6, 8] layers."""
  return {"w": rng.normal(size=(6, 8)), "b": rng.normal(size=8), "s": rng.normal(size=(3, 8)),
          "stack": {"layers": {"k": rng.normal(size=(2, 6, 8))}}}


def _rms(x):
  return np.sqrt(np.mean(np.square(x)))


def _numpy_adafactor(params, grads_per_step, *, warmup, clip_norm, weight_decay, threshold,
                     min_dim, decay_rate=0.8, eps=1e-30):
  """The expected updates of each step, in float64: global-norm clipping of the raw gradients;
  per matrix (each layer of the stack alone) v_t = b_t v + (1 - b_t) (g^2 + eps), b_t = 1 -
  t^-decay_rate, factored as row and column means R, C where both dimensions >= min_dim
  (V = R C^T / mean(R)); u = g / sqrt(V); u / max(1, RMS(u) / threshold); u * max(RMS(p), 1e-3);
  + weight_decay * p on matrices; times -lr(t), lr(t) = 16^-0.5 min(t^-0.5, t warmup^-1.5)."""
  flat = {"w": params["w"], "b": params["b"], "s": params["s"],
          **{f"k{i}": params["stack"]["layers"]["k"][i] for i in range(2)}}
  state = {name: None for name in flat}
  out = []
  for t, grads in enumerate(grads_per_step, start=1):
    g_flat = {"w": grads["w"], "b": grads["b"], "s": grads["s"],
              **{f"k{i}": grads["stack"]["layers"]["k"][i] for i in range(2)}}
    norm = np.sqrt(sum(np.sum(np.square(g)) for g in g_flat.values()))
    scale = min(1.0, clip_norm / norm) if clip_norm else 1.0
    beta = 1.0 - t ** -decay_rate
    lr = D_MODEL ** -0.5 * min(t ** -0.5, t * warmup ** -1.5)
    updates = {}
    for name, g in g_flat.items():
      g = g * scale
      p = flat[name]
      sq = np.square(g) + eps
      if g.ndim == 2 and min(g.shape) >= min_dim:
        r_old, c_old = state[name] or (np.zeros(g.shape[0]), np.zeros(g.shape[1]))
        r = beta * r_old + (1 - beta) * sq.mean(axis=1)
        c = beta * c_old + (1 - beta) * sq.mean(axis=0)
        state[name] = (r, c)
        v = np.outer(r, c) / r.mean()
      else:
        v = beta * (state[name] if state[name] is not None else 0.0) + (1 - beta) * sq
        state[name] = v
      u = g / np.sqrt(v)
      u = u / max(1.0, _rms(u) / threshold)
      u = u * max(_rms(p), 1e-3)
      if p.ndim >= 2:
        u = u + weight_decay * p
      updates[name] = -lr * u
    out.append(updates)
    flat = {name: flat[name] + updates[name] for name in flat}
  return out


def _as_flat(updates):
  return {"w": updates["w"], "b": updates["b"], "s": updates["s"],
          **{f"k{i}": updates["stack"]["layers"]["k"][i] for i in range(2)}}


@pytest.mark.parametrize("clip_norm, weight_decay, threshold", [(0.0, 0.0, 1.0), (0.5, 0.1, 1.5)])
def test_adafactor_against_numpy(clip_norm, weight_decay, threshold):
  """Three updates of a tree holding factored and unfactored matrices, a vector and a scanned
  stack, under the paper's schedule (warmup 2: a rate that rises, then falls), with and without
  global-norm clipping (0.5: it clips), weight decay on matrices and Adafactor's block clipping
  at another threshold: tfm's updates equal the numpy rule's to float32 rounding; the stack's
  layers are updated each as its own matrix (a stack-wide RMS would differ)."""
  rng = np.random.default_rng(0)
  params64 = _params(rng)
  grads = [jax.tree.map(lambda p: rng.normal(size=p.shape) * 3.0, params64) for _ in range(3)]
  train = train_cfg(optimizer="adafactor", warmup_steps=2, grad_clip_norm=clip_norm,
                    weight_decay=weight_decay, adafactor_clipping_threshold=threshold,
                    adafactor_min_dim_size_to_factor=6)
  tx, _ = make_optimizer(train, D_MODEL)
  params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params64)
  state = tx.init(params)
  expected = _numpy_adafactor(params64, grads, warmup=2, clip_norm=clip_norm,
                              weight_decay=weight_decay, threshold=threshold, min_dim=6)
  update = jax.jit(tx.update)
  for t in range(3):
    g = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), grads[t])
    updates, state = update(g, state, params)
    got = _as_flat(jax.device_get(updates))
    for name, want in expected[t].items():
      np.testing.assert_allclose(got[name], want, rtol=2e-5, atol=1e-9, err_msg=f"{name} {t}")
    params = jax.tree.map(lambda p, u: p + u, params, updates)


def test_adafactor_keeps_each_layers_state_as_the_unrolled_stack():
  """A scanned stack's Adafactor state, stacked from the unrolled layers' (tfm convert's
  stack_layers), is the scanned one's, and so are the updates; momentum included."""
  rng = np.random.default_rng(1)
  layers = [{"k": rng.normal(size=(6, 8)).astype(np.float32),
             "b": rng.normal(size=8).astype(np.float32)} for _ in range(2)]
  unrolled = {"layer_0": layers[0], "layer_1": layers[1]}
  scanned = stack_layers(unrolled)
  grads = [{f"layer_{i}": jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32),
                                       layers[i]) for i in range(2)} for _ in range(2)]
  tx, _ = make_optimizer(train_cfg(optimizer="adafactor", adafactor_min_dim_size_to_factor=6,
                                   adafactor_momentum=0.9), D_MODEL)
  a, b = tx.init(unrolled), tx.init(scanned)
  update = jax.jit(tx.update)
  for g in grads:
    ua, a = update(g, a, unrolled)
    ub, b = update(stack_layers(g), b, scanned)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), stack_layers(ua), ub)
  assert jax.tree.structure(stack_layers(a)) == jax.tree.structure(b)
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), stack_layers(a), b)


def test_adamw_is_adam_with_a_default_decay():
  """adamw = adam with decoupled weight decay 0.01 unless train.weight_decay says; adam with
  weight_decay 0.01 is the same rule, and the decay reaches matrices only."""
  params = {"w": jnp.ones((2, 3)), "b": jnp.ones(3)}
  grads = {"w": jnp.full((2, 3), 0.5), "b": jnp.full(3, -0.5)}
  rate = dict(schedule="constant", learning_rate=0.1, warmup_steps=0)
  result = {}
  for name, train in {"adamw": train_cfg(optimizer="adamw", **rate),
                      "adam_decayed": train_cfg(weight_decay=0.01, **rate),
                      "adam": train_cfg(**rate),
                      "adamw_0": train_cfg(optimizer="adamw", weight_decay=0.0, **rate)}.items():
    tx, _ = make_optimizer(train, D_MODEL)
    result[name] = jax.jit(tx.update)(grads, tx.init(params), params)[0]
  # Adam's first direction is sign(g): -lr * (sign(g) + decay * p).
  np.testing.assert_allclose(result["adamw"]["w"], -0.1 * (1 + 0.01), rtol=1e-6)
  np.testing.assert_allclose(result["adamw"]["b"], 0.1, rtol=1e-6)
  np.testing.assert_allclose(result["adam"]["w"], -0.1, rtol=1e-6)
  jax.tree.map(np.testing.assert_array_equal, result["adamw"], result["adam_decayed"])
  jax.tree.map(np.testing.assert_array_equal, result["adam"], result["adamw_0"])


def test_a_resume_with_another_optimizer_names_the_key(tiny_setup, tmp_path):
  """A checkpoint of an Adam run resumed by a run with train.optimizer='adafactor' (or Adafactor's
  momentum turned on or off): one line naming the key, not 'another model config?' nor a
  damaged checkpoint, and the checkpoints kept; adam and adamw hold the same state."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  from tests.train import helpers  # pylint: disable=import-outside-toplevel
  from tfm.experiment import Experiment  # pylint: disable=import-outside-toplevel
  from tfm.train import checkpoint as ckpt_lib  # pylint: disable=import-outside-toplevel
  from tfm.train.checkpoint import compat as checkpoint_compat  # pylint: disable=import-outside-toplevel

  def abstract(**train):
    config = helpers.experiment_config(
        tiny_setup.model.cfg, dataclasses.replace(tiny_setup.experiment.config.train, **train),
        helpers.mesh_cfg())
    return Experiment(config, model=tiny_setup.model, devices=jax.devices()[:1]).abstract_state

  checkpointer = ckpt_lib.Checkpointer(tmp_path, keep=2)
  checkpointer.save(1, tiny_setup.initial)
  checkpointer.save(2, tiny_setup.initial)
  checkpointer.wait()
  # The config's cause alone, at once: not "no checkpoint can be restored (steps [2, 1]); the
  # latest fails with: ValueError: ...", which reads as damage, after trying the older one.
  with pytest.raises(ckpt_lib.ResumeRefused, match=r"^config key train\.optimizer: the checkpoint "
                     r"holds the optimizer state of 'adam' .* this run's optimizer is 'adafactor': "
                     r"a run resumes with the optimizer it was trained with; to change it, start a "
                     r"new run from this one \(train.init_from, a fresh optimizer\)$"):
    checkpointer.restore(abstract(optimizer="adafactor"))
  assert checkpointer.all_steps() == [1, 2]
  _, _, step = checkpointer.restore(abstract(optimizer="adamw"))
  checkpointer.close()
  assert step == 2
  names = lambda state: ckpt_lib._shapes(state)  # pylint: disable=protected-access
  plain, momentum = (names(abstract(optimizer="adafactor", adafactor_momentum=b)) for b in (0, 0.9))
  assert checkpoint_compat.optimizer_difference(plain, plain) is None
  assert checkpoint_compat.optimizer_difference(momentum, plain).startswith(
      "config key train.adafactor_momentum: the checkpoint holds Adafactor's state with momentum")
  assert checkpoint_compat.optimizer_difference(names(tiny_setup.experiment.abstract_state),
                                       {"params/w": (2,)}) is None  # parameters alone: no verdict
  chain = {"opt_state/0/mu/w": (2,), "opt_state/1/count": ()}  # optax.chain's: older tfm's
  assert checkpoint_compat.optimizer_difference(
      chain, names(abstract(optimizer="adafactor"))) is None
