"""A CPU-sized Transformer on the offline Bible corpus (English WEB -> Spanish 1909), minutes per run.

Same architecture as the paper (post-LN, ReLU, sinusoids, tied embeddings), scaled down.
"""

from configs import base


def get_config():
  c = base.get_config()
  c.model.update(vocab_size=8000, d_model=128, d_ff=512, num_heads=4, d_k=32, d_v=32,
                 num_encoder_layers=2, num_decoder_layers=2, dropout_rate=0.1, dtype="float32")
  c.data.update(dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",
                vocab_size=8000, max_length=128, tokens_per_batch=2048, eval_max_examples=200)
  c.train.update(steps=1500, warmup_steps=300, learning_rate=2.0, log_every=50, eval_every=250,
                 checkpoint_every=250, keep_checkpoints=5, average_checkpoints=5)
  c.eval.update(bleu_every=750, bleu_examples=100, batch_size=32)
  return c
