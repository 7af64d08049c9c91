"""`tfm eval` and `tfm translate` on a briefly trained tiny model."""

import glob
import json
import math
import shutil

import numpy as np
import pytest

from tests.integration.conftest import run_train
from tfm import cli
from tfm.eval.restore import load_trained
from tfm.train import checkpoint as ckpt_lib


@pytest.fixture(scope="module")
def trained(experiment_module, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("trained")
  run_train(experiment_module("train.steps=6", "eval.beam_size=2", "eval.max_extra_length=5",
                              "eval.batch_size=4"), workdir)
  return str(workdir)


def test_eval_writes_bleu_perplexity_and_signature(trained, capsys):
  # The first 4 dev sources: one batch of eval.batch_size, decoded as the read-only test's
  assert cli.main(["tfm", "eval", f"--workdir={trained}", "--limit=4"]) == 0
  (path,) = glob.glob(f"{trained}/eval_dev_6_avg2_first4.json")
  result = json.load(open(path))
  assert result["checkpoints"] == [3, 6] and result["averaged"] == 2  # train.average_checkpoints=2
  assert 0.0 <= result["bleu"] <= 100.0 and 0.0 <= result["tokenized_bleu"] <= 100.0
  assert result["sacrebleu_signature"].startswith("nrefs:1")
  assert math.isclose(result["perplexity"], math.exp(result["nll"]), rel_tol=1e-5)
  assert result["sentences"] == 4 and result["decode_tokens_per_s"] > 0
  assert result["decode_compile_s"] > 0  # compiled before the timed decoding, reported apart
  out = capsys.readouterr()
  assert "perplexity" in out.out
  assert "[eval] dev: decoding 4/4 sentences (100%)" in out.err  # progress, apart from the result


def test_eval_uses_the_averaged_parameters(trained):
  averaged = load_trained(trained, average=2)
  latest = load_trained(trained, average=1)
  assert averaged.steps == [3, 6] and latest.steps == [6]
  leaf = lambda t: np.asarray(t.params["token_embedding"]["embedding"])
  three = ckpt_lib.restore_params(trained, 3, averaged.params)
  np.testing.assert_allclose(leaf(averaged), (np.asarray(three["token_embedding"]["embedding"])
                                              + leaf(latest)) / 2, rtol=1e-6, atol=1e-7)


def test_translate_reads_a_file_and_prints_one_line_each(trained, tmp_path, capsys):
  source = tmp_path / "in.txt"
  # One input per \n: U+2028 and a form feed inside a line, and a CRLF ending, do not cut it.
  source.write_text("in the beginning god made the light\r\nthe word\u2028of\x0clife\n",
                    encoding="utf-8")
  # --beam-size, a flag spelled with a hyphen: the run's own beam (the search of the other tests)
  assert cli.main(["tfm", "translate", f"--workdir={trained}", f"--input={source}",
                   "--beam-size=2"]) == 0
  out = capsys.readouterr()
  assert len(out.out.splitlines()) == 2
  assert "output tokens/s" in out.err


def test_translate_samples_reproducibly(trained, tmp_path, capsys):
  source = tmp_path / "in.txt"
  source.write_text("in the beginning god made the light\nthe word of life\nbread\n", encoding="utf-8")
  # The last checkpoint alone (--average=1): one restore for each of the three commands
  args = ["tfm", "translate", f"--workdir={trained}", f"--input={source}", "--sample",
          "--temperature=1.5", "--top_k=20", "--top_p=0.95", "--average=1"]
  outputs = []
  for seed in (1, 1, 2):
    assert cli.main(args + [f"--seed={seed}"]) == 0
    outputs.append(capsys.readouterr().out.splitlines())
  assert len(outputs[0]) == 3 and outputs[0] == outputs[1]  # the same seed, the same samples
  assert outputs[0] != outputs[2]  # a 6-step model at temperature 1.5 is far from deterministic


def test_eval_on_an_empty_workdir_is_a_clear_error(tmp_path, capsys):
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path}"]) == 1
  assert "config.json not found" in capsys.readouterr().err


def test_a_workdir_whose_mesh_does_not_fit_here_is_evaluated_data_parallel(trained, tmp_path,
                                                                           capsys):
  """Trained on fsdp x tensor = 2 x 2 devices (config.json says so), translated on this one
  device: the mesh is a layout, so the checkpoints restore onto data parallelism and translate
  as the workdir's own mesh does."""
  import shutil  # pylint: disable=import-outside-toplevel
  moved = tmp_path / "moved"
  shutil.copytree(trained, moved)
  config = json.loads((moved / "config.json").read_text())
  config["mesh"].update(fsdp=2, tensor=2)
  (moved / "config.json").write_text(json.dumps(config))
  source = tmp_path / "in.txt"
  source.write_text("in the beginning god made the light\n", encoding="utf-8")
  outputs = []
  for workdir in (trained, moved):
    assert cli.main(["tfm", "translate", f"--workdir={workdir}", f"--input={source}"]) == 0
    outputs.append(capsys.readouterr())
  assert outputs[1].out == outputs[0].out
  assert ("the workdir's mesh (data=-1, fsdp=2, tensor=2) does not fit the 1 device(s) here: "
          "data parallel over them instead") in outputs[1].err
  assert "mesh" not in outputs[0].err


@pytest.fixture
def read_only(trained, tmp_path):
  """A copy of the trained workdir behind a read-only bind mount (root only: chmod does not stop
  root, a mount does)."""
  import shutil  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  copy, mount = tmp_path / "copy", tmp_path / "read_only"
  shutil.copytree(trained, copy)
  mount.mkdir()
  if subprocess.run(["mount", "-o", "bind,ro", str(copy), str(mount)],
                    capture_output=True).returncode != 0:
    pytest.skip("a read-only bind mount needs root (mount -o bind,ro)")
  try:
    with pytest.raises(OSError):  # really read-only
      (mount / "probe").write_text("")
    yield mount
  finally:
    subprocess.run(["umount", str(mount)], check=True)


def test_commands_that_read_a_run_work_on_a_read_only_workdir(read_only, tmp_path, capsys):
  """eval prints its results and says in one line where it could not save them; --out saves them
  elsewhere, the same file it writes into a writable workdir. translate needs no write; plot and
  attention say where their figure could not go, and --out draws it elsewhere."""
  before = sorted(p.name for p in read_only.rglob("*"))
  assert cli.main(["tfm", "eval", f"--workdir={read_only}", "--limit=4", "--average=1"]) == 0
  out = capsys.readouterr()
  target = read_only / "eval_dev_6_avg1_first4.json"
  assert "perplexity" in out.out and "written" not in out.out
  (line,) = [l for l in out.err.splitlines() if "could not save" in l]
  assert line == (f"tfm: could not save the results to {target} (Read-only file system); "
                  "--out=FILE saves it elsewhere")
  saved = tmp_path / "eval.json"
  assert cli.main(["tfm", "eval", f"--workdir={read_only}", "--limit=4", "--average=1",
                   f"--out={saved}"]) == 0
  printed = capsys.readouterr().out
  result = json.loads(saved.read_text())
  assert result["checkpoints"] == [6] and f"{result['perplexity']}" in printed
  source = tmp_path / "in.txt"
  source.write_text("in the beginning god made the light\n", encoding="utf-8")
  assert cli.main(["tfm", "translate", f"--workdir={read_only}", f"--input={source}"]) == 0
  assert len(capsys.readouterr().out.splitlines()) == 1
  assert cli.main(["tfm", "plot", f"--workdir={read_only}"]) == 1
  assert f"could not save the figure to {read_only / 'curves.png'} (Read-only file system)" in (
      capsys.readouterr().err)
  assert cli.main(["tfm", "attention", f"--workdir={read_only}", "--text=the word"]) == 1
  assert f"could not save the figure to {read_only / 'attention.png'}" in capsys.readouterr().err
  figure = tmp_path / "attention.png"
  assert cli.main(["tfm", "attention", f"--workdir={read_only}", "--text=the word",
                   f"--out={figure}"]) == 0
  assert figure.read_bytes().startswith(b"\x89PNG")
  assert sorted(p.name for p in read_only.rglob("*")) == before  # nothing half-written left


def test_eval_refuses_a_set_with_nothing_to_score_before_writing_any(trained, tmp_path, capsys):
  """`--split=dev,long` where every pair of the set 'long' is longer than data.max_length and
  filtered: refused in one line before dev is evaluated, so no result file is written (dev's was,
  before the refusal)."""
  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir)
  config = json.loads((workdir / "config.json").read_text())
  for lang in (config["data"]["source_lang"], config["data"]["target_lang"]):
    (tmp_path / f"long.{lang}").write_text(" ".join(["word"] * 80) + "\n")
  config["data"].update(eval_sets={"dev": "dev", "long": str(tmp_path / "long.{lang}")},
                        overlong="filter")
  (workdir / "config.json").write_text(json.dumps(config))
  before = sorted(glob.glob(f"{workdir}/**", recursive=True))
  assert cli.main(["tfm", "eval", f"--workdir={workdir}", "--split=dev,long"]) == 1
  assert "tfm eval: error: evaluation set 'long': " in capsys.readouterr().err
  assert sorted(glob.glob(f"{workdir}/**", recursive=True)) == before
