"""Ahead-of-time planning for TPU topologies (`tfm plan`): the real train step compiled by libtpu
for a topology's compile-only devices, on any machine.

  topology.py    a topology spec -> compile-only devices, its chip
  step_plan.py   Experiment(config, devices=...).train_step compiled: memory, FLOPs, compile time
  roofline.py    step time from FLOPs and HBM traffic at the chip's peak and bandwidth
  oom.py         libtpu's refusal of a program over HBM, read for the sizes it names
  remedies.py    single config changes compiled when a step does not fit
  xla_log.py     XLA's warnings captured from a compile
"""
