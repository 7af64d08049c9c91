"""Training on data tfm names nowhere, end to end: plain text files (named evaluation sets in the
loop's log and TensorBoard, an exact resume, `tfm eval` per evaluation set, a bad file refused
before anything is written) and a TFDS translation builder under tfds.testing.mock_data."""

import glob
import json
import os

import jax
import numpy as np
import pytest

from tests.data import tfm_data_testlib as testlib
from tests.integration.conftest import MODEL, run_train
from tfm import cli
from tfm.config import load_config
from tfm.figures import curves
from tfm.train.trackers import events


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory):
  """The fake Bible's verse pairs as text files: train (the rest), dev (20 pairs, a file per side)
  and 'extra' (10 other pairs, one TSV)."""
  root = tmp_path_factory.mktemp("text")
  pairs = list(testlib.clean_pairs().values())
  splits = {"dev": pairs[:20], "extra": pairs[20:30], "train": pairs[30:]}
  for split in ("train", "dev"):
    for side, lang in enumerate(("en", "es")):
      (root / f"{split}.{lang}").write_text("".join(p[side] + "\n" for p in splits[split]),
                                            encoding="utf-8")
  (root / "extra.tsv").write_text("".join(f"{en}\t{es}\n" for en, es in splits["extra"]),
                                  encoding="utf-8")
  return root


def _config(root, *extra):
  config = load_config("configs/quickstart.py", MODEL + [
      "data.dataset=text", f"data.train_files={root}/train.{{lang}}",
      f"data.dev_files={root}/dev.{{lang}}", f"data.vocab_dir={root}/vocab",
      f"data.cache_dir={root}/cache", "data.vocab_size=300", "data.max_length=32",
      "data.tokens_per_batch=256", "data.eval_max_examples=16", "data.overlong=truncate",
      "train.steps=6", "train.warmup_steps=4", "train.learning_rate=4.0", "train.log_every=3",
      "train.eval_every=3", "train.checkpoint_every=3", "train.keep_checkpoints=3",
      "train.average_checkpoints=2", "eval.bleu_every=0", "eval.beam_size=2",
      "eval.max_extra_length=5", "eval.batch_size=4", "train.curves=False", *extra])
  return config.replace(data=config.data.replace(
      eval_sets={"dev": "dev", "extra": str(root / "extra.tsv")}))


def _params(state):
  return jax.tree.leaves(jax.device_get(state.params))


def test_text_files_train_resume_and_evaluate_each_set(text_corpus, tmp_path, capsys):
  config = _config(text_corpus)
  whole, log = run_train(config, tmp_path / "a")
  assert int(whole.step) == 6
  for name in ("dev", "extra"):  # each evaluation set on its own, under its name
    for step in (3, 6):
      assert f"[{name}] step {step} | loss" in log, log
  scalars = events.read_scalars(str(tmp_path / "a" / "tensorboard"))
  assert [s for s, _ in scalars["dev/perplexity"]] == [3, 6]
  assert [s for s, _ in scalars["extra/perplexity"]] == [3, 6]
  assert scalars["dev/perplexity"] != scalars["extra/perplexity"]
  # The curves figure draws the other set beside dev.
  assert curves.eval_sets(scalars) == ["extra"]
  ppl = curves.draw({"a": scalars}).axes[1]  # the perplexity panel
  assert [line.get_label() for line in ppl.lines] == ["a", "a extra"]
  assert list(ppl.lines[1].get_xdata()) == [3, 6]
  # The train split was tokenized once into the token cache, keyed by the files.
  assert glob.glob(f"{text_corpus}/cache/text_en-es_L32_*/host-0-of-1/meta.json")
  # A resumed run continues from the checkpointed data position: bit for bit the same.
  run_train(_config(text_corpus, "train.steps=3"), tmp_path / "b")
  resumed, log = run_train(config, tmp_path / "b")
  assert "resumed from step 3" in log
  assert all(np.array_equal(x, y) for x, y in zip(_params(whole), _params(resumed)))

  # tfm eval: every evaluation set, a result each.
  capsys.readouterr()
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path / 'a'}"]) == 0
  dev = json.load(open(tmp_path / "a" / "eval_dev_6_avg2.json"))
  extra = json.load(open(tmp_path / "a" / "eval_extra_6_avg2.json"))
  assert (dev["split"], dev["sentences"]) == ("dev", 16)  # data.eval_max_examples=16
  assert (extra["split"], extra["sentences"]) == ("extra", 10)
  assert dev["perplexity"] != extra["perplexity"]
  # One set by name; the test split has no files: one line naming the key.
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path / 'a'}", "--split=extra", "--limit=3"]) == 0
  assert json.load(open(tmp_path / "a" / "eval_extra_6_avg2_first3.json"))["sentences"] == 3
  capsys.readouterr()
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path / 'a'}", "--split=test"]) != 0
  err = capsys.readouterr().err
  assert "config key data.test_files: expected the test split's text files" in err
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path / 'a'}", "--split=nope"]) != 0
  assert "--split: expected names of dev, test, extra" in capsys.readouterr().err


@pytest.mark.parametrize("split", ["train", "dev"])
def test_a_bad_file_is_refused_before_anything_is_written(text_corpus, tmp_path, split):
  """Mismatched train files, or dev files (read only at the first evaluation), stop the run before
  its workdir or vocabulary is written."""
  bad = tmp_path / "bad"
  bad.mkdir()
  (bad / f"{split}.en").write_text("one\ntwo\nthree\n")
  (bad / f"{split}.es").write_text("uno\ndos\n")
  config = _config(text_corpus, f"data.{split}_files={bad}/{split}.{{lang}}",
                   f"data.vocab_dir={tmp_path}/vocab")
  with pytest.raises(ValueError, match=rf"^data.{split}_files: {bad}/{split}.en has 3 lines but "
                                       rf"{bad}/{split}.es has 2; expected the same number"):
    run_train(config, tmp_path / "w")
  assert not os.path.exists(tmp_path / "w")  # the new workdir removed again
  assert not os.path.exists(tmp_path / "vocab") or not os.listdir(tmp_path / "vocab")


@pytest.mark.long  # its parts in the fast tier: the builder's batches and dev pairs (tests/data/
# test_any_tfds_builder.py::test_an_unlisted_builder_trains_and_evaluates), a test split's eval
# batches (tests/data/test_eval.py), a run's named evaluation sets in its log and TensorBoard
# (test_text_files_train_resume_and_evaluate_each_set); every tiny run here trains on TFDS data
def test_an_unlisted_tfds_builder_trains_with_a_test_split_evaluation_set(tmp_path):
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  model = [m for m in MODEL if not m.startswith("model.vocab_size")]
  (tmp_path / "tfds").mkdir()
  with tfds.testing.mock_data(num_examples=64, policy=tfds.testing.MockPolicy.USE_CODE):
    config = load_config("configs/quickstart.py", model + [
        "model.vocab_size=40", "data.vocab_size=40", "data.dataset=ted_hrlr_translate/pt_to_en",
        "data.source_lang=pt", "data.target_lang=en", f"data.data_dir={tmp_path}/tfds",
        f"data.vocab_dir={tmp_path}/vocab", "data.max_length=32", "data.tokens_per_batch=256",
        "data.eval_max_examples=16", "data.overlong=truncate", "data.eval_sets={'dev': 'dev', "
        "'held': 'test'}", "train.steps=4", "train.warmup_steps=2", "train.log_every=2",
        "train.eval_every=4", "train.checkpoint_every=4", "eval.bleu_every=0",
        "train.curves=False"])
    state, log = run_train(config, tmp_path / "w")
  assert int(state.step) == 4
  assert "[dev] step 4 | loss" in log and "[held] step 4 | loss" in log, log
  assert glob.glob(f"{tmp_path}/tfds/tfm_cache/ted-hrlr-translate-pt-to-en_pt-en_L32_*")
