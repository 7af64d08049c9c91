"""The training loop: config -> data -> model -> sharded state -> jitted step -> metrics, checkpoints.

  config.data  -> tokenizer, per-host packed batches (prefetched onto the mesh)
  config.model -> Transformer;  config.train -> optimizer, schedule, loss;  config.mesh -> Mesh
  state: restored from the workdir's latest readable checkpoint (with the data iterator's position),
         else initialized directly in its shards
  loop:  step (one jit, state donated) ... every train.log_every steps the only host sync: metrics
         fetched, non-finite updates checked, a console line and TensorBoard scalars;
         every train.eval_every dev loss / perplexity (and dev BLEU every eval.bleu_every);
         every train.checkpoint_every and at the end an async Orbax checkpoint.
SIGTERM (preemption) finishes the current step, saves it and returns (several hosts: at the step
JAX's preemption service agrees on).
"""

from __future__ import annotations

import signal
import sys
import time

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from tfm import config as config_lib
from tfm.data import batching, pipeline, prefetch, sources, tokenizer as tokenizer_lib
from tfm.eval.dev_bleu import DevBleu
from tfm.model.transformer import Transformer
from tfm.train import checkpoint as ckpt_lib
from tfm.train import distributed
from tfm.train.evaluate import DevEvaluator
from tfm.train.mesh import create_mesh
from tfm.train.metrics_writer import MetricsWriter
from tfm.train.optimizer import make_optimizer
from tfm.train.sharding import (batch_row_multiple, batch_sharding, check_batch_size, logical_rules,
                                rules_for_model)
from tfm.train.state import abstract_train_state, init_train_state, parameter_count
from tfm.train.step import check_nonfinite, make_eval_step, make_train_step


class Preemption:
  """SIGTERM -> stop after the current step; stop(step) is read once per step, no host sync.

  One process: a Python signal handler sets a flag, and the loop stops after the step in which
  the signal came. Under jax.distributed, JAX's preemption service owns SIGTERM; hosts get the
  notice at different steps, and one host leaving the loop alone would hang the others in a
  collective, so every host stops at the step the service agrees on
  (`multihost_utils.reached_preemption_sync_point`, which must be called at every step).
  """

  def __init__(self):
    self.requested = False
    self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    self.requested = True

  def stop(self, step: int) -> bool:
    if jax.distributed.is_initialized():
      return multihost_utils.reached_preemption_sync_point(step)
    return self.requested

  def restore(self):
    signal.signal(signal.SIGTERM, self._previous)


def prepare_data(config: ml_collections.ConfigDict, workdir: str):
  """Builds the dataset and the vocabulary on the lead host, then loads the vocabulary everywhere."""
  if distributed.is_lead_host():
    sources.prepare(config.data)
    tokenizer_lib.get_tokenizer(config.data, workdir)
  distributed.barrier("tfm-data-ready")
  tokenizer = tokenizer_lib.get_tokenizer(config.data, workdir)
  if tokenizer.vocab_size != config.model.vocab_size:
    raise ValueError(f"the vocabulary has {tokenizer.vocab_size} tokens but model.vocab_size is "
                     f"{config.model.vocab_size}; set model.vocab_size and data.vocab_size to "
                     f"{tokenizer.vocab_size} (a small corpus can give fewer than asked)")
  return tokenizer


def _window_summary(window: list[dict], seconds: float) -> dict[str, float]:
  """Per-window figures from the fetched per-step metrics."""
  tokens = sum(float(m["tokens"]) for m in window)
  mean = lambda k: float(np.mean([float(m[k]) for m in window]))
  return dict(loss=mean("loss"), nll=mean("nll"), perplexity=float(np.exp(mean("nll"))),
              accuracy=mean("accuracy"), grad_norm=mean("grad_norm"),
              learning_rate=float(window[-1]["learning_rate"]),
              target_tokens_per_s=tokens / seconds, step_s=seconds / len(window),
              nonfinite_count=int(window[-1]["nonfinite_count"]))


def train(config: ml_collections.ConfigDict, workdir: str, stream=sys.stdout):
  """Trains (or resumes) the model of `config` in `workdir`; returns the final TrainState."""
  model_cfg = config_lib.validate(config)
  preemption = Preemption()  # from the start: a SIGTERM during set-up still ends with a checkpoint
  try:
    return _train(config, model_cfg, workdir, stream, preemption)
  finally:
    preemption.restore()


def _train(config, model_cfg, workdir, stream, preemption):
  distributed.initialize_from_env()
  writer = MetricsWriter(workdir, stream)
  tokenizer = prepare_data(config, workdir)
  tc = config.train

  mesh = create_mesh(config.mesh)
  rules = rules_for_model(logical_rules(config.mesh), mesh, model_cfg)
  model = Transformer(model_cfg)
  tx, schedule = make_optimizer(tc, model_cfg.d_model)
  abstract, shardings = abstract_train_state(model, tx, mesh, rules, seed=tc.seed)
  writer.text(f"tfm: {parameter_count(abstract.params):,} parameters; mesh {dict(mesh.shape)}; "
              f"{jax.process_count()} host(s), {jax.device_count()} device(s)")

  # Packed (and dev) batches have a fixed row count, checked here; bucketed ones are sized to fit.
  check_batch_size(batching.host_rows(config.data, 1), mesh, rules, tc.microbatches)
  iterator = pipeline.train_iterator(config.data, tokenizer, process_index=jax.process_index(),
                                     process_count=jax.process_count(),
                                     row_multiple=batch_row_multiple(mesh, rules, tc.microbatches))
  checkpointer = ckpt_lib.Checkpointer(workdir, keep=tc.keep_checkpoints)
  ckpt_lib.write_config(workdir, config)
  restored = checkpointer.restore(abstract)
  if restored is None:
    state, _ = init_train_state(model, tx, mesh, rules, seed=tc.seed)
    start = 0
  else:
    state, data_state, start = restored
    iterator.set_state(data_state)
    writer.text(f"tfm: resumed from step {start} in {workdir}")
  batches = prefetch.prefetch_to_device(iterator, batch_sharding(mesh, rules))
  train_step = make_train_step(model, tx, schedule, tc, mesh, rules, shardings)
  eval_step = make_eval_step(model, tc.label_smoothing, mesh, rules, shardings.params)
  evaluate_dev = DevEvaluator(config, tokenizer, eval_step, mesh, rules)

  bleu_every = config.eval.get("bleu_every", 0)
  evaluate_bleu = DevBleu(config, tokenizer, model) if bleu_every else None

  window, window_start, step = [], time.perf_counter(), start
  try:
    while step < tc.steps:
      state, metrics = train_step(state, next(batches))
      step += 1
      window.append(metrics)
      done = step == tc.steps
      stop = preemption.stop(step)
      if step % tc.log_every == 0 or done or stop or step % tc.checkpoint_every == 0:
        window = jax.device_get(window)  # the one host sync: this window's metrics
        for offset, m in enumerate(window):
          check_nonfinite(m, step - len(window) + offset + 1, tc.nonfinite)
        writer.write(step, _window_summary(window, time.perf_counter() - window_start))
        window, window_start = [], time.perf_counter()
      # A preempted run saves at once: evaluation could outlast the grace period after SIGTERM.
      if step % tc.eval_every == 0 or done:
        writer.write(step, evaluate_dev(state.params), prefix="dev")
        window_start = time.perf_counter()
      if evaluate_bleu and (step % bleu_every == 0 or done):
        writer.write(step, evaluate_bleu(state.params), prefix="dev")
        window_start = time.perf_counter()
      if step % tc.checkpoint_every == 0 or done or stop:
        checkpointer.save(step, state, batches.get_state())
      if stop:
        writer.text(f"tfm: SIGTERM: saved step {step}, exiting")
        break
  finally:
    checkpointer.wait()
    checkpointer.close()
    batches.close()
    writer.close()
  return state
