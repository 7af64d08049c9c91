"""The names the data section is made of: its splits, their text-files keys, the form of an
evaluation set's or a mixture source's name, and the keys a mixture source may set. Both the
section (tfm/data/config.py) and data.mixture's checks (tfm/data/mixture_config.py) read them."""

import re

SPLITS = ("train", "dev", "test")
FILES_KEYS = {split: f"{split}_files" for split in SPLITS}  # data.train_files, ...
# Eval set names are TensorBoard prefixes (`<name>/perplexity`) and file names (eval_<name>_...).
EVAL_SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# What a source of data.mixture may set (the rest of the section is shared by every source):
# where its train split comes from, plus its name and weight.
MIXTURE_KEYS = ("name", "weight", "dataset", "source_lang", "target_lang", "data_dir", "manual_dir",
                "train_files", "dev_files", "test_files", "text_key")
