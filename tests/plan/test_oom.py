"""XLA's out-of-memory messages read for their sizes (K/M/G/T = powers of 1024)."""

import pytest

from tfm.plan.oom import is_out_of_memory, parse_out_of_memory


def test_temporaries_message():
  error = RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
                       "HLO temporaries (21.72G) exceeds available HBM (15.75G).")
  assert is_out_of_memory(error)
  oom = parse_out_of_memory(error)
  assert oom.temp_bytes == round(21.72 * 2**30) and oom.usable_hbm_bytes == round(15.75 * 2**30)
  assert oom.used_bytes is None and oom.message.startswith("RESOURCE_EXHAUSTED: Ran out of memory")


def test_used_message():
  error = RuntimeError("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in "
                       "memory space hbm. Used 17.03G of 15.75G hbm. Exceeded hbm capacity by 1.28G."
                       "\nMemory usage report: ...")
  oom = parse_out_of_memory(error)
  assert oom.used_bytes == round(17.03 * 2**30) and oom.usable_hbm_bytes == round(15.75 * 2**30)
  assert oom.temp_bytes is None and "\n" not in oom.message


def test_other_errors_are_not_out_of_memory():
  assert not is_out_of_memory(RuntimeError("INVALID_ARGUMENT: Invalid TPU program."))
  with pytest.raises(ValueError, match="names no sizes"):
    parse_out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory somewhere"))
