"""Training core: optimizer, loss, sharded state, the jitted steps, checkpoints, FLOPs.

How a training loop uses it (every function takes config *sections*, not the whole config):

  mesh = mesh.create_mesh(config.mesh)                                      # ('data', 'fsdp', 'tensor')
  rules = sharding.rules_for_model(sharding.logical_rules(config.mesh), mesh, model_cfg)
  tx, schedule = optimizer.make_optimizer(config.train, model_cfg.d_model)
  state, shardings = state.init_train_state(model, tx, mesh, rules, config.train.seed)
  train_step = step.make_train_step(model, tx, schedule, config.train, mesh, rules, shardings)
  eval_step = step.make_eval_step(model, config.train.label_smoothing, mesh, rules, shardings.params)
  batch = sharding.shard_batch(host_batch, sharding.batch_sharding(mesh, rules))
  state, metrics = train_step(state, batch)        # metrics: device scalars, no host sync
  step.check_nonfinite(metrics, step_number, config.train.nonfinite)   # when metrics are fetched
  sums = eval_step(state.params, batch)            # add up over the dev set -> loss.per_token(totals)

  checkpointer = checkpoint.Checkpointer(workdir, keep=config.train.keep_checkpoints)
  abstract, _ = state.abstract_train_state(model, tx, mesh, rules, config.train.seed)
  restored = checkpointer.restore(abstract)        # None, or (state, data_state, step)
  checkpointer.save(step_number, state, data_state); checkpointer.close()
"""
