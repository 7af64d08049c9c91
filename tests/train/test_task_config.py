"""config.task: validated against the architecture, data.text_key and the best metric in one line
each; an older config.json (no task) reads as translate, and a sweep's fingerprints stay."""

import pytest

from tfm import config as config_lib
from tfm.config import Config, build
from tfm.data.config import DataConfig
from tfm.model.config import ModelConfig
from tfm.sweep import publish
from tfm.train.cadence import Cadence
from tfm.train.config import TrainConfig
from tfm.train.workdir import incompatible_keys

DECODER = ModelConfig(architecture="decoder_only", num_encoder_layers=0)
ENCODER = ModelConfig(architecture="encoder_only", num_decoder_layers=0)


@pytest.mark.parametrize("task, model, message", [
    ("lm", ModelConfig(), "config keys task='lm' and model.architecture='encoder_decoder': lm "
                          "needs 'decoder_only'"),
    ("mlm", DECODER, "config keys task='mlm' and model.architecture='decoder_only': mlm needs "
                     "'encoder_only'"),
    ("translate", ENCODER, "config keys task='translate' and model.architecture='encoder_only': "
                           "translate needs 'encoder_decoder'"),
    ("gpt", DECODER, "config key task: expected one of ('translate', 'lm', 'mlm', 'span'), "
                     "got 'gpt'"),
])
def test_a_task_refuses_another_architecture(task, model, message):
  with pytest.raises(ValueError) as error:
    Config(model=model, data=DataConfig(text_key="en"), task=task)
  assert str(error.value) == message


@pytest.mark.parametrize("config, overrides, message", [
    ("configs/lm_quickstart.py", ["model.architecture=encoder_decoder"],
     "config keys task='lm' and model.architecture='encoder_decoder': lm needs 'decoder_only'"),
    ("configs/mlm_quickstart.py", ["model.architecture=encoder_decoder"],
     "config keys task='mlm' and model.architecture='encoder_decoder': mlm needs 'encoder_only'"),
    ("configs/quickstart.py", ["model.architecture=encoder_only"],
     "config keys task='translate' and model.architecture='encoder_only': translate needs "
     "'encoder_decoder'"),
    ("configs/lm_quickstart.py", ["model.architecture=decoders"],
     "config key model.architecture: expected one of ('encoder_decoder', 'decoder_only', "
     "'encoder_only'), got 'decoders'"),
])
def test_a_task_on_another_stack_is_refused_for_that_first(config, overrides, message):
  """The lm config (no encoder layers) with model.architecture=encoder_decoder is refused for its
  task and architecture, as docs/lm.md says, not for num_encoder_layers, the encoder-decoder's
  own check that ran first; an architecture that is no architecture is named as such."""
  with pytest.raises(ValueError) as error:
    config_lib.load_config(config, overrides)
  assert str(error.value) == message


@pytest.mark.parametrize("task, model", [("lm", DECODER), ("mlm", ENCODER)])
def test_a_language_model_needs_its_text_key_and_has_no_dev_bleu(task, model):
  with pytest.raises(ValueError, match=rf"^config keys task='{task}' and data.text_key=None: "
                                       f"{task} reads one text an example"):
    Config(model=model, task=task)
  with pytest.raises(ValueError, match=rf"^config keys task='{task}' and "
                                       r"train.best_metric='dev_bleu': .* has no dev BLEU"):
    Config(model=model, data=DataConfig(text_key="en"), task=task,
           train=TrainConfig(best_metric="dev_bleu"))
  config = Config(model=model, data=DataConfig(text_key="en"), task=task)
  assert not config.translates and Cadence.of(config).bleu_every == 0  # eval.bleu_every ignored
  with_bleu = build({**config.to_dict(), "eval": {"bleu_every": 5}})
  assert with_bleu.task == task and Cadence.of(with_bleu).bleu_every == 0
  assert build(config.to_dict()) == config  # config.json round trip


@pytest.mark.parametrize("task, architecture", [("lm", "decoder_only"), ("mlm", "encoder_only")])
def test_a_language_models_learned_table_covers_its_rows_not_translations(task, architecture):
  # Nothing is decoded past an lm / mlm row: eval.max_extra_length (a translation's extra output
  # tokens, 50 by default) does not lengthen the table (it was required: 64 + 50 = 114 rows).
  layers = dict(num_encoder_layers=0) if task == "lm" else dict(num_decoder_layers=0)
  def config(rows):
    return Config(model=ModelConfig(architecture=architecture, positions="learned", max_length=64,
                                    **layers),
                  data=DataConfig(text_key="en", max_length=rows), task=task)
  assert config(64).model.max_length == 64 and config(64).eval.max_extra_length == 50
  with pytest.raises(ValueError) as error:
    config(65)
  assert str(error.value) == (f"config key model.max_length (64) must be at least data.max_length "
                              f"(65) with learned positions: the table needs a row for every "
                              f"position of a training row (task {task!r})")


def test_translation_reads_pairs_not_a_text_key():
  with pytest.raises(ValueError, match=r"^config keys task='translate' and data.text_key='en': "
                                       "translation reads pairs"):
    Config(data=DataConfig(text_key="en"))


def test_an_older_config_json_reads_as_translate_and_keeps_its_fingerprint(monkeypatch):
  config = build({})
  older = config.to_dict()
  del older["task"]  # config.json as tfm wrote it before the key
  assert build(older).task == "translate" == config_lib.ADDED_LATER["task"]
  assert incompatible_keys(older, config.to_dict()) == []  # a resume of an older run
  lm = Config(model=DECODER, data=DataConfig(text_key="en"), task="lm")
  assert incompatible_keys(lm.to_dict(), {**lm.to_dict(), "task": "mlm"}) == ["task"]
  now = publish.fingerprint(config, "v", 200)
  # The fingerprint of the same run before `task` existed: Config.to_dict without it.
  to_dict = Config.to_dict
  monkeypatch.setattr(Config, "to_dict", lambda self: {
      k: v for k, v in to_dict(self).items() if k != "task"})
  assert publish.fingerprint(config, "v", 200) == now
  monkeypatch.undo()
  assert publish.fingerprint(lm, "v", 200) != publish.fingerprint(
      Config(model=DECODER, data=DataConfig(text_key="en"), task="lm",
             train=TrainConfig(seed=1)), "v", 200)


def test_the_command_line_sets_the_task():
  config = config_lib.load_config("configs/quickstart.py", [
      "task=lm", "model.architecture=decoder_only", "model.num_encoder_layers=0",
      "data.text_key=en"])
  assert config.task == "lm" and config.to_dict()["task"] == "lm"
  with pytest.raises(ValueError, match=r"unknown config section\(s\) \['tsak'\]"):
    build({"tsak": "lm"})


def test_none_on_the_command_line_is_none_for_an_optional_key():
  # ml_collections parses an override by the type of the value it replaces: over the lm config's
  # text_key 'en' it gave the string 'None', which the pipeline then read as a TFDS feature.
  with pytest.raises(ValueError, match=r"^config keys task='lm' and data.text_key=None"):
    config_lib.load_config("configs/lm_quickstart.py", ["data.text_key=None"])
  pairs = config_lib.load_config("configs/lm_quickstart.py", [
      "data.text_key=None", "task=translate", "model.architecture=encoder_decoder",
      "model.num_encoder_layers=2", "train.init_from=None"])
  assert pairs.data.text_key is None and pairs.train.init_from is None
  with pytest.raises(ValueError, match=r"^config key model.norm: expected .*, got 'None'"):
    config_lib.load_config("configs/quickstart.py", ["model.norm=None"])  # not an Optional key


def test_none_on_the_command_line_over_a_number_is_none():
  # ml_collections parses an override by the type of the value it replaces: over an int or float
  # (eval_max_examples' 200, num_kv_heads' int placeholder, weight_decay's float) 'None' was an
  # invalid literal. The last override of a key wins, as for any flag.
  keys = ["data.eval_max_examples", "model.num_kv_heads", "train.weight_decay"]
  config = config_lib.load_config("configs/quickstart.py", [f"{k}=None" for k in keys])
  assert (config.data.eval_max_examples, config.model.num_kv_heads,
          config.train.weight_decay) == (None, None, None)
  later = config_lib.load_config("configs/quickstart.py", ["data.eval_max_examples=None",
                                                           "data.eval_max_examples=7"])
  assert later.data.eval_max_examples == 7
  with pytest.raises(ValueError, match=r"model.d_model"):
    config_lib.load_config("configs/quickstart.py", ["model.d_model=None"])  # not an Optional key


def test_a_none_override_reaches_a_sweeps_runs():
  # tfm sweep passes the command line's overrides (config_flags.get_override_values) to its runs.
  from absl import flags  # pylint: disable=import-outside-toplevel
  from tfm.commands import sweep  # pylint: disable=import-outside-toplevel
  argv = ["tfm sweep", "--config=configs/quickstart.py", "--config.data.eval_max_examples=None",
          "--config.model.d_model=32"]
  fv = flags.FlagValues()
  config_lib.define_config_flag(fv, argv)
  config_lib.parse_flags(fv, argv)
  assert fv["config"].value.data.eval_max_examples is None
  overrides = sweep._command_overrides(fv)  # pylint: disable=protected-access
  assert sorted(overrides) == ["data.eval_max_examples=None", "model.d_model=32"]
  assert config_lib.load_config("configs/quickstart.py", overrides).data.eval_max_examples is None
