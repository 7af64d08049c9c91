"""GPT-2 small (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"): a
decoder-only language model, 124M parameters, as tfm builds it (config.task='lm').

Architecture (the paper's Table 2 smallest row and its section 2.3, GPT-1's model with the
LayerNorm moved to each sub-block's input and a final LayerNorm after the last block): 12 layers,
d_model 768, 12 heads of 64, d_ff 3072 (4 d_model), GELU, pre-norm (LayerNorm epsilon 1e-5), a
learned table of 1024 positions, a 50,257-piece vocabulary, the token embedding tied to the output
projection, biases on every projection, dropout 0.1 on the residuals, the embeddings and the
attention weights. tfm's count of this model is GPT-2's published 124,439,808 exactly
(`tfm params --config=configs/gpt2_small.py`; docs/lm.md, tests/model/test_lm_params.py).

What tfm does not reproduce: GPT-2's byte-level BPE (tfm trains a SentencePiece BPE of the same
size on the training text), its weight initialisation (N(0, 0.02), residual projections scaled by
1/sqrt(N)) and its unscaled embeddings (tfm multiplies them by sqrt(d_model), section 3.4 of
Vaswani et al.); none of these changes the parameter count.

Data: WebText, GPT-2's corpus, was never released. TFDS's `c4/webtextlike` is the nearest public
one: C4's cleaned Common Crawl pages restricted to the URLs of OpenWebText (the open re-collection
of WebText's Reddit-linked pages); its `text` feature is one page. It is built with Apache Beam
(see TFDS's c4 page). Train batches are a stream of pages cut into rows of 1024 tokens.

Optimisation: GPT-2's paper does not publish it (the learning rate "was manually tuned"). These are
GPT-3's settings for its 125M model of the same shape (Brown et al. 2020, Table 2.1 and appendix
B): AdamW (0.9, 0.95, eps 1e-8), weight decay 0.1 on the matrices, global-norm clipping at 1.0, a
peak learning rate of 6e-4 after a linear warmup over 375M tokens, cosine decay to 10% of it over
260B tokens, 0.5M tokens a step (GPT-2's batch: 512 rows of 1024); no label smoothing. Here: 715
warmup steps (375M / 524,288) and 500,000 steps (262B tokens) decaying to 6e-5 at the end;
GPT-3's batch-size ramp and its last 40B tokens at the floor rate are left out.

`tfm plan` (experiments/results/plan_gpt2/): on a TPU v5e:4x4 the step needs 28.25 GiB a chip and
does not fit (four microbatches do, 11.37 GiB); on a v5e:8x8 it fits whole, 10.32 GiB a chip.
"""

from tfm.config import default_config

CONTEXT = 1024  # GPT-2's context: the learned table's rows and the train rows' length
VOCAB = 50257  # GPT-2's vocabulary size (256 bytes + 50,000 merges + <|endoftext|>)


def get_config():
  c = default_config()
  c.task = "lm"
  c.model.update(
      architecture="decoder_only", num_encoder_layers=0, num_decoder_layers=12,
      vocab_size=VOCAB, d_model=768, d_ff=3072, num_heads=12, d_k=64, d_v=64,
      norm="pre", norm_epsilon=1e-5,  # GPT-2's LayerNorm epsilon
      positions="learned", max_length=CONTEXT,
      ffn="gelu", tie_embeddings=True, use_bias=True,
      dropout_rate=0.1, attention_dropout_rate=0.1,  # GPT-2's resid, embd and attn pdrop
      dtype="bfloat16")  # compute dtype on accelerators; parameters stay float32
  c.data.update(
      dataset="c4/webtextlike", text_key="text",  # WebText's nearest public stand-in, see above
      vocab_size=VOCAB, max_length=CONTEXT,
      tokens_per_batch=512 * CONTEXT,  # 524,288 tokens: GPT-2's 512 rows of 1024
      eval_max_examples=10_000)  # dev perplexity on the first 10,000 validation pages
  c.train.update(
      optimizer="adamw", adam_b1=0.9, adam_b2=0.95, adam_eps=1e-8, weight_decay=0.1,
      grad_clip_norm=1.0, label_smoothing=0.0,
      schedule="linear_cosine", learning_rate=6e-4, end_learning_rate_fraction=0.1,
      warmup_steps=715, steps=500_000,
      log_every=100, eval_every=5000, checkpoint_every=5000,
      average_checkpoints=1)  # a language model is evaluated as trained, not averaged
  # Translation's decode budget (outputs up to input length + 50) does not apply to a language
  # model; at 0 the learned table needs exactly the context's 1024 rows.
  c.eval.max_extra_length = 0
  return c
