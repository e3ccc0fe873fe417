# Shard-to-shard weight sync between tensor-parallel layouts (src/weights/weight_reshard.cpp): every
# (actor tp, rollout tp) pair that fits 3, 4, 6 and 8 ranks.
foreach(np 3 4 6 8)
  rlpt_add_mpi_test(mpi_weight_reshard_np${np} NP ${np} TARGET rlpt_mpi_tests
                    FILTER "WeightReshardTest.*" TIMEOUT 300)
endforeach()
# The hybrid engine's colocated resharding (weights::HeldReshard) and its RegionExchange: actor (ZeRO x tp) and
# rollout (another tp) on the same 2, 4 and 8 ranks.
foreach(np 2 4 8)
  rlpt_add_mpi_test(mpi_weight_reshard_colocated_np${np} NP ${np} TARGET rlpt_mpi_tests
                    FILTER "ColocatedReshardTest.*:RegionExchangeTest.*" TIMEOUT 300)
endforeach()
# A ZeRO-3 actor's weight sync from its shards to rollout ranks of their own (weights::HeldReshard, source-only
# and destination-only ranks): 4 ranks (dp 2 -> tp 1 / tp 2) and 8 (tp 2 x dp 2 -> tp 1 / tp 4, hybrid shard).
foreach(np 4 8)
  rlpt_add_mpi_test(mpi_weight_reshard_zero3sync_np${np} NP ${np} TARGET rlpt_mpi_tests
                    FILTER "DisaggregatedReshardTest.*" TIMEOUT 300)
endforeach()
