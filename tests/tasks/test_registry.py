"""The task registry (tfm/tasks): each name gives its one task object, any other value is refused
in one line naming the key `task`, and what the rest of tfm asks of a task is what the task does."""

import pickle
import types

import numpy as np
import pytest

from tfm import tasks
from tfm.config import Config, load_config
from tfm.data import masking
from tfm.data.config import DataConfig, validate_data_config
from tfm.model.config import ARCHITECTURES


def test_each_name_gives_its_task_and_the_architecture_it_trains():
  assert tasks.NAMES == ("translate", "lm", "mlm", "span")
  assert [tasks.get(name).name for name in tasks.NAMES] == list(tasks.NAMES)
  assert tasks.ALL == tuple(tasks.get(name) for name in tasks.NAMES)
  assert {name: tasks.get(name).architecture for name in tasks.NAMES} == {
      "translate": "encoder_decoder", "lm": "decoder_only", "mlm": "encoder_only",
      "span": "encoder_decoder"}
  assert {t.architecture for t in tasks.ALL} <= set(ARCHITECTURES)
  assert tasks.DEFAULT is tasks.get(Config().task)  # a config that names no task translates
  assert [t.name for t in tasks.ALL if t.translates] == ["translate"]


@pytest.mark.parametrize("name", ["gpt", "LM", "", None, 3, ["lm"]])
def test_another_value_is_refused_in_one_line_naming_task(name):
  message = f"config key task: expected one of ('translate', 'lm', 'mlm', 'span'), got {name!r}"
  with pytest.raises(ValueError) as raised:
    tasks.get(name)
  assert str(raised.value) == message and "\n" not in message


def test_a_task_pickles_as_itself():
  """A train.input=process batch process is handed the task (tfm/data/batch_process.py)."""
  for task in tasks.ALL:
    again = pickle.loads(pickle.dumps(task))
    assert type(again) is type(task) and again.name == task.name


def test_mlm_alone_corrupts_its_stream_batches_and_as_bert_masking_does():
  """The corrupter a task hands the pipeline: None for lm and translate; for mlm the BERT masker
  of data.mask_rate and the vocabulary with <mask>, the same masks for the same seed and counter
  as masking.Masker built directly."""
  cfg = DataConfig(text_key="en")
  tok = types.SimpleNamespace(mask_id=3, first_ordinary_id=4, vocab_size=50)  # what Masker reads
  assert tasks.get("lm").corrupter(cfg, tok, seed=0) is None
  assert tasks.get("translate").corrupter(cfg, tok, seed=0) is None
  corrupt = tasks.get("mlm").corrupter(cfg, tok, seed=5, process_index=1)
  direct = masking.Masker(rate=cfg.mask_rate, token_rate=cfg.mask_token_rate,
                          random_rate=cfg.mask_random_rate, mask_id=3, first_ordinary_id=4,
                          vocab_size=50, seed=5, process_index=1)
  ids = np.random.default_rng(0).integers(4, 50, (4, 32)).astype(np.int32)
  batch = {"targets": ids, "targets_segmentation": np.ones_like(ids),
           "targets_position": np.tile(np.arange(32, dtype=np.int32), (4, 1))}
  ours, theirs = corrupt(batch, 7), direct(batch, 7)
  assert ours.keys() == theirs.keys()
  assert all(np.array_equal(ours[k], theirs[k]) for k in ours)
  assert (ours["inputs"] == 3).any()  # 128 tokens at rate 0.15 x 0.8: some masked
  assert not np.array_equal(corrupt(batch, 8)["inputs"], ours["inputs"])  # the counter counts


def test_mlm_evaluates_at_data_eval_mask_rate_and_trains_at_mask_rate():
  """data.eval_mask_rate (Wettig et al.'s 40% in training, BERT's 15% scored): the evaluation
  corrupter is the masker of eval_mask_rate with masking.EVAL_SEED, the train corrupter keeps
  mask_rate; unset, evaluation masks at mask_rate as before."""
  tok = types.SimpleNamespace(mask_id=3, first_ordinary_id=4, vocab_size=50)
  ids = np.random.default_rng(1).integers(4, 50, (1, 4000)).astype(np.int32)
  batch = {"targets": ids, "targets_segmentation": np.ones_like(ids),
           "targets_position": np.arange(4000, dtype=np.int32)[None]}
  mlm = tasks.get("mlm")

  def direct(rate, seed):
    return masking.Masker(rate=rate, token_rate=0.8, random_rate=0.1, mask_id=3,
                          first_ordinary_id=4, vocab_size=50, seed=seed)(batch, 0)

  both = DataConfig(text_key="en", mask_rate=0.4, eval_mask_rate=0.15)
  evaluated = mlm.eval_corrupter(both, tok)(batch, 0)
  assert np.array_equal(evaluated["targets"], direct(0.15, masking.EVAL_SEED)["targets"])
  assert np.array_equal(mlm.eval_corrupter(DataConfig(text_key="en", eval_mask_rate=0.15), tok)(
      batch, 0)["targets"], evaluated["targets"])  # the scored pieces whatever the train rate
  share = (evaluated["targets"] != 0).mean()
  assert abs(share - 0.15) < 6 * np.sqrt(0.15 * 0.85 / 4000)
  trained = mlm.corrupter(both, tok, seed=5)(batch, 0)
  assert np.array_equal(trained["targets"], direct(0.4, 5)["targets"])
  unset = DataConfig(text_key="en", mask_rate=0.4)
  assert np.array_equal(mlm.eval_corrupter(unset, tok)(batch, 0)["targets"],
                        direct(0.4, masking.EVAL_SEED)["targets"])
  with pytest.raises(ValueError, match=r"^config key data.eval_mask_rate: expected a number in "
                     r"\[0, 1\], or None"):
    validate_data_config(DataConfig(text_key="en", eval_mask_rate=1.5))


def test_the_data_layers_check_is_the_tasks():
  """tfm/data asks the task it is handed whether data.text_key fits (check_data)."""
  pairs, text = DataConfig(), DataConfig(text_key="en")
  tasks.get("translate").check_data(pairs)
  tasks.get("lm").check_data(text)
  with pytest.raises(ValueError, match=r"^config keys task='mlm' and data.text_key=None: mlm "
                     r"needs the one text of an example named"):
    tasks.get("mlm").check_data(pairs)
  with pytest.raises(ValueError, match=r"^config keys task='translate' and data.text_key='en': "):
    tasks.get("translate").check_data(text)


def test_translations_refusal_names_the_registrys_monolingual_tasks(monkeypatch):
  """The translate task's refusal of data.text_key suggests every monolingual task registered, a
  new one too."""
  new = type("Summary", (tasks.Task,), {"name": "summary", "architecture": "encoder_decoder"})()
  monkeypatch.setattr(tasks, "ALL", tasks.ALL + (new,))
  with pytest.raises(ValueError, match=r"or set task to 'lm', 'mlm', 'span' or 'summary'$"):
    tasks.get("translate").check_text_key("en")


QUICKSTARTS = {"translate": "configs/quickstart.py", "lm": "configs/lm_quickstart.py",
               "mlm": "configs/mlm_quickstart.py", "span": "configs/span_quickstart.py"}
# the data keys one task alone reads, a value away from the default, and that task
OWN_KEYS = [("mask_rate", 0.3, "mlm"), ("mask_token_rate", 0.5, "mlm"),
            ("mask_random_rate", 0.2, "mlm"), ("eval_mask_rate", 0.15, "mlm"),
            ("noise_density", 0.3, "span"), ("mean_noise_span_length", 2.0, "span")]


@pytest.mark.parametrize("key,value,owner", OWN_KEYS)
def test_a_key_one_task_reads_is_refused_by_the_others_in_one_line(key, value, owner):
  """data.mask_rate on a translation run (or data.noise_density on an lm run) would be ignored
  without a word: every other task refuses the key away from its default, the owner takes it."""
  assert set(QUICKSTARTS) == set(tasks.NAMES)
  for name, path in QUICKSTARTS.items():
    if name == owner:
      assert getattr(load_config(path, [f"data.{key}={value}"]).data, key) == value
      continue
    default = getattr(DataConfig(), key)
    with pytest.raises(ValueError, match=rf"^config keys task='{name}' and data.{key}={value}: "
                                         rf"only task '{owner}' reads data.{key}; task '{name}' "
                                         rf"would ignore it; leave it at {default}$"):
      load_config(path, [f"data.{key}={value}"])
    assert getattr(load_config(path, [f"data.{key}={default}"]).data, key) == default
