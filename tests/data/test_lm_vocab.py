"""The vocabulary of tasks lm and mlm: trained on data.text_key's side alone, named by it, with
`<mask>` at id 3 for mlm and nowhere else; the monolingual config keys refused in one line."""

import gzip
import json
import os
import shutil

import numpy as np
import pytest

from tfm import tasks
from tfm.data import pipeline, sources, vocabulary
from tfm.data.config import DataConfig

EN = "abcdefgh"  # the English side's letters
ES = "stuvwxyz"  # the other side's: none may reach an English vocabulary


def _texts(letters, n, seed):
  rng = np.random.default_rng(seed)
  return [" ".join("".join(rng.choice(list(letters), int(rng.integers(2, 6))))
                   for _ in range(int(rng.integers(2, 9)))) for _ in range(n)]


@pytest.fixture
def export(tmp_path):
  """An export of bible_translate/web-sparv (tfm/data/exported.py's format, written here) whose
  'en' and 'es' texts use disjoint letters."""
  directory = tmp_path / "tfds" / "tfm_export" / "bible-translate-web-sparv"
  directory.mkdir(parents=True)
  counts = {}
  for i, split in enumerate(("train", "validation", "test")):
    n = 200 if split == "train" else 20
    rows = [{"en": en, "es": es} for en, es in zip(_texts(EN, n, i), _texts(ES, n, 10 + i))]
    with gzip.open(directory / f"{split}.jsonl.gz", "wt", encoding="utf-8") as f:
      f.writelines(json.dumps(row) + "\n" for row in rows)
    counts[split] = n
  (directory / "meta.json").write_text(json.dumps({
      "format": 1, "dataset": "bible_translate/web-sparv", "languages": ["en", "es"],
      "tfds_version": "1.0.0", "splits": counts}))
  return tmp_path


def _cfg(root, **changes):
  return DataConfig(**{**dict(dataset="bible_translate/web-sparv", text_key="en",
                              data_dir=str(root / "tfds"), vocab_size=60,
                              vocab_dir=str(root / "vocab"), max_length=32,
                              tokens_per_batch=128), **changes})


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_vocabulary_is_trained_on_the_text_key_side_alone(export, task):
  """Every piece's letters are the English side's; the file is named by 'en', not the pair, and
  '_mask' for mlm; <mask> is id 3 for mlm (encode never yields it) and absent for lm."""
  cfg = _cfg(export)
  tok = vocabulary.get_tokenizer(cfg, source=sources.DataSource.of(cfg), task=tasks.get(task))
  name = os.path.basename(tok.path)
  assert name == f"spm_bible-translate-web-sparv_en_60{'_mask' if task == 'mlm' else ''}.model"
  pieces = tok.pieces(range(tok.vocab_size))
  letters = set("".join(pieces[4 if task == "mlm" else 3:])) - {"▁"}
  assert letters <= set(EN) and letters >= set(EN)
  encoded = {i for text in _texts(EN, 50, 0) for i in tok.encode(text)}
  if task == "mlm":
    assert tok.mask_id == 3 and pieces[3] == "<mask>" and tok.first_ordinary_id == 4
    assert 3 not in encoded
  else:
    assert tok.mask_id is None and "<mask>" not in pieces and tok.first_ordinary_id == 3
  if task == "lm":  # the export's dev split ('validation') in order, English side
    batch = pipeline.eval_batches(cfg, sources.DataSource.of(cfg), tok, "dev", task=tasks.get(task))[0]
    assert tok.decode(batch["targets"][0]).split()[0] == _texts(EN, 20, 1)[0].split()[0]


def test_a_vocabulary_of_the_other_task_is_never_read(export):
  """A model without <mask> at the mlm name (copied there by hand) is refused in one line."""
  cfg = _cfg(export)
  lm = vocabulary.get_tokenizer(cfg, source=sources.DataSource.of(cfg), task=tasks.get("lm"))
  shutil.copy(lm.path, os.path.join(cfg.vocab_dir, vocabulary.vocab_filename(cfg, task=tasks.get("mlm"))))
  with pytest.raises(ValueError, match=r"without <mask>, for task 'mlm'"):
    vocabulary.get_tokenizer(cfg, task=tasks.get("mlm"))


@pytest.mark.parametrize("changes,message", [
    (dict(mask_rate=1.5), r"config key data.mask_rate: expected a number in \[0, 1\]"),
    (dict(mask_token_rate=0.8, mask_random_rate=0.3), r"config key data.mask_random_rate"),
    (dict(text_key="fr"), r"config key data.text_key: expected a text feature of data.dataset="),
    (dict(text_key=""), r"config key data.text_key: expected a feature key"),
    (dict(dataset="text", data_dir=None, train_files={"es": "x"}), r"data.train_files"),
])
def test_bad_monolingual_keys_are_refused_in_one_line(tmp_path, changes, message):
  with pytest.raises(ValueError, match=message) as e:
    _cfg(tmp_path, **changes)
  assert "\n" not in str(e.value)


def test_text_files_one_text_a_line_and_by_mapping(tmp_path):
  """A train file without '{lang}' is one text a line (a tab is text, not a column); a mapping
  {text_key: path} names the same file."""
  path = tmp_path / "corpus.txt"
  lines = ["a first\tline", "", "the third line"]
  path.write_text("\n".join(lines) + "\n")
  for files in (str(path), {"en": str(path)}):
    cfg = DataConfig(dataset="text", text_key="en", train_files=files, dev_files=files,
                     vocab_size=30,
                     vocab_dir=str(tmp_path / "vocab"))
    split = sources.DataSource.of(cfg).open("train")
    assert [split[i] for i in range(len(split))] == [(line.encode(),) for line in lines]


def test_a_run_written_before_the_monolingual_keys_resumes():
  """A config.json without data.text_key and the mask keys (an earlier run's) is the same run:
  nothing differs that a resume may not change, and the sweep fingerprint leaves them out."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  from tfm.sweep import publish  # pylint: disable=import-outside-toplevel
  from tfm.train import workdir  # pylint: disable=import-outside-toplevel
  new = config_lib.Config().to_dict()
  old = {**new, "data": {k: v for k, v in new["data"].items()
                         if k not in ("text_key", "mask_rate", "mask_token_rate",
                                      "mask_random_rate")}}
  assert workdir.incompatible_keys(old, new) == []
  assert workdir.incompatible_keys(old, {**new, "data": {**new["data"], "mask_rate": 0.2}}) == [
      "data.mask_rate"]
  config = config_lib.load_config("configs/mlm_quickstart.py")  # a run that reads the rate
  assert publish.fingerprint(config, "v", 10) != publish.fingerprint(
      config.replace(data=config.data.replace(mask_rate=0.2)), "v", 10)
