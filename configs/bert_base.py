"""BERT-base (Devlin et al. 2019): an encoder-only masked language model (config.task='mlm'),
110M parameters published, as tfm builds it: 109,514,298 parameters, transformers'
BertForMaskedLM of bert-base-uncased's configuration exactly (tests/model/test_lm_params.py,
component by component).

Architecture (the paper's section 3 and its released bert_config.json): 12 layers, d_model 768,
12 heads of 64, d_ff 3072, GELU, post-norm (the paper's "Add & Norm", LayerNorm epsilon 1e-12), a
learned table of 512 positions, a 30,522-piece vocabulary, biases on every projection, dropout 0.1
on the residuals, the embeddings and the attention weights; and BERT's own parts, each a model.*
key:
  token_types=2      the token-type (segment) table, 2 x 768 (type_vocab_size 2). tfm trains one
                     text a row, no sentence pairs: every token is type 0, and row 1 is kept, as
                     BERT's layout has it, untrained
  embedding_norm     a LayerNorm of the summed embeddings (tokens + positions + type), before
                     their dropout, 2 x 768
  mlm_head           the masked-LM head: a 768 x 768 dense layer with a bias, GELU and a LayerNorm
                     (590,592 + 1,536), then the output projection, tied to the token embedding,
                     plus a 30,522 output bias
Masking is BERT's (data.mask_rate 0.15; of the selected tokens 80% <mask>, 10% a random piece, 10%
unchanged: the data section's defaults).

    tokens 30,522 x 768 + positions 512 x 768 + token types 2 x 768 + embedding LayerNorm 2 x 768
                                                                   23,837,184
    12 layers of 7,087,872                                         85,054,464
    MLM head: transform 590,592 + LayerNorm 1,536 + bias 30,522       622,650
    total                                                         109,514,298

The published total, 109,482,240 (the paper's "110M"), is BERT's encoder with its embeddings and
its pooler (a 768 x 768 dense layer with a bias on the first token, 590,592, for next-sentence
prediction, which tfm does not train) and without the MLM head: 109,514,298 - 622,650 + 590,592.

What tfm does not reproduce: the WordPiece vocabulary (tfm trains a SentencePiece BPE of the same
size, with <mask> at id 3), next-sentence prediction and the segment pairs it needs, BERT's
initialisation (truncated N(0, 0.02)) and its unscaled embeddings (tfm multiplies by sqrt(d_model)).
None changes the count.

GELU: model.gelu's default, 'tanh', the approximation google-research/bert's modeling.py computes;
transformers' bert-base-uncased says hidden_act "gelu", the exact erf form (transformers calls it
that repository's original), which is model.gelu='erf'. Either exports to BertForMaskedLM exactly
(hidden_act "gelu_new" or "gelu"), and neither changes the count; a pre-LN variant (model.norm=
'pre', exported as RobertaPreLayerNormForMaskedLM, whose head's GELU is the exact one) needs 'erf'.

Data: BERT trained on BooksCorpus (800M words, no longer distributed) and English Wikipedia
(2,500M words). Here English Wikipedia alone, TFDS's `wikipedia/20230601.en` (its `text` feature
is one article), a stream of articles cut into rows of 512 tokens.

Optimisation (the paper's appendix A.2): Adam with decoupled weight decay 0.01 (LayerNorms and
biases excluded, as tfm's decay does), (0.9, 0.999), a peak learning rate of 1e-4 after 10,000
warmup steps, 1,000,000 steps of 256 sequences, dropout 0.1, global-norm clipping at 1.0 (the
released optimisation code); no label smoothing. Differences: BERT decays the rate linearly to 0,
tfm's linear_cosine decays along a cosine to 0; BERT trains 90% of its steps on rows of 128 and
the last 10% on 512, this config all of them on 512 (256 x 512 = 131,072 tokens a step); BERT's
adam epsilon 1e-6 is kept.
"""

from tfm.config import default_config

CONTEXT = 512  # BERT's longest input: the learned table's rows and the train rows' length
VOCAB = 30522  # BERT's English uncased WordPiece vocabulary size


def get_config():
  c = default_config()
  c.task = "mlm"
  c.model.update(
      architecture="encoder_only", num_encoder_layers=12, num_decoder_layers=0,
      vocab_size=VOCAB, d_model=768, d_ff=3072, num_heads=12, d_k=64, d_v=64,
      norm="post", norm_epsilon=1e-12,  # BERT's LayerNorm epsilon
      positions="learned", max_length=CONTEXT,
      ffn="gelu", tie_embeddings=True, use_bias=True,
      token_types=2, embedding_norm=True, mlm_head=True,  # BERT's own parts, see above
      dropout_rate=0.1, attention_dropout_rate=0.1,  # BERT's hidden and attention dropout
      dtype="bfloat16")  # compute dtype on accelerators; parameters stay float32
  c.data.update(
      dataset="wikipedia/20230601.en", text_key="text",  # English Wikipedia, see above
      vocab_size=VOCAB, max_length=CONTEXT,
      tokens_per_batch=256 * CONTEXT,  # 131,072 tokens: BERT's 256 sequences of 512
      eval_max_examples=2000)  # dev figures on the first 2,000 held-out articles
  c.train.update(
      optimizer="adamw", adam_b1=0.9, adam_b2=0.999, adam_eps=1e-6, weight_decay=0.01,
      grad_clip_norm=1.0, label_smoothing=0.0,
      schedule="linear_cosine", learning_rate=1e-4, end_learning_rate_fraction=0.0,
      warmup_steps=10_000, steps=1_000_000,
      log_every=100, eval_every=10_000, checkpoint_every=10_000,
      average_checkpoints=1)  # evaluated as trained, not averaged
  c.eval.max_extra_length = 0  # no decoding: the learned table needs exactly the 512 rows
  return c
