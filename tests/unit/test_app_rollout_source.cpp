// RolloutSource's decisions without a controller: the weight-version bookkeeping (which syncs
// the asynchronous loop makes, which batches it refuses) and the sampling arguments of its
// calls. Its calls themselves (kGenerate, the weight sync, the prefetch and its checkpoint) run
// in the trainer_* and async_* tests, through the real binary: protocol::Controller needs MPI.
#include <gtest/gtest.h>

#include "app_test_util.h"
#include "rlpt/core/rng_streams.h"
#include "rollout_source.h"

namespace rlpt::app {
namespace {

using test::expect_error;

TEST(WeightVersions, SynchronousLoopSyncsAfterEveryUpdate) {
    WeightVersions v(/*max_staleness=*/0);
    EXPECT_EQ(v.actor(), 0);
    EXPECT_EQ(v.rollout(), 0);
    EXPECT_FALSE(v.rollout_behind());
    EXPECT_FALSE(v.too_stale_then(0));
    EXPECT_TRUE(v.too_stale_then(1));  // a batch generated now, trained after one more update
    v.actor_updated();
    EXPECT_TRUE(v.rollout_behind());
    v.synced();
    EXPECT_FALSE(v.rollout_behind());
    EXPECT_EQ(v.rollout(), 1);
    EXPECT_EQ(v.take_syncs(), 1);
    EXPECT_EQ(v.take_syncs(), 0);  // taken: the next step counts afresh
}

TEST(WeightVersions, StalenessBoundDecidesTheSyncs) {
    // K = 2: the rollout may lag two updates behind the batch's training.
    WeightVersions v(/*max_staleness=*/2);
    v.actor_updated();
    v.actor_updated();
    EXPECT_FALSE(v.too_stale_then(2));
    EXPECT_TRUE(v.too_stale_then(3));
    v.synced();
    EXPECT_EQ(v.rollout(), 2);
    EXPECT_FALSE(v.too_stale_then(4));
    EXPECT_TRUE(v.too_stale_then(5));
}

TEST(WeightVersions, UncountedSyncAndResume) {
    WeightVersions v(1);
    v.resume(/*actor_updates=*/5, /*syncs=*/1);  // the writer counted one sync after its checkpoint
    EXPECT_EQ(v.actor(), 5);
    EXPECT_EQ(v.rollout(), 0);
    v.synced(/*counted=*/false);  // the resume's own sync
    EXPECT_EQ(v.rollout(), 5);
    EXPECT_EQ(v.take_syncs(), 1);
}

TEST(WeightVersions, BatchesMustCarryTheVersionTheTrainerExpects) {
    WeightVersions v(0);
    v.check_batch({}, 0, 0);  // a rollout that reports no versions is not checked
    v.check_batch({3, 3}, 0, 0);
    v.check_batch({3, 3}, 0, 1);  // same policy, same weights
    expect_error<ValueError>(
        [&] {
            v.check_batch({4, 4}, 0, 2);
        },
        "step 3: the rollout's weights changed (version 3 -> 4)");
    expect_error<ValueError>([&] { v.check_batch({3, 3}, 1, 2); }, "step 3: the rollout sampled with stale weights");
    v.check_batch({4, 4}, 1, 2);  // a newer policy with newer weights
    expect_error<ValueError>([&] { v.check_batch({5, 6}, 2, 3); }, "different weight versions (5 and 6)");
}

TEST(WeightVersions, RefusesToTrainOnTooStaleBatches) {
    WeightVersions v(1);
    v.actor_updated();
    v.check_trainable(0, 1);  // one update old: allowed
    v.actor_updated();
    expect_error<InternalError>([&] { v.check_trainable(0, 2); },
                                "step 3: the batch was generated with weights 2 actor updates old, more than "
                                "trainer.max_staleness=1");
}

TEST(RolloutSourceSettings, SamplingArgumentsOfTrainingAndValidation) {
    RolloutSourceSettings s;
    s.train = SamplingConfig{0.7, 0.9, 5, true, 4};
    s.val = SamplingConfig{0.0, 1.0, -1, false, 2};
    s.max_response_length = 12;
    s.seed = 9;
    s.stop = {"</answer>", "\n\n"};
    s.include_stop_str_in_output = true;
    TaskData task;
    task.eos_id = 3;
    task.pad_id = 1;
    task.stop_ids = {3, 8};
    const roles::GenerateArgs t = sampling_args(s, task, /*validation=*/false, /*step=*/6);
    EXPECT_EQ(t.temperature, 0.7);
    EXPECT_EQ(t.top_p, 0.9);
    EXPECT_EQ(t.top_k, 5);
    EXPECT_FALSE(t.greedy);
    EXPECT_EQ(t.n, 4);
    EXPECT_EQ(t.stream, 6);
    EXPECT_EQ(t.max_new_tokens, 12);
    EXPECT_EQ(t.seed, 9);
    EXPECT_EQ(t.eos_id, 3);
    EXPECT_EQ(t.pad_id, 1);
    EXPECT_EQ(t.stop_ids, (std::vector<int64_t>{3, 8}));
    EXPECT_EQ(t.stop, s.stop);
    EXPECT_TRUE(t.include_stop_str_in_output);
    const roles::GenerateArgs v = sampling_args(s, task, /*validation=*/true, /*step=*/6);
    EXPECT_EQ(v.temperature, 0.0);
    EXPECT_TRUE(v.greedy);
    EXPECT_EQ(v.n, 2);
    EXPECT_EQ(v.stop, s.stop);  // the stop strings hold for validation too
    EXPECT_EQ(v.stream, streams::validation_stream(6));
    EXPECT_NE(v.stream, t.stream);
}

}  // namespace
}  // namespace rlpt::app
