"""Training core: config sections, mesh and sharding rules, optimizer, loss, sharded state, the jitted
steps, checkpoints, FLOPs. tfm/experiment.py assembles them; every function here takes the fields or
sections it uses, never the whole experiment config:

  mesh = mesh.create_mesh(config.mesh)                                      # ('data', 'fsdp', 'tensor')
  rules = sharding.rules_for_model(config.mesh.rules, mesh, config.model)
  tx, schedule = optimizer.make_optimizer(config.train, config.model.d_model)
  abstract, shardings = state.abstract_train_state(model, tx, mesh, rules, config.train.seed)
  state = state.make_init(model, tx, mesh, shardings)(config.train.seed)  # created in its shards
  train_step = step.make_train_step(model, tx, schedule, label_smoothing=..., microbatches=...,
                                    mesh=mesh, rules=rules, state_shardings=shardings,
                                    guard=..., prng=...)  # platform_choices.resolve(config.train, ...)
  state, metrics = train_step(state, batch)        # metrics: device scalars, no host sync
  step.check_nonfinite(metrics, step_number, config.train.nonfinite)   # when metrics are fetched

  checkpointer = checkpoint.Checkpointer(workdir, keep=config.train.keep_checkpoints)
  restored = checkpointer.restore(abstract_state)  # None, or (state, data_state, step)
  checkpointer.save(step_number, state, data_state); checkpointer.close()
"""
