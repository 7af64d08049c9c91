import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests.model.helpers import draw, tiny
from tfm.model.transformer import Transformer
from tfm.model.embedding import Embed


def test_one_shared_matrix_when_tied():
  # One layer a stack: the embedding is outside the stacks, and the gradient's paths to it (the
  # source through the encoder, the targets, the softmax) are there with one layer.
  cfg = tiny(num_encoder_layers=1, num_decoder_layers=1)
  inputs, targets = jnp.array([[5, 6, 1]]), jnp.array([[7, 1]])
  model, v = draw(cfg, inputs, targets)  # the shapes of model.init's tree
  params = nn.meta.unbox(v["params"])
  embeddings = [path for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]
                if "embed" in jax.tree_util.keystr(path) or "logits" in jax.tree_util.keystr(path)]
  assert len(embeddings) == 1  # token_embedding only: no second table, no output projection
  # Gradient reaches the shared matrix from the source side, the target side and the softmax:
  # a token that appears only in the source still gets a gradient, and so does one only predicted.
  def loss(p):
    logits = model.apply({"params": p}, inputs, targets)
    return -jax.nn.log_softmax(logits)[0, 0, 7]
  grad = nn.meta.unbox(jax.jit(jax.grad(loss))(v["params"]))["token_embedding"]["embedding"]
  assert np.abs(grad[5]).sum() > 0  # source-only token
  assert np.abs(grad[7]).sum() > 0  # predicted token (softmax row)
  assert np.abs(grad[30]).sum() > 0  # any other token: through the softmax normalizer


def test_untied_has_three_matrices():
  cfg = tiny(tie_embeddings=False)
  v = jax.eval_shape(Transformer(cfg).init, jax.random.PRNGKey(0), jnp.array([[5, 1]]),
                     jnp.array([[6, 1]]))  # model.init's tree, traced
  params = nn.meta.unbox(v["params"])
  assert {"source_embedding", "target_embedding"} <= set(params)
  assert params["decoder"]["logits"]["kernel"].shape == (cfg.d_model, cfg.vocab_size)


def test_embedding_is_scaled_by_sqrt_d_model_and_logits_are_not():
  d = 16
  embed = Embed(10, d)
  v = embed.init(jax.random.PRNGKey(0), jnp.array([[1]]))
  table = np.asarray(nn.meta.unbox(v["params"])["embedding"])
  out = np.asarray(embed.apply(v, jnp.array([[3, 4]])))
  np.testing.assert_allclose(out[0], table[[3, 4]] * np.sqrt(d), rtol=1e-6)
  x = np.random.RandomState(0).randn(1, 2, d).astype(np.float32)
  logits = np.asarray(embed.apply(v, jnp.asarray(x), method=Embed.attend))
  np.testing.assert_allclose(logits, x @ table.T, rtol=1e-5, atol=1e-5)
