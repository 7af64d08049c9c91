"""Table 3 in the paper's regime, on the offline Bible corpus (English WEB -> Spanish 1909): widths / 4.

The third protocol (docs/table3.md). Every row is the paper's row (configs/table3.py) with its
widths divided by 4 (d_model, d_ff, d_k, d_v) and its depth by 2 (N), every ratio to base kept as
in configs/table3_mini.py (widths / 8). Base becomes N=3, d_model=128, d_ff=512, h=8, d_k=d_v=16
(1.6M parameters); A4 has 32 heads of d_k 4, big d_model 256 with 16 heads.

  --config=configs/table3_v3.py          every row (tfm sweep, tfm params)
  --config=configs/table3_v3.py:C5       one row
  python3 experiments/gpu_queue.py      the table on a GPU, with the other jobs that wait for one
                                         (docs/gpu.md; experiments/gpu/table3.py: alone)

The protocol, fixed before any run; no row is tuned on its own:
  * Widths / 4, so the A and B rows' d_k runs 4-128 (16 at base) instead of widths / 8's 2-64,
    and the C rows' widths leave the smallest sizes, where width alone decided widths / 8's rows.
  * Length by epochs, as the paper: base 6000 steps of 4096 tokens a side, about 19 epochs of the
    29,092 training verses (the paper's base: about 19 epochs of WMT14 by configs/table3_mini.py's
    estimate); big 3x base's steps, as the paper trained big (300K steps against 100K); every other
    row as base. Warmup 400 steps, as in configs/table3_mini.py.
  * Learning rate: the largest scale at which base still trains stably at twice the rate (the rule
    of configs/table3_mini.py), measured again on base at this width: LR_SCALE = 0.5 (peak
    (128 x 400)^-0.5 x 0.5 = 2.2e-3 at base), with base at scale 1.0 as the twice-the-rate check:
    600 steps (1.5x the warmup) without a spike or a non-finite step, loss falling at every log
    (experiments/results/table3_v3_pilot); experiments/gpu/table3.py runs it on to 2000 steps.
  * Dev perplexity on all 953 dev verses every 250 steps (each run's dev curve: where a row
    crosses base), tokenized BLEU and sacreBLEU once at the end on the first 200; 2 seeds a row.
  * Float32 parameters and activations. On GPUs every run's products are TF32
    (model.matmul_precision=tensorfloat32) by cuBLAS, XLA's flags
    --xla_gpu_enable_triton_gemm=false --xla_gpu_experimental_enable_fusion_autotuner=false:
    candidate c of the kernel probe (experiments/gpu/kernels.py), chosen by its rule on an H200
    for all 40 runs: 5.0 ms a base step against 11.7 ms in full float32 with Triton's products,
    train loss at steps 250 and 500 within 0.003 of full float32's, where the rule allowed half
    the seeds' spread, 0.020 and 0.011 (experiments/results/gpu/2026-11-27_h200_kernels).
    experiments/gpu_queue.py and experiments/gpu/table3.py set both; a run's precision is in its
    fingerprint. On a CPU the products are float32 whatever the key says.
"""

from configs import table3, table3_mini

WIDTH, DEPTH = 4, 2  # paper / v3
STEPS, WARMUP, LR_SCALE = 6000, 400, 0.5  # the protocol above
BIG_LENGTH = 3  # big trains 3x base's steps, as in the paper
ROWS = table3.ROWS


def get_config(row=None):
  steps = STEPS * (BIG_LENGTH if row == "big" else 1)
  c = table3_mini.protocol(row, width=WIDTH, depth=DEPTH, steps=steps, warmup=WARMUP,
                           lr_scale=LR_SCALE)
  c.data.cache = True  # token ids from the token cache: the same batches, no tokenizing per epoch
  return c
