"""Which config changes a resume accepts (tfm/train/workdir.py: incompatible_keys)."""

from tfm.config import load_config
from tfm.train.workdir import incompatible_keys


def test_a_config_written_before_layer_norm_grad_existed_resumes():
  new = load_config("configs/quickstart.py").to_dict()
  old = load_config("configs/quickstart.py").to_dict()
  del old["model"]["layer_norm_grad"]
  assert incompatible_keys(old, new) == []
  autodiff = load_config("configs/quickstart.py", ["model.layer_norm_grad=autodiff"]).to_dict()
  assert incompatible_keys(new, autodiff) == []


def test_a_config_written_before_matmul_precision_existed_resumes_at_the_default_only():
  """A config.json without model.matmul_precision was computed at the platform's default: it
  resumes as "default", and another precision is another computation."""
  old = load_config("configs/quickstart.py").to_dict()
  del old["model"]["matmul_precision"]
  assert incompatible_keys(old, load_config("configs/quickstart.py").to_dict()) == []
  highest = load_config("configs/quickstart.py", ["model.matmul_precision=highest"]).to_dict()
  assert incompatible_keys(old, highest) == ["model.matmul_precision"]


def test_the_model_and_the_data_are_not_resumable():
  new = load_config("configs/quickstart.py").to_dict()
  wider = load_config("configs/quickstart.py", ["model.d_ff=1024"]).to_dict()
  other_data = load_config("configs/quickstart.py", ["data.max_length=64"]).to_dict()
  assert incompatible_keys(new, wider) == ["model.d_ff"]
  assert incompatible_keys(new, other_data) == ["data.max_length"]
  assert incompatible_keys(new, load_config("configs/quickstart.py",
                                            ["train.steps=9", "data.cache=False"]).to_dict()) == []


def test_a_resume_of_another_model_names_the_keys_and_their_values(tmp_path):
  """Workdir.check_config against the config.json a run wrote: one line naming each key that may
  not change, with the saved value and the new one."""
  import json  # pylint: disable=import-outside-toplevel
  import pytest  # pylint: disable=import-outside-toplevel
  from tfm.train.workdir import Workdir  # pylint: disable=import-outside-toplevel
  (tmp_path / "config.json").write_text(json.dumps(load_config("configs/quickstart.py").to_dict()))
  wider = load_config("configs/quickstart.py", ["model.d_ff=1024", "train.steps=9"]).to_dict()
  with Workdir(str(tmp_path)) as held:
    held.check_config(load_config("configs/quickstart.py", ["train.steps=9"]).to_dict())
    with pytest.raises(ValueError, match=r"was trained with another model or data \(model\.d_ff: "
                       r"512 -> 1024\); its checkpoints cannot continue"):
      held.check_config(wider)


def test_the_evaluation_masks_rate_is_resumable_and_the_training_rate_is_not():
  """data.eval_mask_rate changes which dev pieces are scored, not what is trained (a config.json
  written before it existed means None: data.mask_rate); data.mask_rate changes the training."""
  mlm = load_config("configs/mlm_recipes.py:bert").to_dict()
  old = load_config("configs/mlm_recipes.py:bert").to_dict()
  del old["data"]["eval_mask_rate"]
  scored = load_config("configs/mlm_recipes.py:bert", ["data.eval_mask_rate=0.3"]).to_dict()
  assert incompatible_keys(old, scored) == [] and incompatible_keys(mlm, scored) == []
  trained = load_config("configs/mlm_recipes.py:bert", ["data.mask_rate=0.4"]).to_dict()
  assert incompatible_keys(mlm, trained) == ["data.mask_rate"]
