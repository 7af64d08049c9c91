"""`tfm attention` on a tiny model's workdir: the PNG's panels, their labels and weights."""

import numpy as np
import pytest

from tests.integration.test_scan_layers import DEPTH
from tfm import cli
from tfm.data.vocabulary import get_tokenizer
from tfm.eval import sentence_attention as sentence_lib
from tfm.eval.restore import load_trained, read_workdir_config
from tfm.experiment import Experiment
from tfm.figures import attention as figure
from tfm.loop import prepare_data
from tfm.train import checkpoint as ckpt_lib

TEXT = "In the beginning God created the heavens and the earth."


@pytest.fixture(scope="module")
def trained(experiment_module, tmp_path_factory):
  """A workdir as `tfm train` leaves one (config.json, the vocabulary, a checkpoint at train.steps)
  of test_scan_layers.py's model (two layers a stack, dropout off), its parameters the initial
  ones: what is tested is the figure of whatever parameters the command restores, not training
  (as test_generate_command.py's lm_workdir)."""
  workdir = tmp_path_factory.mktemp("trained")
  config = experiment_module("train.steps=3", "train.average_checkpoints=1", "eval.beam_size=2",
                             "eval.max_extra_length=5", *DEPTH)
  exp = Experiment(config)
  prepare_data(config, exp.data_source, str(workdir))  # the dataset and vocabulary, as a run's
  ckpt_lib.write_config(workdir, config.to_dict())
  checkpointer = ckpt_lib.Checkpointer(workdir, keep=1, async_save=False)
  checkpointer.save(config.train.steps, exp.init_state())
  checkpointer.wait()
  return str(workdir)


def _spy(monkeypatch, module, name) -> list:
  """Keeps what module.name returns each time `tfm attention` calls it."""
  results, original = [], getattr(module, name)
  monkeypatch.setattr(module, name, lambda *a, **k: results.append(original(*a, **k)) or results[-1])
  return results


@pytest.fixture
def drawn(monkeypatch):
  """The figures `tfm attention` draws."""
  return _spy(monkeypatch, figure, "draw")


def _panels(fig):
  return [ax for ax in fig.axes if ax.images]


def _labels(ticks):
  return [t.get_text() for t in ticks]


@pytest.mark.slow
def test_a_panel_per_head_and_kind_labelled_with_pieces(trained, drawn, tmp_path, capsys):
  out = tmp_path / "attention.png"
  assert cli.main(["tfm", "attention", f"--workdir={trained}", f"--text={TEXT}", f"--out={out}",
                   "--beam_size=1"]) == 0
  assert capsys.readouterr().out.strip() == f"written: {out}"
  assert out.read_bytes().startswith(b"\x89PNG")
  (fig,) = drawn
  panels = _panels(fig)
  assert len(panels) == 3 * 2  # encoder, decoder, cross x 2 heads
  assert [ax.get_title(loc="left") for ax in panels] == ["head 1", "head 2"] * 3
  assert [ax.get_ylabel() for ax in panels[::2]] == [
      "encoder self-attention (layer 2 of 2)", "decoder self-attention (layer 2 of 2)",
      "encoder-decoder attention (layer 2 of 2)"]
  fig.canvas.draw()  # no title runs into the next panel's
  boxes = [ax._left_title.get_window_extent() for ax in panels]  # pylint: disable=protected-access
  assert not any(a.overlaps(b) for a, b in zip(boxes[::2], boxes[1::2]))
  tokenizer = get_tokenizer(read_workdir_config(trained).data, trained)
  source = tokenizer.pieces(tokenizer.encode(TEXT))
  encoder, _, decoder, _, cross, _ = panels
  assert _labels(encoder.get_xticklabels()) == source == _labels(encoder.get_yticklabels())
  assert _labels(cross.get_xticklabels()) == source
  target = _labels(decoder.get_yticklabels())
  assert _labels(decoder.get_xticklabels()) == ["<s>"] + target[:-1]  # the decoder's inputs
  assert _labels(cross.get_yticklabels()) == target and 1 <= len(target) <= len(source) + 5


def test_the_chosen_layer_heads_and_kinds_are_drawn(trained, drawn, monkeypatch, tmp_path):
  computed = _spy(monkeypatch, sentence_lib, "sentence_attention")
  out = tmp_path / "a.png"
  # Greedy, as the panels' test: one search compiled for both (`tfm attention` with the run's own
  # beam search: test_eval_commands.py::test_commands_that_read_a_run_work_on_a_read_only_workdir)
  assert cli.main(["tfm", "attention", f"--workdir={trained}", f"--text={TEXT}", f"--out={out}",
                   "--layer=1", "--heads=2", "--kinds=encoder,cross", "--beam_size=1"]) == 0
  (result,) = computed
  encoder, cross = _panels(drawn[0])
  assert encoder.get_title(loc="left") == "head 2"
  assert encoder.get_ylabel() == "encoder self-attention (layer 1 of 2)"
  assert result.weights["encoder"].shape[:2] == (2, 2)  # [layers, heads, q, k]
  np.testing.assert_array_equal(encoder.images[0].get_array(), result.weights["encoder"][0, 1])
  np.testing.assert_array_equal(cross.images[0].get_array(), result.weights["cross"][0, 1])


@pytest.mark.long  # its parts in the fast tier: tfm convert stacks the parameters bit for bit
# (tests/integration/test_scan_layers.py::test_convert_a_workdir) and a scanned stack sows the
# unrolled one's weights from them (tests/model/test_attention_weights.py::
# test_scanned_and_rematerialised_stacks_sow_the_same_weights)
def test_a_scanned_workdir_draws_the_same_weights(trained, tmp_path):
  scanned = tmp_path / "scanned"
  assert cli.main(["tfm", "convert", f"--workdir={trained}", f"--out={scanned}",
                   "--scan_layers=true"]) == 0
  inputs = np.array([[5, 9, 14, 1], [7, 1, 0, 0]], np.int32)
  targets = np.array([[4, 8, 1], [6, 1, 0]], np.int32)
  weights = []
  for workdir in (trained, str(scanned)):
    t = load_trained(workdir)
    weights.append(t.experiment.attention_weights_fn()(t.params, inputs, targets))
  unrolled, stacked = weights
  for kind in ("encoder", "decoder", "cross"):
    assert stacked[kind].shape == unrolled[kind].shape == (2, 2, 2) + {
        "encoder": (4, 4), "decoder": (3, 3), "cross": (3, 4)}[kind]  # [layers, b, heads, q, k]
    np.testing.assert_allclose(stacked[kind], unrolled[kind], atol=1e-6, err_msg=kind)
