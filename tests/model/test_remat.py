"""model.remat: each policy wraps every layer (inside the scan too) and leaves the gradients as they
are without rematerialisation, dropout included (the recomputed masks must be the forward's)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import jaxprs_in_params

from tests.model.helpers import draw, random_tokens, tiny
from tfm.model import remat as remat_lib
from tfm.model.scan_convert import stack_layers
from tfm.model.transformer import Transformer

# Relative positions: the stack-level bias reaches every layer and gets its gradient through them.
BASE = dict(positions="relative", dropout_rate=0.2)
TOKENS = random_tokens(jax.random.PRNGKey(3), (2, 6), 40).at[1, 4:].set(0)


def _eqns(jaxpr, in_scan=False):
  """(equation, whether it sits inside a scan body) for every equation, nested ones included."""
  for eqn in jaxpr.eqns:
    yield eqn, in_scan
    for sub in jaxprs_in_params(eqn.params):
      yield from _eqns(sub, in_scan or eqn.primitive.name == "scan")


@functools.lru_cache(maxsize=None)
def _unrolled_params(layers: int = 2):
  return draw(tiny(**BASE, num_encoder_layers=layers, num_decoder_layers=layers), TOKENS,
              TOKENS)[1]["params"]


def _params(scan: bool, layers: int = 2):
  return stack_layers(_unrolled_params(layers)) if scan else _unrolled_params(layers)


def _loss(model):
  def loss(params):
    logits = model.apply({"params": params}, TOKENS, TOKENS, train=True,
                         rngs={"dropout": jax.random.PRNGKey(7)})
    return jnp.mean(jax.nn.log_softmax(logits)[..., 5] * (TOKENS != 0))
  return loss


# Layers a stack in the gradient checks: unrolled, one (a stack's layers are one module repeated,
# and test_every_layer_is_rematerialised_with_its_policy counts the wrapping of each of two; the
# unrolled program's compile time grows with its layers); scanned, two (the scan body is compiled
# once, and its recomputed dropout masks are checked at more than one iteration).
LAYERS = {False: 1, True: 2}


@functools.lru_cache(maxsize=None)
def _reference(scan: bool):
  """Loss and gradients without rematerialisation (the same layout, so the same dropout masks)."""
  cfg = tiny(**BASE, scan_layers=scan, num_encoder_layers=LAYERS[scan],
             num_decoder_layers=LAYERS[scan])
  return jax.jit(jax.value_and_grad(_loss(Transformer(cfg))))(_params(scan, LAYERS[scan]))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["full", pytest.param("dots", marks=pytest.mark.long),
                                    pytest.param("offload", marks=pytest.mark.long)])
def test_remat_policy_keeps_loss_and_gradients(policy):
  for scan in (False, True):
    model = Transformer(tiny(**BASE, remat=policy, scan_layers=scan,
                             num_encoder_layers=LAYERS[scan], num_decoder_layers=LAYERS[scan]))
    loss, grads = jax.jit(jax.value_and_grad(_loss(model)))(_params(scan, LAYERS[scan]))
    want_loss, want_grads = _reference(scan)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    for (path, g), want in zip(jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(want_grads)):
      np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7, err_msg=f"scan={scan} "
                                 f"{jax.tree_util.keystr(path)}")


@pytest.mark.parametrize("scan", [False, True])
def test_every_layer_is_rematerialised_with_its_policy(scan):
  cfg = tiny(**BASE, scan_layers=scan)
  layers = cfg.num_encoder_layers + cfg.num_decoder_layers
  expected = {"none": None, "full": jax.checkpoint_policies.nothing_saveable,
              "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}
  for policy, function in expected.items():
    model = Transformer(tiny(**BASE, remat=policy, scan_layers=scan))
    forward = jax.make_jaxpr(lambda p, m=model: m.apply({"params": p}, TOKENS, TOKENS))(_params(scan))
    remats = [(eqn, in_scan) for eqn, in_scan in _eqns(forward.jaxpr) if eqn.primitive.name == "remat2"]
    if function is None:
      assert not remats
      continue
    # Unrolled: one per layer. Scanned: one per stack, in the scan body, so once per layer as it runs.
    assert len(remats) == (2 if scan else layers), (policy, len(remats))
    assert all(in_scan == scan for _, in_scan in remats)
    assert all(eqn.params["policy"] is function for eqn, _ in remats)


def test_offload_moves_saved_matmuls_to_host_memory():
  for scan in (False, True):
    model = Transformer(tiny(**BASE, remat="offload", scan_layers=scan))
    grad = jax.make_jaxpr(jax.grad(_loss(model)))(_params(scan))
    moves = [eqn for eqn, _ in _eqns(grad.jaxpr) if eqn.primitive.name == "device_put"]
    to_host = [e for e in moves if any("Host" in str(d) for d in e.params["devices"])]
    to_device = [e for e in moves if any("Device" in str(d) for d in e.params["devices"])]
    assert to_host and len(to_host) == len(to_device), (scan, len(to_host), len(to_device))


def test_offload_without_host_memory_fails_naming_the_key(monkeypatch):
  monkeypatch.setattr(remat_lib, "memory_kinds", lambda: {"device"})
  model = Transformer(tiny(remat="offload"))
  with pytest.raises(ValueError, match=r"config key model\.remat: .*'offload'"):
    jax.eval_shape(model.init, jax.random.PRNGKey(0), TOKENS, TOKENS)
