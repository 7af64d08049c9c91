"""T5 v1.1 small (Raffel et al. 2020; the released t5-v1_1-small checkpoint's configuration), an
encoder-decoder, as tfm builds it: 76,961,152 parameters, transformers' T5ForConditionalGeneration
of that configuration exactly (tests/model/test_t5_params.py, component by component).

Architecture: 8 encoder and 8 decoder layers, d_model 512, 6 heads of d_kv 64 (the heads are 384
wide together, not d_model: model.d_k and d_v are independent of d_model / num_heads), d_ff 1024;
T5's own parts, each a model.* key:
  norm='pre', norm_kind='rms'   RMS norm at each sub-layer's input (scale only: no mean, no bias),
                                epsilon 1e-6, and a final one closing each stack
  ffn='gated_gelu'              (GELU(x W) * x V) W2, GELU's tanh approximation (T5 v1.1's FFN)
  use_bias=False                no bias anywhere (projections, FFN, norms)
  positions='relative'          T5's bucketed relative bias, 32 buckets up to distance 128: one
                                [32, 6] table a stack, read by every layer's self-attention,
                                bidirectional in the encoder, causal in the decoder; encoder-decoder
                                attention has none
  tie_embeddings=False,         one 32,128 x 512 input table for both stacks ('shared_embedding',
  share_embeddings=True         T5's `shared`), the output projection its own matrix (v1.1's
                                untied lm_head)
  a 32,128-row vocabulary (T5's 32,000 SentencePiece pieces, 100 sentinels, padding to 32,128),
  dropout 0.1 on the residuals, the embeddings, the attention weights and the FFN's hidden layer.

    shared embedding     32,128 x 512                             16,449,536
    encoder              8 x (attention 4 x 512 x 384 + FFN 3 x 512 x 1,024 + 2 norms x 512)
                         + relative table 32 x 6 + final norm 512  18,883,264
    decoder              8 x (2 attentions + FFN + 3 norms) + 32 x 6 + 512   25,178,816
    output projection    512 x 32,128                             16,449,536
    total                                                          76,961,152

What tfm's model computes differently from T5's (none changes the count): tfm multiplies the
embeddings by sqrt(d_model) and the attention logits by 1/sqrt(d_k) (T5 does neither: it folds the
logits' scale into its initialisation), initialises as the rest of tfm does (Glorot-uniform
projections, N(0, 1/d_model) embeddings, N(0, 0.02) relative table), and applies no dropout after
a stack's final norm (T5 does). The vocabulary is a SentencePiece BPE tfm trains on the task's
data at T5's size, not T5's C4 model with its sentinels. tfm has no span-corruption task, T5's
pre-training objective, yet.

Data and optimisation: T5's fine-tuning on WMT English-German (Raffel et al. section 3.1.4 and
appendix: Adafactor, a constant learning rate of 0.001, 2^18 steps of 128 sequences of 512 tokens,
dropout 0.1, no label smoothing; beam 4 and length penalty 0.6 at test, tfm's defaults), here from
randomly initialised parameters, without T5's pre-training.
"""

from tfm.config import default_config

VOCAB = 32128  # T5's vocabulary rows: 32,000 pieces + 100 sentinels, padded to a multiple of 128
CONTEXT = 512  # T5's input and target length


def get_config():
  c = default_config()
  c.model.update(
      architecture="encoder_decoder", num_encoder_layers=8, num_decoder_layers=8,
      vocab_size=VOCAB, d_model=512, d_ff=1024, num_heads=6, d_k=64, d_v=64,
      norm="pre", norm_kind="rms", norm_epsilon=1e-6,  # T5's layer_norm_epsilon
      ffn="gated_gelu", use_bias=False,
      positions="relative", relative_buckets=32, relative_max_distance=128,
      tie_embeddings=False, share_embeddings=True,
      dropout_rate=0.1, attention_dropout_rate=0.1, ffn_dropout_rate=0.1,  # T5's dropout_rate
      dtype="bfloat16")  # compute dtype on accelerators; parameters stay float32
  c.data.update(vocab_size=VOCAB, max_length=CONTEXT,
                tokens_per_batch=128 * CONTEXT)  # 65,536 tokens: T5's 128 sequences of 512
  c.train.update(
      optimizer="adafactor", schedule="constant", learning_rate=1e-3, warmup_steps=0,
      steps=2**18, label_smoothing=0.0,
      eval_every=5000, checkpoint_every=5000,  # T5 kept a checkpoint every 5,000 steps
      average_checkpoints=1)  # T5 reports single checkpoints, not averages
  return c
