"""Trained tfm models written in other libraries' formats: `tfm export` (tfm/commands/export.py).

targets.py picks the transformers class from the config: marian.py (an encoder-decoder as
MarianMTModel; refusals.py: what that class cannot hold), gpt2.py (GPT2LMHeadModel) and llama.py
(LlamaForCausalLM) for language models, bert.py (BertForMaskedLM, RobertaPreLayerNormForMaskedLM)
for masked language models; layout.py holds the parameter layouts they share, spm_tokenizer.py the
language models' tokenizer files, ct2.py the conversion to CTranslate2.
"""
