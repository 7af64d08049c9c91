"""Tasks lm and mlm: the train stream (the shuffled examples concatenated and cut into rows), the
eval stream at any context length, per-word counts, and bit-exact resume (inline, in a batch
process, with and without the token cache, on each of two hosts), each checked against the
texts encoded directly."""

import grain
import numpy as np
import pytest

import tfm_data_testlib as testlib
from tfm import tasks
from tfm.data import pipeline, sources
from tfm.data.batch_process import BatchProcess


def _ok_texts(lines):
  """The lines the pipeline keeps (non-empty UTF-8), decoded: computed here, not by tfm."""
  out = []
  for line in lines:
    try:
      text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
      continue
    if text:
      out.append(text)
  return out


def _stream_of(texts, tok):
  return np.concatenate([np.asarray(tok.encode(t), np.int32) for t in texts])


def _tokens(batches):
  """The real tokens of stream batches, row after row, and checks of their layout."""
  parts = []
  for b in batches:
    seg, pos = b["targets_segmentation"], b["targets_position"]
    real = seg.reshape(-1) == 1
    n = int(real.sum())
    assert real[:n].all() and not real[n:].any()  # padding only after the last token
    length = seg.shape[1]
    assert np.array_equal(pos.reshape(-1)[:n], np.arange(n) % length)
    assert not pos.reshape(-1)[n:].any() and not b["targets"].reshape(-1)[n:].any()
    parts.append(b["targets"].reshape(-1)[:n])
  return np.concatenate(parts)


@pytest.mark.parametrize("hosts", [1, 2])
def test_train_rows_are_the_shuffled_examples_concatenated(lm_env, hosts):
  """One epoch of task lm on each host: the rows' tokens, in order, are the host's lines
  (line h + hosts * i) in grain's shuffle order (grain computes it here), the kept ones each
  encoded with EOS, concatenated; every row but the last batch's is full; inputs are zero; the
  70-word lines (longer than a row) are not dropped; the hosts' lines make the whole split."""
  cfg, tok, lines = lm_env["cfg"], lm_env["lm"], lm_env["lines"]["train"]
  read = 0
  for host in range(hosts):
    it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1, task=tasks.get("lm"),
                                 process_index=host, process_count=hosts)
    try:
      batches = list(it)
      stats = it.stats()
    finally:
      it.close()
    mine = lines[host::hosts]
    order = list(grain.MapDataset.range(len(mine)).shuffle(seed=cfg.shuffle_seed))
    want = _stream_of(_ok_texts([mine[i] for i in order]), tok)
    assert np.array_equal(_tokens(batches), want)
    rows = 4 // hosts
    assert all(b["targets"].shape == (rows, 32) for b in batches)
    assert all(not b[k].any() for b in batches for k in ("inputs", "inputs_segmentation"))
    assert len(batches) == -(-len(want) // (rows * 32))
    assert stats["examples_read"] == len(mine)
    assert stats["examples_kept"] == len(_ok_texts(mine))
    assert "inputs_efficiency" not in stats  # no inputs to fill, not an efficiency of 0
    slots = sum(b["targets"].size for b in batches)
    assert stats["targets_efficiency"] == pytest.approx(len(want) / slots)
    read += stats["examples_read"]
  assert read == len(lines)
  assert max(len(tok.encode(t)) for t in _ok_texts(lines)) > cfg.max_length


@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("length", [16, 40])
def test_eval_rows_hold_every_token_once(lm_env, hosts, length):
  """The dev split at context lengths 16 and 40, on one host and on two: the global batches
  (host 0's rows, then host 1's) hold the dev lines in order, each token once; rows =
  tokens_per_batch // length rounded up to a multiple of the hosts; every host has as many
  batches."""
  cfg, tok = lm_env["cfg"], lm_env["lm"]
  source = sources.DataSource.of(cfg)
  per_host = [pipeline.eval_batches(cfg, source, tok, "dev", process_index=h, process_count=hosts,
                                    task=tasks.get("lm"), context_length=length) for h in range(hosts)]
  rows = max(1, -(-(128 // length) // hosts)) * hosts
  assert len({len(b) for b in per_host}) == 1
  merged = [{k: np.concatenate([host[i][k] for host in per_host]) for k in host0}
            for i, host0 in enumerate(per_host[0])]
  assert all(b["targets"].shape == (rows, length) for b in merged)
  want = _stream_of(_ok_texts(lm_env["lines"]["dev"]), tok)
  assert np.array_equal(_tokens(merged), want)
  assert len(merged) == -(-len(want) // (rows * length))


def test_eval_word_count_is_the_dev_lines_words(lm_env):
  cfg = lm_env["cfg"]
  want = sum(len(line.split()) for line in lm_env["lines"]["dev"] if line.strip())
  assert pipeline.eval_word_count(cfg, sources.DataSource.of(cfg), "dev", task=tasks.get("lm")) == want
  assert pipeline.eval_word_count(cfg.replace(eval_max_examples=5), sources.DataSource.of(cfg),
                                  "dev", task=tasks.get("mlm")) == sum(
      len(line.split()) for line in lm_env["lines"]["dev"][:5])


def _take(it, n):
  out = []
  for _ in range(n):
    out.append(next(it))
  return out


@pytest.mark.parametrize("task,cache,hosts", [("lm", False, 1), ("lm", True, 2),
                                              ("mlm", False, 2), ("mlm", True, 1)])
def test_resume_continues_bit_exactly(lm_env, task, cache, hosts):
  """Each host's iterator: the state after k batches (the first k >= 2 that ends in the middle of
  an example), set on a fresh iterator, gives the next 4 batches again, masks included; the token
  cache gives the same batches as reading the files."""
  cfg = lm_env["cfg"].replace(cache=cache)
  tok, source = lm_env[task], sources.DataSource.of(cfg)
  for host in range(hosts):
    keywords = dict(process_index=host, process_count=hosts, task=tasks.get(task))
    first = pipeline.train_iterator(cfg, source, tok, **keywords)
    second = pipeline.train_iterator(cfg, source, tok, **keywords)
    try:
      head = _take(first, 2)
      while first.get_state()["batcher"]["offset"] == 0:
        head += _take(first, 1)
      state = first.get_state()
      tail = _take(first, 4)
      second.set_state(state)
      assert testlib.same_batches(_take(second, 4), tail)
    finally:
      first.close()
      second.close()
    assert state["batcher"]["batches"] == len(head) <= 6
    other = pipeline.train_iterator(cfg.replace(cache=not cache), source, tok, **keywords)
    try:
      assert testlib.same_batches(_take(other, len(head) + 4), head + tail)
    finally:
      other.close()


def test_mlm_targets_efficiency_counts_the_masked_pieces(lm_env):
  """An mlm batch keeps every piece's segmentation and zeroes the targets it does not score: its
  targets efficiency is the masked pieces over the slots (about data.mask_rate of the packed
  pieces), not 1.0; its inputs efficiency the pieces over the slots."""
  cfg, tok = lm_env["cfg"], lm_env["mlm"]
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, task=tasks.get("mlm"))
  try:
    batches = _take(it, 6)
    stats = it.stats()
  finally:
    it.close()
  slots = sum(b["targets"].size for b in batches)
  masked = sum(int(((b["targets"] != 0) & (b["targets_segmentation"] != 0)).sum()) for b in batches)
  pieces = sum(int(b["inputs_segmentation"].astype(bool).sum()) for b in batches)
  assert stats["targets_efficiency"] == pytest.approx(masked / slots)
  assert stats["inputs_efficiency"] == pytest.approx(pieces / slots)
  assert 0.05 < stats["targets_efficiency"] < 0.3 < 0.9 < stats["inputs_efficiency"]


def test_a_batch_process_resumes_the_inline_stream(lm_env):
  """train.input=process: a BatchProcess of task mlm set to the inline iterator's state after 2
  batches gives its batches 3 and 4, masks included."""
  cfg, tok = lm_env["cfg"], lm_env["mlm"]
  inline = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, task=tasks.get("mlm"))
  try:
    _take(inline, 2)
    state = inline.get_state()
    want = _take(inline, 2)
  finally:
    inline.close()
  process = BatchProcess(cfg, sources.DataSource.of(cfg), tok, task=tasks.get("mlm"))
  try:
    process.set_state(state)
    assert testlib.same_batches(_take(process, 2), want)
  finally:
    process.close()


def test_a_mixture_of_monolingual_sources_streams_both(lm_env, tmp_path):
  """data.mixture of two monolingual text sources (the second of its own text key, 'xx'): the
  stream splits at EOS into the sources' lines, both sources present; a resume mid-example
  continues exactly; a source of pairs in a monolingual mixture is refused in one line."""
  cfg, tok = lm_env["cfg"], lm_env["lm"]
  other_lines = [f"river {w} stone {i}" for i in range(50) for w in ("light", "one", "all")]
  (tmp_path / "other.xx").write_text("\n".join(other_lines) + "\n")
  mixed = cfg.replace(mixture=({"name": "a", "weight": 1},
                               {"name": "b", "weight": 1, "text_key": "xx",
                                "train_files": str(tmp_path / "other.{lang}")}))
  it = pipeline.train_iterator(mixed, sources.DataSource.of(mixed), tok, num_epochs=1, task=tasks.get("lm"))
  try:
    tokens = _tokens(list(it))
    counts = it.stats()
  finally:
    it.close()
  ends = np.flatnonzero(tokens == 1)
  examples = {tuple(x) for x in np.split(tokens, ends + 1) if len(x)}
  a = {tuple(tok.encode(t)) for t in _ok_texts(lm_env["lines"]["train"])}
  b = {tuple(tok.encode(t)) for t in other_lines}
  assert examples <= a | b and examples & a and examples & b
  assert counts["from_a"] > 0 and counts["from_b"] > 0
  source = sources.DataSource.of(mixed)
  first = pipeline.train_iterator(mixed, source, tok, task=tasks.get("lm"))
  second = pipeline.train_iterator(mixed, source, tok, task=tasks.get("lm"))
  try:  # resumed mid-example, the mixture's draws included
    _take(first, 2)
    while first.get_state()["batcher"]["offset"] == 0:
      _take(first, 1)
    second.set_state(first.get_state())
    assert testlib.same_batches(_take(second, 3), _take(first, 3))
  finally:
    first.close()
    second.close()
  with pytest.raises(ValueError, match=r"^config key data.mixture\[1\].text_key: expected a text "
                     r"key where data.text_key is set .*, got None$"):
    cfg.replace(mixture=({"weight": 1}, {"weight": 1, "name": "b", "text_key": None}))


def test_task_and_text_key_mismatches_are_refused_in_one_line(lm_env):
  cfg, tok = lm_env["cfg"], lm_env["lm"]
  source = sources.DataSource.of(cfg)
  with pytest.raises(ValueError, match=r"^config key data.packing: expected True with "
                     r"data.text_key='en' \(monolingual text.*, got False$"):
    cfg.replace(packing=False)
  with pytest.raises(ValueError, match=r"^config keys task='translate' and data.text_key='en': "
                     r"translation reads pairs \(data.text_key=None\), or set task to 'lm', "
                     r"'mlm' or 'span'$"):
    pipeline.train_iterator(cfg, source, tok, task=tasks.get("translate"))
  with pytest.raises(ValueError, match=r"^data.text_key='en' with no task given: the examples are "
                     r"read as translation pairs; pass the run's task"):
    pipeline.train_iterator(cfg, source, tok)
  with pytest.raises(ValueError, match=r"^config keys task='lm' and data.text_key=None: lm needs "
                     r"the one text of an example named \(e.g. data.text_key='en'\)$"):
    pipeline.eval_batches(cfg.replace(text_key=None), source, tok, task=tasks.get("lm"))
  with pytest.raises(ValueError, match=r"config key task: expected"):
    pipeline.eval_batches(cfg, source, tok, task=tasks.get("gpt"))


@pytest.mark.long
def test_worker_processes_give_the_same_masked_stream(lm_env):
  """data.num_workers=2 (worker processes tokenize): the mlm batches of num_workers=0, also after
  a resume."""
  cfg, tok = lm_env["cfg"], lm_env["mlm"]
  source = sources.DataSource.of(cfg)
  inline = pipeline.train_iterator(cfg, source, tok, task=tasks.get("mlm"))
  try:
    want = _take(inline, 6)
  finally:
    inline.close()
  workers = cfg.replace(num_workers=2)
  it = pipeline.train_iterator(workers, source, tok, task=tasks.get("mlm"))
  try:
    got = _take(it, 3)
    state = it.get_state()
  finally:
    it.close()
  resumed = pipeline.train_iterator(workers, source, tok, task=tasks.get("mlm"))
  try:
    resumed.set_state(state)
    got += _take(resumed, 3)
  finally:
    resumed.close()
  assert testlib.same_batches(got, want)


def test_eval_max_examples_counts_texts_and_a_set_without_any_is_refused(lm_env, tmp_path):
  """data.eval_max_examples counts the texts an evaluation scores, not the lines: a dev file whose
  first three lines are blank or not UTF-8 has its fourth line as its first text (they counted,
  and 'the first 3 examples' scored none). A dev file with no text at all leaves no token to
  score: refused when the batches are built (the loop builds them before its first step), not a
  TypeError at the first evaluation."""
  (tmp_path / "dev.en").write_bytes(b"\n\xff\xfe\n\nsome words here\nmore words\n")
  cfg = lm_env["cfg"].replace(dev_files=str(tmp_path / "dev.{lang}"), eval_max_examples=1)
  counts = {}
  (batch,) = pipeline.eval_batches(cfg, sources.DataSource.of(cfg), lm_env["lm"], "dev",
                                   task=tasks.get("lm"), counts=counts)
  assert int(batch["targets_segmentation"].sum()) == len(lm_env["lm"].encode("some words here"))
  assert counts == {"texts": 1, "skipped": 3}
  assert pipeline.eval_word_count(cfg, sources.DataSource.of(cfg), "dev") == 3
  (tmp_path / "dev.en").write_bytes(b"\n\xff\xfe\n\n")
  with pytest.raises(ValueError, match=r"^evaluation set 'dev': its 3 examples hold no text, each "
                     r"empty or not UTF-8; expected at least one text to score$"):
    pipeline.eval_batches(cfg, sources.DataSource.of(cfg), lm_env["lm"], "dev",
                          task=tasks.get("lm"))


def test_mlm_eval_masks_do_not_depend_on_the_rows(lm_env):
  """The dev stream's masks are a function of the stream alone: 6 rows a batch (one device) and 8
  (rounded up for 8 batch shards, or for 2 hosts of 7 rows) mask the same tokens the same way, so
  a model's dev figure is the same on any hardware."""
  cfg, tok = lm_env["cfg"].replace(tokens_per_batch=6 * 32), lm_env["mlm"]
  source = sources.DataSource.of(cfg)

  def flat(batches):
    real = np.concatenate([b["inputs_segmentation"].reshape(-1) for b in batches]) == 1
    return [np.concatenate([b[k].reshape(-1) for b in batches])[real]
            for k in ("inputs", "targets")]

  one = pipeline.eval_batches(cfg, source, tok, "dev", task=tasks.get("mlm"))
  eight = pipeline.eval_batches(cfg, source, tok, "dev", task=tasks.get("mlm"), row_multiple=8)
  two_hosts = [pipeline.eval_batches(cfg.replace(tokens_per_batch=7 * 32), source, tok, "dev",
                                     process_index=h, process_count=2, task=tasks.get("mlm"))
               for h in (0, 1)]
  assert one[0]["inputs"].shape == (6, 32) and eight[0]["inputs"].shape == (8, 32)
  merged = [{k: np.concatenate([host[i][k] for host in two_hosts]) for k in host0}
            for i, host0 in enumerate(two_hosts[0])]
  want_inputs, want_targets = flat(one)
  stream = _stream_of(_ok_texts(lm_env["lines"]["dev"]), tok)
  selected = want_targets != 0
  assert np.array_equal(want_targets[selected], stream[selected])  # the originals, where masked
  assert np.array_equal(want_inputs[~selected], stream[~selected])  # the rest unchanged
  for other in (eight, merged):
    inputs, targets = flat(other)
    assert np.array_equal(inputs, want_inputs) and np.array_equal(targets, want_targets)


def test_an_mlm_dev_set_with_no_piece_masked_is_refused(lm_env):
  """data.mask_rate=0: every piece of the mlm dev set is there but none is masked, so none is a
  target (the loss weighs targets != 0); DevLoss printed tokens 0 and perplexity 1.0. At the
  default rate the same set is scored."""
  import jax  # pylint: disable=import-outside-toplevel
  from tfm.eval.dev_loss import DevLoss  # pylint: disable=import-outside-toplevel
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  cfg, tok = lm_env["cfg"].replace(eval_max_examples=4), lm_env["mlm"]
  masked = pipeline.eval_batches(cfg, sources.DataSource.of(cfg), tok, "dev", task=tasks.get("mlm"))
  assert any(((b["targets"] != 0) & (b["targets_segmentation"] != 0)).any() for b in masked)
  DevLoss(cfg, sources.DataSource.of(cfg), tok, None, sharding, task=tasks.get("mlm"))
  unmasked = cfg.replace(mask_rate=0.0)
  with pytest.raises(ValueError, match=r"^evaluation set 'dev': its first 4 texts "
                     r"\(data.eval_max_examples\) leave no target piece to score, no piece masked "
                     r"at data.mask_rate=0.0; expected at least one$"):
    DevLoss(unmasked, sources.DataSource.of(unmasked), tok, None, sharding, task=tasks.get("mlm"))
