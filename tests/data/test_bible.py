"""The bible_translate builder on a fake SWORD library, its split rule, and the real modules."""

import os
import subprocess
import sys
import time

import pytest
import tensorflow_datasets as tfds

import tfm_data_testlib as testlib
from tfm.data import bible, sources, sword


def _read_split(cfg, split):
  ds = tfds.data_source(cfg.dataset, split=split, data_dir=cfg.data_dir, download=False)
  return [{k: v.decode("utf-8") for k, v in ds[i].items()} for i in range(len(ds))]


def test_splits_disjoint_complete_and_follow_hash_rule(cfg):
  expected = testlib.clean_pairs()
  seen = {}
  for split in ("train", "validation", "test"):
    for example in _read_split(cfg, split):
      ref = example["ref"]
      assert ref not in seen, f"{ref} in {seen.get(ref)} and {split}"
      seen[ref] = split
      assert split == testlib.expected_split(ref)
      assert (example["en"], example["es"]) == expected[ref]
  assert set(seen) == set(expected)
  assert {"validation", "test", "train"} == set(seen.values())


def test_markup_stripped_and_empties_counted(bible_env, cfg):
  text = " ".join(e["en"] for e in _read_split(cfg, "train"))
  assert "<" not in text and "footnote" not in text and "strong" not in text
  empty = sum(1 for _, (_, es) in testlib.corpus()["sparv"].items() if not es)
  assert empty > 0
  assert bible_env["builder"].info.metadata["skipped_empty"] == empty


def test_clean_osis_examples():
  raw = ('<w lemma="strong:H1">God</w><note placement="foot">a note</note><w>created</w> the '
         '<title>Heading</title>earth<l eID="x"/> <l sID="y"/>and ¶ sea .')
  assert sword.clean_osis(raw) == "God created the earth and sea."
  glossary = 'Amen. <div eID="b1" type="book"/> <div type="glossary"/> Abba is a word.'
  assert sword.clean_osis(glossary) == "Amen."
  # Entities decode once: an escaped "&lt;" stays "&lt;" (none of the three modules has one).
  assert sword.clean_osis("a &lt;b&gt; &amp; c &amp;lt;d&amp;gt; &quot;e&apos;") == \
      "a <b> & c &lt;d&gt; \"e'"


def test_aligned_pairs_skips_and_counts():
  first = {"A.1.1": "one two", "A.1.2": "", "A.1.3": "x" * 300, "A.1.4": "bad \ufffd"}
  second = {"A.1.1": "uno dos", "A.1.2": "algo", "A.1.3": "y", "A.1.4": "malo", "B.1.1": "z"}
  pairs, counts = bible.aligned_pairs(first, second)
  assert pairs == [("A.1.1", "one two", "uno dos")]
  assert counts == {"empty": 1, "non_utf8": 1, "misaligned": 1}


def test_split_sizes_on_many_refs():
  refs = [f"Book{b}.{c}.{v}" for b in range(10) for c in range(1, 31) for v in range(1, 101)]
  splits = [bible.verse_split(r) for r in refs]
  for name in ("validation", "test"):
    assert 0.028 < splits.count(name) / len(refs) < 0.036


def test_missing_manual_dir_names_config_key(cfg, tmp_path):
  cfg = cfg.replace(manual_dir=str(tmp_path / "does-not-exist"))
  cfg = cfg.replace(data_dir=str(tmp_path / "tfds"))
  with pytest.raises(FileNotFoundError, match=r"data\.manual_dir"):
    sources.prepare(sources.DataSource.of(cfg), create_data_dir=True)


def test_manual_dir_without_modules_names_packages(cfg, tmp_path):
  (tmp_path / "empty_sword" / "mods.d").mkdir(parents=True)
  (tmp_path / "empty_sword" / "mods.d" / "other.conf").write_text("[Other]\n")
  cfg = cfg.replace(manual_dir=str(tmp_path / "empty_sword"))
  cfg = cfg.replace(data_dir=str(tmp_path / "tfds"))
  with pytest.raises(FileNotFoundError, match="apt-get install sword-text-kjv sword-text-web "
                     "sword-text-sparv") as info:
    sources.prepare(sources.DataSource.of(cfg), create_data_dir=True)
  assert "data.manual_dir" in str(info.value)


def test_find_sword_dir_error_names_packages(tmp_path):
  with pytest.raises(FileNotFoundError, match="sword-text-sparv"):
    sword.find_sword_dir(("spaRV1909eb",), candidates=[str(tmp_path)])


@pytest.mark.skipif(not os.path.exists("/usr/share/sword/mods.d"),
                    reason="Debian sword-text-* packages not installed")
def test_real_modules_read_a_book():
  kjv = sword.read_verses("/usr/share/sword", "engKJV2006eb", books=["Ruth"])
  sparv = sword.read_verses("/usr/share/sword", "spaRV1909eb", books=["Ruth"])
  assert len(kjv) == 85 and set(kjv) == set(sparv)
  assert kjv["Ruth.1.16"].startswith("And Ruth said, Intreat me not to leave thee")
  assert "Rut" in sparv["Ruth.1.16"] and "<" not in "".join(sparv.values())


def test_kjv_web_config_english_pair(cfg, tmp_path):
  cfg = cfg.replace(dataset="bible_translate/kjv-web", source_lang="kjv", target_lang="web")
  cfg = cfg.replace(data_dir=str(tmp_path / "tfds"))
  sources.prepare(sources.DataSource.of(cfg), create_data_dir=True)
  expected = testlib.clean_pairs(source="kjv", target="web")
  got = {}
  for split in ("train", "validation", "test"):
    for example in _read_split(cfg, split):
      got[example["ref"]] = (example["kjv"], example["web"])
  assert got == expected
  assert sources.DataSource.of(cfg).open("train")[0] in set(expected.values()) | {
      tuple(v.encode() for v in pair) for pair in expected.values()}


@pytest.mark.parametrize("mode", ["lock", "nolock"])
def test_processes_preparing_one_data_dir_at_once_all_get_the_dataset(bible_env, tmp_path, mode):
  """Two runs that start together on an unprepared data_dir (a sweep's parallel runs, a cluster
  job beside a local one) both train on it. With the directory's lock, one builds and the other
  waits and finds it prepared; without (object storage), both build and the one whose rename
  comes second takes the first's build."""
  data_dir = tmp_path / "tfds"
  data_dir.mkdir()
  go = tmp_path / "go"
  workers = [subprocess.Popen(
      [sys.executable, os.path.join(os.path.dirname(__file__), "prepare_worker.py"),
       bible_env["sword_dir"], str(data_dir), str(tmp_path / f"ready{i}"), str(go), mode],
      stderr=subprocess.PIPE, text=True) for i in range(2)]
  deadline = time.monotonic() + 120
  while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
    assert time.monotonic() < deadline and all(w.poll() is None for w in workers), \
        [w.communicate()[1][-2000:] for w in workers]
    time.sleep(0.05)
  go.touch()
  logs = [w.communicate(timeout=120)[1] for w in workers]
  assert [w.returncode for w in workers] == [0, 0], [log[-2000:] for log in logs]
  built = sum("preparing dataset" in log for log in logs)
  took_other = sum("prepared by another process meanwhile" in log for log in logs)
  if mode == "lock":
    assert (built, took_other) == (1, 0), logs
  else:
    assert (built, took_other) == (2, 1), logs
  cfg = bible_env["cfg"].replace(data_dir=str(data_dir))
  got = {e["ref"]: (e["en"], e["es"]) for split in ("train", "validation", "test")
         for e in _read_split(cfg, split)}
  assert got == testlib.clean_pairs()
  assert not [p.name for p in (data_dir / "bible_translate" / "web-sparv").iterdir()
              if p.name != "1.0.0"]  # the second build's directory is gone
