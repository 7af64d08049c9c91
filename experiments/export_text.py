"""Writes a TFDS translation dataset's splits as text files, the form data.dataset='text' reads.

  .venv/bin/python experiments/export_text.py --out corpus
      -> corpus/{train,dev,test}.{en,es}: the offline Bible (bible_translate/web-sparv), a file per
         split and side, line i of one side the translation of line i of the other

The dataset is prepared first where it is not (the Bible from its SWORD modules, see docs/data.md).
A pair with an empty side or a side that is not UTF-8 is left out (training would skip it too);
line breaks and tabs inside a text become spaces, so a line stays a pair. Each file is written
under a temporary name and renamed. Train on the files with data.train_files='corpus/train.{lang}'
(docs/data.md, "Plain text files").
"""

from __future__ import annotations

import argparse
import os
import re


def parse_args():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", required=True, help="directory for <split>.<lang> files")
  p.add_argument("--dataset", default="bible_translate/web-sparv", help="TFDS builder[/config]")
  p.add_argument("--source_lang", default="en", help="its source feature key")
  p.add_argument("--target_lang", default="es", help="its target feature key")
  p.add_argument("--data_dir", default=None, help="TFDS data dir (default: TFDS default)")
  p.add_argument("--manual_dir", default=None, help="the Bible's SWORD directory (default: the "
                 "standard locations)")
  p.add_argument("--splits", default="train,dev,test", help="comma-separated, of train,dev,test")
  return p.parse_args()


def _text(value) -> str | None:
  """One line's text: tfm's own decoding of a record (None where it is empty or not UTF-8),
  its whitespace runs (newlines and tabs too) made single spaces."""
  from tfm.data.examples import OK, decode_text  # pylint: disable=import-outside-toplevel
  text, status = decode_text(value)
  return re.sub(r"\s+", " ", text) if status == OK else None


def main():
  args = parse_args()
  from tfm.data import sources  # pylint: disable=import-outside-toplevel
  from tfm.data.config import DataConfig  # pylint: disable=import-outside-toplevel
  cfg = DataConfig(dataset=args.dataset, source_lang=args.source_lang,
                   target_lang=args.target_lang, data_dir=args.data_dir,
                   manual_dir=args.manual_dir)
  source = sources.DataSource.of(cfg)
  sources.prepare(source)
  os.makedirs(args.out, exist_ok=True)
  for split in args.splits.split(","):
    pairs = source.open(split)
    kept = [texts for texts in (tuple(map(_text, pairs[i])) for i in range(len(pairs)))
            if None not in texts]
    for side, lang in enumerate((args.source_lang, args.target_lang)):
      path = os.path.join(args.out, f"{split}.{lang}")
      with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(texts[side] + "\n" for texts in kept)
      os.replace(path + ".tmp", path)
    print(f"{split}: {len(kept)} pairs of {len(pairs)} -> {args.out}/{split}.{{"
          f"{args.source_lang},{args.target_lang}}}")


if __name__ == "__main__":
  main()
