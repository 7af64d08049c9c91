"""Decoders over a cache that grows with the output (see tfm.decode.common)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tfm.decode.beam import beam_search, beam_search_result
from tfm.decode.common import cache_lengths, check_cache_lengths
from tfm.decode.sampling import greedy, sample
from tfm.eval.config import EvalConfig

VOCAB = 16


def length_echo(ids, cache):
  """A toy step whose only possible next token is 2 + (the cache's length): the output shows which
  phase ran each step. cache {'buf': [rows, length]}."""
  length = cache["buf"].shape[1]
  only = jax.nn.one_hot(jnp.full(ids.shape[:1], 2 + length), VOCAB) > 0
  return jnp.where(only, 0.0, -jnp.inf), cache


def grow(cache, length):
  return {"buf": jnp.pad(cache["buf"], ((0, 0), (0, length - cache["buf"].shape[1])))}


# Steps 0-2 run with a cache of 3 positions, 3-5 with 6, 6-7 with 8.
WANT = [5, 5, 5, 8, 8, 8, 10, 10]


@pytest.mark.parametrize("decoder", ["greedy", "sample", "beam"])
def test_each_step_runs_in_the_phase_whose_cache_holds_it(decoder):
  cache = {"buf": jnp.zeros((2, 3))}
  growth = dict(max_decode_len=8, cache_lengths=(3, 6, 8), grow_cache=grow)
  if decoder == "greedy":
    tokens = greedy(length_echo, cache, **growth).sequences
  elif decoder == "sample":
    tokens = sample(length_echo, cache, jax.random.PRNGKey(0), temperature=0.01, **growth).sequences
  else:
    tokens = beam_search(length_echo, cache, beam_size=2, **growth)[0][:, 0]
  np.testing.assert_array_equal(tokens, [WANT, WANT])


def eos_at_once(ids, cache):
  """A toy step that can only end the output (EOS = 1)."""
  return jnp.where(jnp.arange(VOCAB) == 1, 0.0, -jnp.inf)[None].repeat(ids.shape[0], 0), cache


@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_rows_done_in_the_first_phase_run_no_later_step(decoder):
  cache = {"buf": jnp.zeros((2, 3))}
  growth = dict(max_decode_len=8, cache_lengths=(3, 6, 8), grow_cache=grow)
  if decoder == "greedy":
    r = greedy(eos_at_once, cache, **growth)
    tokens, lengths = r.sequences, r.lengths
  else:
    r = beam_search_result(eos_at_once, cache, beam_size=2, **growth)
    tokens, lengths = r.sequences[:, 0], r.lengths[:, 0]
  assert int(r.num_steps) == 1
  np.testing.assert_array_equal(tokens, [[1] + [0] * 7] * 2)
  np.testing.assert_array_equal(lengths, [1, 1])


def test_one_phase_is_the_cache_as_given():
  tokens = greedy(length_echo, {"buf": jnp.zeros((1, 8))}, max_decode_len=8).sequences
  np.testing.assert_array_equal(tokens, [[10] * 8])


def test_cache_lengths_cut_the_output_length_into_equal_phases():
  assert cache_lengths(82, 3) == (28, 55, 82)  # ceil(82 i / 3)
  assert cache_lengths(82, 1) == (82,)
  assert cache_lengths(8, 3) == (3, 6, 8)
  assert cache_lengths(2, 4) == (1, 2)  # no empty phase
  with pytest.raises(ValueError, match="phases must be >= 1, got 0"):
    cache_lengths(8, 0)


@pytest.mark.parametrize("lengths, grow_fn, message", [
    ((3, 6), grow, "must increase from >= 1 to max_decode_len=8, got \\(3, 6\\)"),
    ((6, 3, 8), grow, "got \\(6, 3, 8\\)"),
    ((0, 8), grow, "got \\(0, 8\\)"),
    ((3, 8), None, "needs grow_cache"),
])
def test_bad_cache_lengths_are_refused(lengths, grow_fn, message):
  with pytest.raises(ValueError, match=message):
    check_cache_lengths(lengths, grow_fn, 8)
  assert check_cache_lengths((), None, 8) == (8,)


@pytest.mark.parametrize("value", [0, 2.5, "3"])
def test_eval_cache_phases_must_be_a_positive_integer(value):
  with pytest.raises(ValueError, match=r"config key eval\.cache_phases: expected a positive integer"):
    EvalConfig(cache_phases=value)
