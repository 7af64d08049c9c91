"""`tfm prepare-data --config=FILE --workdir=DIR`: build the dataset and the shared vocabulary."""

from __future__ import annotations

from absl import flags

from tfm import tasks


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_string("workdir", None, "where the vocabulary is cached (unless data.vocab_dir is set)",
                      flag_values=fv)


def run(fv: flags.FlagValues, config):
  from tfm.data import sources, vocabulary  # pylint: disable=import-outside-toplevel
  source = sources.DataSource.of(config.data)
  builder = sources.prepare(source, create_data_dir=True)
  if source.is_text:
    print(f"text files ready: {source.open('train')!r}")
  elif builder is None:
    print(f"dataset {config.data.dataset} ready: its export in {config.data.data_dir}")
  else:
    print(f"dataset {builder.info.full_name} ready in {builder.data_dir}")
  if fv.workdir or config.data.vocab_dir:
    tok = vocabulary.get_tokenizer(config.data, fv.workdir, source=source,
                                   task=tasks.get(config.task))
    print(f"vocabulary of {tok.vocab_size} tokens ready")
