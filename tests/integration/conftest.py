"""A tiny experiment on the fake Bible corpus (tests/data/tfm_data_testlib.py), run end to end."""

import io
import os
import shutil
import subprocess
import sys

import pytest

from tests.data import tfm_data_testlib as testlib
from tests.integration import node
from tfm.config import load_config

MODEL = ["model.vocab_size=300", "model.d_model=16", "model.d_ff=32", "model.num_heads=2", "model.d_k=8",
         "model.d_v=8", "model.num_encoder_layers=1", "model.num_decoder_layers=1",
         "model.dtype=float32", "model.dropout_rate=0.1"]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
  root = tmp_path_factory.mktemp("corpus")
  (root / "tfds").mkdir()  # training reads datasets from an existing data_dir only
  return dict(sword=testlib.write_library(str(root / "sword")), tfds=str(root / "tfds"),
              vocab=str(root / "vocab"))


def tiny_overrides(corpus, *extra) -> list[str]:
  """The config overrides of a tiny experiment on the fake corpus, then `extra`."""
  data = [f"data.manual_dir={corpus['sword']}", f"data.data_dir={corpus['tfds']}",
          f"data.vocab_dir={corpus['vocab']}", "data.vocab_size=300", "data.max_length=32",
          "data.tokens_per_batch=256", "data.eval_max_examples=16", "data.overlong=truncate"]
  train = ["train.steps=6", "train.warmup_steps=4", "train.learning_rate=4.0", "train.log_every=3",
           "train.eval_every=100", "train.checkpoint_every=3", "train.keep_checkpoints=3",
           "train.average_checkpoints=2", "eval.bleu_every=0",
           "train.curves=False"]  # drawn in tests/integration/test_progress_and_plots.py alone
  return MODEL + data + train + list(extra)


def sweep_overrides(corpus, steps: int, *extra) -> list[str]:
  """The overrides of a tiny sweep run on the fake corpus: `steps` steps, logged, checkpointed and
  evaluated at the last, BLEU left to the sweep's `tfm eval`, the vocabulary under the sweep's
  root; then `extra`."""
  return MODEL + [
      f"data.manual_dir={corpus['sword']}", f"data.data_dir={corpus['tfds']}",
      "data.vocab_size=300", "data.max_length=32", "data.tokens_per_batch=256",
      "data.eval_max_examples=16", "data.overlong=truncate", f"train.steps={steps}",
      "train.warmup_steps=2", f"train.log_every={steps}", f"train.eval_every={steps}",
      f"train.checkpoint_every={steps}", "train.keep_checkpoints=1", "train.average_checkpoints=1",
      "eval.bleu_every=0", "eval.beam_size=2", "eval.max_extra_length=4", "eval.batch_size=4",
      *extra]


def tiny_flags(corpus, *extra) -> list[str]:
  """The same experiment as command-line flags (tfm train, launch.sh, experiments/soak.py)."""
  return ["--config=configs/quickstart.py"] + [f"--config.{o}" for o in tiny_overrides(corpus, *extra)]


def _experiment(corpus):
  """make(*overrides) -> a tiny config on the fake corpus."""

  def make(*overrides):
    return load_config("configs/quickstart.py", tiny_overrides(corpus, *overrides))

  return make


@pytest.fixture
def experiment(corpus):
  return _experiment(corpus)


@pytest.fixture(scope="module")
def experiment_module(corpus):
  return _experiment(corpus)


def run_train(config, workdir):
  from tfm.loop import train  # pylint: disable=import-outside-toplevel
  out = io.StringIO()
  state = train(config, str(workdir), stream=out)
  return state, out.getvalue()


@pytest.fixture(scope="session")
def six_steps(corpus, tmp_path_factory):
  """(a workdir of the tiny experiment's 6 steps, checkpointed at 3 and 6; its final state), once
  a test process: the uninterrupted run that tests resume, corrupt or copy (never change) and
  compare to the bit."""
  workdir = tmp_path_factory.mktemp("six_steps")
  state, _ = run_train(_experiment(corpus)("train.steps=6"), workdir)
  return workdir, state


def copy_of(trained, workdir):
  """A copy of a trained run (a fixture's (workdir, state)) in `workdir`, what training the same
  config again writes; returns the run's state."""
  shutil.copytree(trained[0], workdir)
  return trained[1]


@pytest.fixture(scope="session")
def node_python():
  if not (node.PYTHON.exists() and list((node.NODE / "wheels").glob("*.whl"))):
    if os.environ.get("TFM_CI"):
      pytest.fail(f"{node.NODE} with wheels/ is missing: .ci/run builds it")
    pytest.skip(f"no {node.NODE} with wheels/ (.ci/run builds it)")
  absent = subprocess.run(
      [str(node.PYTHON), "-c", "import importlib.util as u; print(*[m for m in ('tensorflow', "
       "'tensorflow_datasets', 'pysword', 'sacremoses', 'tensorboardX', 'grain', 'ml_collections',"
       " 'tfm') if u.find_spec(m)])"], capture_output=True, text=True, check=True, cwd="/",
      env=node.clean_env())
  assert absent.stdout.strip() == "", f"{node.NODE} is not the node's package list: {absent.stdout}"
  return str(node.PYTHON)


@pytest.fixture(scope="session")
def node_bundle(node_python, tmp_path_factory):
  """make_bundle.py (in tfm's own environment, with TFDS) on the fake Bible corpus, once a test
  process: the GPU table's and the Table 3 driver's tests both run from it."""
  return make_bundle(node_python, tmp_path_factory.mktemp("gpu_bundle"),
                     "--config.data.max_length=48", "--config.data.overlong=truncate")


def make_bundle(node_python: str, root, *flags: str):
  """root/bundle: make_bundle.py (in tfm's own environment, with TFDS) on a fake Bible corpus
  written in root, with a 300-piece vocabulary and the node Python's wheels; flags are
  make_bundle.py's others, ahead of the corpus's (--config=... first, then --config.KEY=...)."""
  sword = testlib.write_library(str(root / "sword"))
  version = subprocess.run([node_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.strip()
  done = subprocess.run(
      [sys.executable, "experiments/gpu/make_bundle.py", f"--out={root / 'bundle'}", *flags,
       f"--wheels_from={node.NODE / 'wheels'}", f"--python_version={version}",
       f"--config.data.data_dir={root / 'tfds'}", f"--config.data.manual_dir={sword}",
       "--config.data.vocab_size=300", "--config.model.vocab_size=300"],
      cwd=node.ROOT, capture_output=True, text=True, check=False, timeout=300)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return root / "bundle"


def command_lines():
  """(pid, argv as bytes) of every process on this machine whose command line can be read: the
  tests find the children they signal (a sweep's eval, launch.sh's workers) by their arguments."""
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        yield int(pid), f.read().split(b"\0")
    except OSError:
      continue
