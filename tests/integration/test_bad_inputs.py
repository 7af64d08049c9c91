"""The bad-input catalogue: every case gives one line naming the file, key or flag and what was
expected, exit code 2 for usage errors and 1 for the rest, and leaves the workdir as it was."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Callable

import pytest

from tests.integration.conftest import run_train, tiny_flags
from tfm import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Case:
  args: list[str]  # after `tfm`; WORK = the case's workdir, TRAINED = a trained workdir
  code: int
  message: str  # a substring of the one line on stderr
  setup: Callable[[pathlib.Path], None] | None = None  # prepares WORK (None: WORK does not exist)
  stdin: bytes | None = None
  corpus: bool = False  # add the fake-corpus data keys to a train command


def _write(name: str, text: str):
  return lambda work: (work.mkdir(parents=True, exist_ok=True), (work / name).write_text(text))


def _lock(work: pathlib.Path):
  work.mkdir(parents=True)
  (work / ".lock").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                          "since": "now"}))  # this test process: alive


def _copy_trained_with(change: Callable[[dict], None]):
  def setup(work: pathlib.Path):
    import shutil  # pylint: disable=import-outside-toplevel
    shutil.copytree(TRAINED_DIR[0], work)
    config = json.loads((work / "config.json").read_text())
    change(config)
    (work / "config.json").write_text(json.dumps(config))
  return setup


def _copy_config_only(work: pathlib.Path):
  work.mkdir(parents=True)
  (work / "config.json").write_text((pathlib.Path(TRAINED_DIR[0]) / "config.json").read_text())


QS = "--config=configs/quickstart.py"
CASES = {
    # the config file and its keys
    "missing_config_file": Case(["train", "--config=configs/nope.py", "--workdir=WORK"], 2,
                                "--config configs/nope.py: cannot be read (No such file or directory)"),
    "config_syntax_error": Case(["train", "--config=WORK/c.py", "--workdir=WORK"], 2,
                                "c.py: invalid Python at line 1", _write("c.py", "def get_config(:\n")),
    "config_without_get_config": Case(["train", "--config=WORK/c.py", "--workdir=WORK"], 2,
                                      "c.py: defines no get_config", _write("c.py", "X = 1\n")),
    "config_get_config_raises": Case(["train", "--config=configs/table3.py:Z9", "--workdir=WORK"], 2,
                                     "unknown row 'Z9'; expected one of base, A1"),
    "unknown_key_typo": Case(["train", QS, "--config.model.d_modle=64", "--workdir=WORK"], 2,
                             "--config.model.d_modle: unknown config key 'd_modle'; did you mean "
                             "'d_model'?"),
    "unknown_section": Case(["train", QS, "--config.modle.d_model=64", "--workdir=WORK"], 2,
                            "unknown config key 'modle'; did you mean 'model'?"),
    "value_of_the_wrong_type": Case(["train", QS, "--config.model.d_model=abc", "--workdir=WORK"], 2,
                                    "flag --config.model.d_model=abc: invalid literal for int()"),
    "invalid_value": Case(["train", QS, "--config.model.num_heads=0", "--workdir=WORK"], 1,
                          "config key model.num_heads: expected a positive integer, got 0"),
    "nan_learning_rate": Case(["train", QS, "--config.train.learning_rate=nan", "--workdir=WORK"], 1,
                              "config key train.learning_rate: expected a positive finite number, "
                              "got nan"),
    "inf_label_smoothing": Case(["train", QS, "--config.train.label_smoothing=inf",
                                 "--workdir=WORK"], 1, "train.label_smoothing: expected a number"),
    "vocab_sizes_differ": Case(["train", QS, "--config.model.vocab_size=100", "--workdir=WORK"], 1,
                               "data.vocab_size (2000) and model.vocab_size (100) must be equal"),
    "unknown_dataset": Case(["train", QS, "--config.data.dataset=wmt99/xx", "--workdir=WORK"], 1,
                            "config key data.dataset: expected a TFDS translation builder "
                            "('builder' or 'builder/config') or 'text', got 'wmt99/xx'; TFDS said: "
                            "Dataset wmt99 not found."),
    "malformed_dataset": Case(["train", QS, "--config.data.dataset=Not A Name", "--workdir=WORK"],
                              1, "config key data.dataset: expected a TFDS translation builder"),
    "language_not_a_feature_key": Case(
        ["train", QS, "--config.data.dataset=ted_hrlr_translate/pt_to_en",
         "--config.data.source_lang=de", "--config.data.target_lang=en", "--workdir=WORK"], 1,
        "config key data.source_lang: expected a feature key of "
        "data.dataset='ted_hrlr_translate/pt_to_en', one of ['en', 'pt'], got 'de'"),
    "eval_batch_size_zero": Case(["train", QS, "--config.eval.batch_size=0", "--workdir=WORK"], 1,
                                 "config key eval.batch_size: expected a positive integer, got 0"),
    "keep_fewer_than_averaged": Case(["train", QS, "--config.train.keep_checkpoints=2",
                                      "--config.train.average_checkpoints=3", "--workdir=WORK"], 1,
                                     "train.keep_checkpoints: expected at least "
                                     "train.average_checkpoints=3"),
    # the workdir
    "missing_workdir_flag": Case(["train", QS], 2, "--workdir is required"),
    "workdir_is_a_file": Case(["train", QS, "--workdir=WORK/file"], 1, "is a file; expected a "
                              "directory", _write("file", "x")),
    "workdir_cannot_be_created": Case(["train", QS, "--workdir=/sys/tfm-test-workdir"], 1,
                                      "--workdir /sys/tfm-test-workdir: cannot be created"),
    "workdir_read_only": Case(["train", QS, "--workdir=/sys/kernel"], 1,
                              "--workdir /sys/kernel: not writable"),
    "workdir_in_use": Case(["train", "--workdir=WORK"], 1, "in use by another tfm train", _lock,
                           corpus=True),
    "workdir_of_another_model": Case(["train", "--workdir=WORK", "--config.model.d_model=32"], 1,
                                     "model.d_model: 16 -> 32", corpus=True,
                                     setup=lambda work: _copy_trained_with(lambda c: None)(work)),
    "garbage_config_json": Case(["train", "--workdir=WORK"], 1, "config.json: not valid JSON",
                                _write("config.json", "{not json"), corpus=True),
    # data
    "missing_manual_dir": Case(["train", "--workdir=WORK", "--config.data.manual_dir=/nonexistent",
                                "--config.data.data_dir=/tmp"], 1,
                               "data.manual_dir='/nonexistent' does not exist", corpus=True),
    "missing_data_dir": Case(["train", "--workdir=WORK", "--config.data.data_dir=/nonexistent/tfds"],
                             1, "data.data_dir='/nonexistent/tfds' does not exist", corpus=True),
    "text_without_train_files": Case(["train", QS, "--config.data.dataset=text", "--workdir=WORK"],
                                     1, "config key data.train_files: expected the train split's "
                                     "text files with data.dataset='text'"),
    "text_without_dev_files": Case(["train", QS, "--config.data.dataset=text",
                                    "--config.data.train_files=WORK/train.{lang}", "--workdir=WORK"],
                                   1, "config key data.dev_files: expected the dev split's text "
                                   "files: data.eval_sets evaluates the dev split as 'dev', got "
                                   "None"),
    "text_line_counts_differ": Case(
        ["train", QS, "--config.data.dataset=text", "--config.data.train_files=WORK/t.{lang}",
         "--config.data.dev_files=WORK/t.{lang}", "--workdir=WORK"], 1,
        "data.train_files: WORK/t.en has 3 lines but WORK/t.es has 2; expected the same number",
        lambda work: (_write("t.en", "one\ntwo\nthree\n")(work), _write("t.es", "uno\ndos\n")(work))),
    "text_empty_file": Case(
        ["train", QS, "--config.data.dataset=text", "--config.data.train_files=WORK/t.{lang}",
         "--config.data.dev_files=WORK/t.{lang}", "--workdir=WORK"], 1,
        "data.train_files: WORK/t.es is empty; expected a text file, one sentence a line",
        lambda work: (_write("t.en", "one\n")(work), _write("t.es", "")(work))),
    "text_missing_file": Case(
        ["train", QS, "--config.data.dataset=text", "--config.data.train_files=WORK/t.tsv",
         "--config.data.dev_files=WORK/t.tsv", "--workdir=WORK"], 1,
        "data.train_files: WORK/t.tsv does not exist or is not a file"),
    "eval_sets_not_a_mapping": Case(["train", QS, "--config.data.eval_sets=dev", "--workdir=WORK"],
                                    1, "config key data.eval_sets: expected a mapping of names"),
    # eval
    "eval_without_workdir": Case(["eval"], 2, "--workdir is required"),
    "eval_empty_workdir": Case(["eval", "--workdir=WORK"], 1, "config.json not found",
                               lambda work: work.mkdir()),
    "eval_garbage_config_json": Case(["eval", "--workdir=WORK"], 1, "config.json: not valid JSON",
                                     _write("config.json", "{not json")),
    "eval_config_json_of_another_model": Case(
        ["eval", "--workdir=WORK"], 1, "can be restored for averaging",
        _copy_trained_with(lambda c: c["model"].update(d_model=32))),
    "eval_config_json_invalid": Case(
        ["eval", "--workdir=WORK"], 1, "config.json: config key model.num_heads",
        _copy_trained_with(lambda c: c["model"].update(num_heads=0))),
    "eval_negative_limit": Case(["eval", "--workdir=TRAINED", "--limit=-1"], 2,
                                "flag --limit=-1: -1 is not a non-negative integer"),
    "eval_zero_average": Case(["eval", "--workdir=TRAINED", "--average=0"], 2,
                              "flag --average=0: 0 is not a positive integer"),
    "eval_unknown_split": Case(["eval", "--workdir=TRAINED", "--split=valid"], 2,
                               "--split: expected names of dev, test (the splits dev and test, and "
                               "the run's data.eval_sets), got 'valid'"),
    # translate
    "translate_non_utf8_stdin": Case(["translate", "--workdir=TRAINED"], 1, "stdin: not UTF-8 text",
                                     stdin=b"caf\xe9\n"),
    "translate_negative_beam": Case(["translate", "--workdir=TRAINED", "--beam_size=-1"], 2,
                                    "flag --beam_size=-1: -1 is not a positive integer"),
    "translate_zero_beam": Case(["translate", "--workdir=TRAINED", "--beam_size=0"], 2,
                                "flag --beam_size=0: 0 is not a positive integer"),
    "translate_missing_input": Case(["translate", "--workdir=TRAINED", "--input=/nonexistent.txt"], 1,
                                    "--input /nonexistent.txt: cannot read it as UTF-8 text"),
    "translate_zero_temperature": Case(["translate", "--workdir=TRAINED", "--sample",
                                        "--temperature=0"], 2, "--temperature: expected a number > 0"),
    "translate_top_p_out_of_range": Case(["translate", "--workdir=TRAINED", "--sample", "--top_p=1.5"],
                                         2, "--top_p: expected a number in (0, 1], got 1.5"),
    "translate_top_k_without_sample": Case(["translate", "--workdir=TRAINED", "--top_k=5"], 2,
                                           "apply with --sample only"),
    "translate_seed_without_sample": Case(["translate", "--workdir=TRAINED", "--seed=3"], 2,
                                          "--seed apply with --sample only"),
    "translate_beam_with_sample": Case(["translate", "--workdir=TRAINED", "--sample",
                                        "--beam_size=4"], 2, "--beam_size applies to search"),
    # attention
    "attention_without_workdir": Case(["attention", "--text=light"], 2, "--workdir is required"),
    "attention_empty_text": Case(["attention", "--workdir=TRAINED", "--text="], 2,
                                 "--text: expected a sentence to translate, got an empty one"),
    "attention_unknown_layer": Case(["attention", "--workdir=TRAINED", "--text=light", "--layer=2"],
                                    2, "--layer 2: expected 1..1 (the model has 1 encoder and 1 "
                                    "decoder layers)"),
    "attention_layer_zero": Case(["attention", "--workdir=TRAINED", "--text=light", "--layer=0"], 2,
                                 "--layer 0: expected 1..1"),
    "attention_unknown_head": Case(["attention", "--workdir=TRAINED", "--text=light", "--heads=1,3"],
                                   2, "--heads 1,3: expected distinct heads in 1..2"),
    "attention_unknown_kind": Case(["attention", "--workdir=TRAINED", "--text=light",
                                    "--kinds=encoder,self"], 2,
                                   "--kinds: expected some of encoder, decoder, cross, got "
                                   "'encoder,self'"),
    "attention_without_checkpoints": Case(["attention", "--workdir=WORK", "--text=light"], 1,
                                          "no checkpoint in", _copy_config_only),
    # sweep, params, the command itself
    "sweep_without_root": Case(["sweep", QS], 2, "--root is required"),
    "sweep_remote_root": Case(["sweep", QS, "--root=gs://bucket/table3"], 2,
                              "expected a local directory"),
    "sweep_zero_seeds": Case(["sweep", QS, "--root=WORK", "--seeds=0"], 2,
                             "flag --seeds=0: 0 is not a positive integer"),
    "sweep_malformed_grid": Case(["sweep", QS, "--root=WORK", "--grid=num_heads=1,2"], 2,
                                 "--grid 'num_heads=1,2': expected SECTION.KEY=VALUE1,VALUE2"),
    "sweep_rows_of_a_plain_config": Case(["sweep", QS, "--root=WORK", "--rows=A1"], 2,
                                         "--rows: configs/quickstart.py is not a table config"),
    "sweep_unknown_row": Case(["sweep", "--config=configs/table3_mini.py", "--root=WORK",
                               "--rows=A9"], 2, "--rows: unknown row(s) ['A9']"),
    "sweep_report_of_nothing": Case(["sweep", "--report", "--root=WORK"], 1, "no run results found",
                                    lambda work: work.mkdir()),
    "sweep_stack_most_without_stack": Case(["sweep", QS, "--root=WORK", "--stack_most=2"], 2,
                                           "--stack_most goes with --stack"),
    "sweep_stack_on_slurm": Case(["sweep", QS, "--root=WORK", "--stack", "--slurm"], 2,
                                 "--stack goes with a local sweep"),
    "train_repeated_seeds": Case(["train", QS, "--workdir=WORK", "--seeds=1,1"], 2,
                                 "--seeds=1,1: expected distinct non-negative integers"),
    "train_unknown_form": Case(["train", QS, "--workdir=WORK", "--config.train.guard=where"], 1,
                               "config key train.guard: expected one of ('auto', 'branch', "
                               "'select'), got 'where'"),
    "params_zero_vocab": Case(["params", QS, "--vocab_size=0"], 1, "config key model.vocab_size"),
    "train_decoder_only_translating": Case(
        ["train", "--config.model.architecture=decoder_only",
         "--config.model.num_encoder_layers=0", "--workdir=WORK"], 1,
        "config keys task='translate' and model.architecture='decoder_only': translate needs "
        "'encoder_decoder'", corpus=True),
    "train_lm_on_an_encoder_decoder": Case(
        ["train", "--config.task=lm", "--workdir=WORK"], 1,
        "config keys task='lm' and model.architecture='encoder_decoder': lm needs 'decoder_only'",
        corpus=True),
    "train_mlm_without_text_key": Case(
        ["train", "--config.task=mlm", "--config.model.architecture=encoder_only",
         "--config.model.num_decoder_layers=0", "--workdir=WORK"], 1,
        "config keys task='mlm' and data.text_key=None: mlm reads one text an example",
        corpus=True),
    "eval_context_lengths_of_a_translation_run": Case(
        ["eval", "--workdir=TRAINED", "--context_lengths=64,128"], 2,
        "--context_lengths: scores a language model (task 'lm'); the run in"),
    "eval_without_the_trained_vocabulary": Case(
        ["eval", "--workdir=WORK"], 1, "the vocabulary this model was trained with is missing",
        _copy_trained_with(lambda c: c["data"].update(vocab_dir="/nonexistent/vocab"))),
    "train_without_config": Case(["train", "--workdir=WORK"], 2, "--config=FILE[:ARG] is required"),
    "unknown_subcommand": Case(["trian"], 2, "unknown subcommand 'trian'"),
    "unknown_flag": Case(["eval", "--workdir=TRAINED", "--averag=2"], 2,
                         "Unknown command line flag 'averag'"),
    "stray_argument": Case(["eval", "--workdir=TRAINED", "dev"], 2,
                           "unexpected argument(s) dev; every option is a flag"),
    "profile_steps_out_of_range": Case(["train", QS, "--config.train.profile_steps=(5,2)",
                                        "--workdir=WORK"], 1,
                                       "config key train.profile_steps: expected () or two steps"),
    "plot_without_workdir": Case(["plot"], 2, "--workdir is required"),
    "train_a_table_without_its_row": Case(["train", "--config=configs/table3_mini.py",
                                           "--workdir=WORK"], 2,
                                          "--config=configs/table3_mini.py is a table of rows "
                                          "(base, A1,"),
    "plan_a_table_without_its_row": Case(["plan", "--config=configs/table3.py",
                                          "--topology=v5e:2x2"], 2,
                                         "name one, e.g. --config=configs/table3.py:base"),
    "plot_one_workdir_twice": Case(["plot", "--workdir=TRAINED", "TRAINED"], 2,
                                   "given more than once"),
    "plot_same_name_twice": Case(["plot", "--workdir=TRAINED", "WORK", "--names=a,a"], 2,
                                 "--names: a given more than once"),
    "plot_out_a_directory": Case(["plot", "--workdir=TRAINED", "--out=WORK"], 1,
                                 "IsADirectoryError", lambda work: work.mkdir()),  # no temp file left
    "plot_out_under_a_file": Case(["plot", "--workdir=TRAINED", "--out=WORK/curves.png"], 1,
                                  "FileExistsError", lambda work: work.write_text("a file")),
    "eval_with_a_config": Case(["eval", "--workdir=TRAINED", QS], 2,
                               "--config: this command uses the workdir's own config.json"),
    "translate_with_a_config": Case(["translate", "--workdir=TRAINED", QS,
                                     "--config.mesh.fsdp=2"], 2, "drop --config"),
}

TRAINED_DIR: list[str] = []


@pytest.fixture(scope="module")
def trained(experiment_module, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("trained")
  run_train(experiment_module("train.steps=3", "train.average_checkpoints=1"), workdir)
  TRAINED_DIR[:] = [str(workdir)]
  return workdir


def snapshot(path: pathlib.Path) -> dict | None:
  """Every file under path with its size and modification time (None: path does not exist)."""
  if not path.exists():
    return None
  if path.is_file():
    return {"": (path.stat().st_size, path.stat().st_mtime_ns)}
  return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
          for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, trained, corpus, tmp_path, monkeypatch, capsys):
  case = CASES[name]
  work = tmp_path / "work"
  if case.setup:
    case.setup(work)
  args = [a.replace("WORK", str(work)).replace("TRAINED", str(trained)) for a in case.args]
  if case.corpus:
    args = args[:1] + tiny_flags(corpus, "train.steps=3") + args[1:]
  watched = [work, trained] + [pathlib.Path(a.split("=", 1)[1]) for a in args
                               if a.startswith("--workdir=/sys")]
  before = [snapshot(p) for p in watched]
  if case.stdin is not None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(case.stdin)))
  code = cli.main(["tfm"] + args)
  err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
  assert code == case.code, (name, err)
  message = case.message.replace("WORK", str(work))
  assert len(err) == 1 and message in err[0] and "Traceback" not in err[0], (name, err)
  assert err[0].startswith(("tfm: ", f"tfm {args[0]}: ")), err
  assert [snapshot(p) for p in watched] == before, f"{name} changed a workdir"


@pytest.mark.parametrize("argv, message", [
    (["--processes"], "--processes needs a positive number of processes, got ''"),
    (["--processes", "0", "train"], "got '0'"),
    (["--processes", "two", "train"], "got 'two'"),
    (["--processes=2", "train"], "write --processes N"),
    (["setup", "--accelerator", "rocm"], "--accelerator: expected cpu, cuda or tpu, got 'rocm'"),
    (["setup", "--gpu"], "setup takes --accelerator cpu|cuda|tpu, got '--gpu'"),
    (["--tpu", "my-pod", "train"], "--tpu my-pod needs --zone ZONE"),
    (["--tpu", "--zone", "us-central2-b", "train"], "--tpu needs the TPU VM's name"),
    (["--tpu", "my-pod", "--zone", "us-central2-b"], "which tfm command?"),
])
def test_launch_sh_checks_its_flags(argv, message):
  proc = subprocess.run(["bash", str(ROOT / "launch.sh"), *argv], capture_output=True, text=True,
                        timeout=60, env={**os.environ, "TFM_VENV": sys.prefix})
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("launch.sh: ")
  assert message in lines[0] and not proc.stdout


def test_the_docs_count_this_catalogue():
  text = " ".join((ROOT / "docs" / "commands.md").read_text().split())
  counts = re.search(r"test_bad_inputs\.py`: (\d+) cases of `tfm`, (\d+) usage errors and (\d+) "
                     r"others, plus (\d+) of `launch\.sh`'s own flags", text)
  assert counts, "docs/commands.md no longer counts the bad-input catalogue"
  launch = next(m for m in test_launch_sh_checks_its_flags.pytestmark if m.name == "parametrize")
  assert [int(n) for n in counts.groups()] == [
      len(CASES), sum(c.code == 2 for c in CASES.values()), sum(c.code == 1 for c in CASES.values()),
      len(launch.args[1])]
