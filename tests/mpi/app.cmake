# The real program under mpirun: start-up refusals come as one message, non-zero exit, no hang.
set(_tiny ${PROJECT_SOURCE_DIR}/configs/tiny.yaml)
rlpt_add_failure_test(app_unknown_key_refused_np3 NP 3 TARGET rlpt ONCE MAX_SECONDS 60
  REGEX "command line \\(trainer.bogus=1\\): unknown key 'trainer.bogus'" ARGS ${_tiny} trainer.bogus=1)
rlpt_add_failure_test(app_bad_value_refused_np2 NP 2 TARGET rlpt ONCE MAX_SECONDS 60
  REGEX "command line \\(data.train_batch_size=lots\\): 'data.train_batch_size' must be an integer, got 'lots'" ARGS ${_tiny} data.train_batch_size=lots)
rlpt_add_failure_test(app_missing_config_np2 NP 2 TARGET rlpt ONCE MAX_SECONDS 60
  REGEX "no/such.yaml: cannot open config file" ARGS no/such.yaml)
rlpt_add_failure_test(app_impossible_layout_np3 NP 3 TARGET rlpt ONCE MAX_SECONDS 60
  REGEX "the groups ask for 5 ranks but only 3 are available"
  ARGS ${_tiny} "placement.groups=[{roles: [actor, rollout], ranks: 5}]")
rlpt_add_failure_test(app_single_rank_refused_np1 NP 1 TARGET rlpt ONCE MAX_SECONDS 60
  REGEX "leave no rank for the roles" ARGS ${_tiny} placement.controller_hosts_roles=false)
rlpt_add_failure_test(app_missing_role_refused_np3 NP 3 TARGET rlpt ONCE MAX_SECONDS 60
  REGEX "role 'critic' is needed \\(algorithm.adv_estimator=gae\\)" ARGS ${_tiny} algorithm.adv_estimator=gae)
# Tensor parallelism that cannot split the model (tiny: 2 heads) is refused naming the numbers.
# (A rollout on other ranks with another tensor-parallel size than the actor's is no longer
# refused: the weights move shard to shard, tested by trainer_reshard.)
rlpt_add_failure_test(app_tensor_parallel_impossible_np3 NP 3 TARGET rlpt ONCE MAX_SECONDS 60
  REGEX "model_parallel_size 3 does not divide num_attention_heads 2"
  ARGS ${_tiny} "placement.groups=[{roles: [actor, rollout, reference], ranks: auto, model_parallel_size: 3}]")
