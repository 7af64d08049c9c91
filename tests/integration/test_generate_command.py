"""`tfm generate` end to end on a tiny decoder-only workdir: the text it prints against an argmax
continuation computed here by full forward passes, stream against batch, and its refusals."""

import dataclasses
import io
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from etils import epath

from tests.data import tfm_data_testlib as testlib
from tfm import cli, tasks
from tfm.data import vocabulary
from tfm.experiment import Experiment
from tfm.train import checkpoint as ckpt_lib

LM = ["task=lm", "model.architecture=decoder_only", "model.num_encoder_layers=0", "data.text_key=en",
      "model.positions=learned", "model.max_length=40", "eval.max_extra_length=8"]
PROMPTS = ["gen one and two", "", "in the beginning god"]
NEW = 7


@pytest.fixture(scope="module")
def lm_workdir(experiment_module, tmp_path_factory):
  """A workdir as `tfm train` leaves one (config.json, its vocabulary, a checkpoint at train.steps)
  for a task lm model (decoder-only) with learned positions, its parameters the initial ones: what
  is tested is the command's decoding of whatever parameters it restores, not training (a trained
  run: test_generate_continues_a_trained_lm_run, long tier)."""
  workdir = tmp_path_factory.mktemp("lm")
  config = experiment_module(*LM, "train.average_checkpoints=1")
  config = config.replace(data=dataclasses.replace(config.data, vocab_dir=str(workdir)))
  ckpt_lib.write_config(workdir, config.to_dict())
  texts = [clean for _, clean in testlib.corpus()["web"].values()]  # the English side, text_key en
  vocabulary.train_vocab(texts, config.data.vocab_size, vocabulary.trained_vocab_path(
      config.data, epath.Path(workdir), tasks.get(config.task)))
  exp = Experiment(config)
  checkpointer = ckpt_lib.Checkpointer(workdir, keep=1, async_save=False)
  checkpointer.save(config.train.steps, exp.init_state())
  checkpointer.wait()
  return str(workdir), config


def generate(capsys, workdir, *flags):
  code = cli.main(["tfm", "generate", f"--workdir={workdir}", *flags])
  out = capsys.readouterr()
  return code, out.out, out.err


def argmax_text(t, full, prompt):
  """The prompt and its greedy continuation, computed from full forward passes full(params, x) of
  the model over x = [0] + prompt + the tokens so far (no cache), decoded as one text."""
  ids = t.tokenizer.encode(prompt)[:-1]
  new = []
  while len(new) < NEW:
    row = np.zeros((1, t.config.model.max_length), np.int32)
    sequence = ids + new
    row[0, :len(sequence)], row[0, len(sequence)] = sequence, 3  # 3: a real token after them
    logits = np.asarray(full(t.params, jnp.asarray(row)))[0, len(sequence)].astype(np.float64)
    logits[0] = -np.inf  # padding is never generated
    new.append(int(np.argmax(logits)))
    if new[-1] == t.tokenizer.eos_id:
      break
  head = t.tokenizer.decode(ids)
  whole = t.tokenizer.decode(ids + new)
  assert whole.startswith(head)
  return prompt + whole[len(head):]


def test_generate_prints_the_argmax_continuation_and_streams_what_it_batches(lm_workdir, capsys):
  from tfm.eval.restore import load_trained  # pylint: disable=import-outside-toplevel
  workdir, _ = lm_workdir
  prompt_flags = [f"--prompt={p}" for p in PROMPTS]
  code, greedy, err = generate(capsys, workdir, *prompt_flags, "--greedy",
                               f"--max_new_tokens={NEW}")
  assert code == 0, err
  t = load_trained(workdir)
  full = jax.jit(lambda p, x: t.model.apply({"params": p}, None, x))
  assert greedy.split("\n")[:-1] == [argmax_text(t, full, p) for p in PROMPTS]
  assert f"tfm generate: {len(PROMPTS)} prompts" in err
  sample = [*prompt_flags, f"--max_new_tokens={NEW}", "--temperature=1.5", "--top_p=0.95"]
  _, streamed, _ = generate(capsys, workdir, *sample, "--seed=4")
  _, batched, _ = generate(capsys, workdir, *sample, "--seed=4", "--nostream", "--batch_size=2")
  assert streamed == batched and streamed != greedy  # (other seeds: tests/decode/test_generate.py)
  lines = streamed.split("\n")[:-1]
  assert len(lines) == len(PROMPTS) and all(l.startswith(p) for l, p in zip(lines, PROMPTS))


def test_generate_refusals_are_one_line(lm_workdir, experiment_module, tmp_path, capsys):
  workdir, _ = lm_workdir
  translation = tmp_path / "translation"
  translation.mkdir()
  ckpt_lib.write_config(translation, experiment_module().to_dict())
  code, out, err = generate(capsys, translation, "--prompt=x")
  assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
  assert "task='lm'" in err and "config.task is 'translate'" in err
  code, out, err = generate(capsys, workdir, "--prompt=one", "--prompt=" + " and" * 60)
  assert code == 1 and out == ""
  assert err.strip().splitlines() == [err.strip()] and "prompt 1: a prompt of" in err
  assert "model.max_length=40" in err
  code, out, err = generate(capsys, workdir, "--prompt=one", "--greedy", "--top_k=3")
  assert code == 2 and "--greedy takes the most likely token; --top_k applies to sampling" in err


class _Terminal(io.TextIOWrapper):
  def isatty(self):
    return True


def test_generate_reads_stdin_piped_or_typed(lm_workdir, monkeypatch, capsys):
  """Piped prompts are all checked before the model loads (a bad one: nothing printed); typed ones
  are continued as they come, a refused one said on stderr and the session going on."""
  workdir, _ = lm_workdir
  long_line = " and" * 60
  lines = f"one\n{long_line}\ntwo\n".encode()
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines), encoding="utf-8"))
  code, out, err = generate(capsys, workdir, "--greedy", f"--max_new_tokens={NEW}")
  assert code == 1 and out == "" and "prompt 1: a prompt of" in err
  monkeypatch.setattr(sys, "stdin", _Terminal(io.BytesIO(lines), encoding="utf-8"))
  code, out, err = generate(capsys, workdir, "--greedy", f"--max_new_tokens={NEW}")
  assert code == 0 and [line[:3] for line in out.splitlines()] == ["one", "two"]
  assert "tfm generate: error: prompt 1: a prompt of" in err and "2 prompts" in err
  monkeypatch.setattr(sys, "stdin", _Terminal(io.BytesIO(lines), encoding="utf-8"))
  _, bare, _ = generate(capsys, workdir, "--greedy", f"--max_new_tokens={NEW}", "--noecho")
  assert bare.splitlines() == [line[3:] for line in out.splitlines()]  # the continuations alone


def test_generate_refuses_a_stdin_without_prompts(lm_workdir, monkeypatch, capsys):
  """Piped stdin with no line at all: one line saying so, before the model loads (it was loaded,
  then '0 prompts' printed). (An empty line is a prompt: PROMPTS above has one.)"""
  workdir, _ = lm_workdir
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8"))
  code, out, err = generate(capsys, workdir, "--greedy")
  assert code == 1 and out == "" and err.strip().splitlines() == [
      "tfm generate: error: stdin: no prompts (expected one a line, or --prompt TEXT)"]


@pytest.mark.long
def test_generate_continues_a_trained_lm_run(experiment_module, tmp_path, capsys):
  """A task lm run trained by the loop (6 steps, its vocabulary of the English side), its last two
  checkpoints averaged: the command's greedy text is the full passes' argmax continuation."""
  from tests.integration.conftest import run_train  # pylint: disable=import-outside-toplevel
  from tfm.eval.restore import load_trained  # pylint: disable=import-outside-toplevel
  run_train(experiment_module(*LM), tmp_path / "lm")
  capsys.readouterr()  # the training's console lines (an earlier command may have turned them on)
  workdir = str(tmp_path / "lm")
  code, out, err = generate(capsys, workdir, *[f"--prompt={p}" for p in PROMPTS], "--greedy",
                            f"--max_new_tokens={NEW}")
  assert code == 0, err
  t = load_trained(workdir)
  assert t.steps == [3, 6]
  full = jax.jit(lambda p, x: t.model.apply({"params": p}, None, x))
  assert out.split("\n")[:-1] == [argmax_text(t, full, p) for p in PROMPTS]
