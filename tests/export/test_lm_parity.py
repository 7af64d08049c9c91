"""`tfm export` of language models end to end with the real libraries: tiny lm and mlm runs
trained on the fake corpus, exported, loaded by transformers (offline) and, for the causal ones,
converted by CTranslate2; logits, greedy continuations and masked-piece predictions against
tfm's (tfm/export/lm_parity.py).

Needs the export-check extra (torch, transformers, ctranslate2): skipped where it is missing, a
failure under CI (TFM_CI=1). Long tier: it trains four runs and imports torch.
"""

import pytest

from tests.integration.conftest import _experiment, corpus, run_train  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.long

LM = ["task=lm", "model.architecture=decoder_only", "model.num_encoder_layers=0",
      "model.num_decoder_layers=2", "data.text_key=en", "model.norm=pre", "model.max_length=64"]
MLM = ["task=mlm", "model.architecture=encoder_only", "model.num_decoder_layers=0",
       "model.num_encoder_layers=2", "data.text_key=en", "model.positions=learned",
       "model.max_length=32", "model.ffn=gelu", "model.embedding_norm=True", "model.mlm_head=True",
       "model.token_types=2", "model.norm_epsilon=1e-12"]
KINDS = {
    "GPT2LMHeadModel": LM + ["model.positions=learned", "model.ffn=gelu"],
    "LlamaForCausalLM": LM + ["model.positions=rope", "model.norm_kind=rms", "model.ffn=swiglu",
                              "model.use_bias=False", "model.num_kv_heads=1"],
    "BertForMaskedLM": MLM + ["model.norm=post"],
    # its head's GELU is the exact one, fixed in transformers: model.gelu=erf, or refused
    "RobertaPreLayerNormForMaskedLM": MLM + ["model.norm=pre", "model.gelu=erf"],
}
NEW = 12  # new tokens a greedy continuation


@pytest.fixture(scope="module", params=list(KINDS))
def exported(request, corpus, tmp_path_factory):  # noqa: F811  pylint: disable=redefined-outer-name
  from tfm import cli  # pylint: disable=import-outside-toplevel
  name = request.param
  root = tmp_path_factory.mktemp(name)
  config = _experiment(corpus)(*KINDS[name], "train.steps=30", "train.checkpoint_every=30",
                               "train.average_checkpoints=1", "train.learning_rate=2.0")
  run_train(config, root / "run")
  ct2 = ["--ct2", str(root / "ct2")] if "Causal" in name or "GPT2" in name else []
  assert cli.main(["tfm", "export", f"--workdir={root / 'run'}", f"--out={root / 'hf'}",
                   *ct2]) == 0
  return name, root


def test_the_class_computes_tfm_logits_and_predictions(libraries, exported, monkeypatch):
  torch, transformers, _ = libraries
  from tfm.eval.restore import load_trained  # pylint: disable=import-outside-toplevel
  from tfm.export import lm_parity  # pylint: disable=import-outside-toplevel
  name, root = exported
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  model = getattr(transformers, name).from_pretrained(root / "hf").eval()
  t = load_trained(str(root / "run"))
  rows = lm_parity.dev_rows(t, most=16)
  found = lm_parity.logits(t, model, torch, rows)
  assert found["largest_logit_difference"] < 1e-4, found
  assert found["largest_logit"] > 1.0 and found["positions"] > 200, found
  if t.config.task == "mlm":
    assert found["masked_pieces"] > 10
    assert found["masked_argmax_identical"] == found["masked_pieces"], found
  else:
    prompts = lm_parity.prompts(t, 8, 6) + [[]]  # an empty prompt: a text from the start
    ours, _ = lm_parity.tfm_greedy(t, prompts, NEW)
    assert lm_parity.transformers_greedy(model, torch, prompts, NEW) == ours


def test_ctranslate2_generates_as_tfm(libraries, exported):
  _, _, ctranslate2 = libraries
  from tfm.eval.restore import load_trained  # pylint: disable=import-outside-toplevel
  from tfm.export import lm_parity  # pylint: disable=import-outside-toplevel
  name, root = exported
  if not (root / "ct2").exists():
    pytest.skip(f"{name}: no CTranslate2 counterpart (refused by tfm export --ct2)")
  t = load_trained(str(root / "run"))
  prompts = lm_parity.prompts(t, 8, 6) + [[]]
  ours, _ = lm_parity.tfm_greedy(t, prompts, NEW)
  theirs, _ = lm_parity.ct2_greedy(ctranslate2, str(root / "ct2"), t, prompts, NEW)
  assert theirs == ours
  assert any(len(x) == NEW and x[-1] != 1 for x in ours)  # a continuation cut at the limit


def test_auto_tokenizer_encodes_as_tfm(libraries, exported, monkeypatch):
  """AutoTokenizer on the export: SentencePiece's ids (tfm's encode less its EOS) for dev texts
  and for texts quoting special pieces, odd spacing and unknown characters; no token added."""
  _, transformers, _ = libraries
  from tfm.data.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
  name, root = exported
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  ours = Tokenizer.load(root / "hf" / "spiece.model")
  theirs = transformers.AutoTokenizer.from_pretrained(root / "hf")
  assert len(theirs) == ours.vocab_size, name
  texts = ["In the beginning </s> God", "a <unk> b <pad> c", "Zürich — «» ☃ 😀 日本語",
           "  two  spaces\tand a tab ", "", "ﬁne 1,234.5"]
  for text in texts:
    assert theirs(text)["input_ids"] == ours.encode(text)[:-1], text
  if "MaskedLM" in name:
    masked = theirs("a <mask> b")["input_ids"]
    assert theirs.mask_token_id == 3 and 3 in masked and masked == ours.encode("a <mask> b")[:-1]
