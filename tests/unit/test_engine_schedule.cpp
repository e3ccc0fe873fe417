// Learning-rate schedules (engine/lr_schedule.cpp) against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "rlpt/core/error.h"
#include "rlpt/engine/train_engine.h"

namespace rlpt::engine {
namespace {

OptimOptions opts(const std::string& scheduler, int64_t warmup, int64_t total, double min_ratio = 0.0) {
    OptimOptions o;
    o.lr = 2.0;
    o.scheduler = scheduler;
    o.warmup_steps = warmup;
    o.total_steps = total;
    o.min_lr_ratio = min_ratio;
    return o;
}

TEST(EngineSchedule, ConstantWithoutWarmupIsFlat) {
    auto o = opts("constant", 0, 10);
    for (int64_t k : {0, 1, 9, 10, 1000}) EXPECT_DOUBLE_EQ(scheduled_lr(o, k), 2.0) << k;
}

TEST(EngineSchedule, ConstantWarmupRampsFromZero) {
    auto o = opts("constant", 4, 10);
    // k / 4 for k < 4, then 1 (verl's get_constant_schedule_with_warmup).
    const double expected[] = {0.0, 0.5, 1.0, 1.5, 2.0, 2.0, 2.0};
    for (int64_t k = 0; k < 7; ++k) EXPECT_DOUBLE_EQ(scheduled_lr(o, k), expected[k]) << k;
}

TEST(EngineSchedule, CosineWarmupStartsAtMinRatioAndEndsExactlyAtIt) {
    auto o = opts("cosine", 2, 12, 0.1);
    // Warm-up: 0.1 + 0.9 k / 2 (verl's cosine warm-up starts at min_lr_ratio).
    EXPECT_DOUBLE_EQ(scheduled_lr(o, 0), 2.0 * 0.1);
    EXPECT_DOUBLE_EQ(scheduled_lr(o, 1), 2.0 * 0.55);
    // progress = (k - 2) / 10: 0 -> 1, 0.5 -> (1 + 0.1) / 2, 1 -> min_lr_ratio.
    EXPECT_DOUBLE_EQ(scheduled_lr(o, 2), 2.0);
    EXPECT_NEAR(scheduled_lr(o, 7), 2.0 * 0.55, 1e-15);
    // progress 0.3: 0.1 + 0.9 (1 + cos(0.3 pi)) / 2
    EXPECT_NEAR(scheduled_lr(o, 5), 2.0 * (0.1 + 0.45 * (1 + std::cos(0.3 * M_PI))), 1e-15);
    EXPECT_EQ(scheduled_lr(o, 12), 2.0 * 0.1);  // exactly
    // Past the end the final lr is held (verl's cosine would climb back).
    EXPECT_EQ(scheduled_lr(o, 13), 2.0 * 0.1);
    EXPECT_EQ(scheduled_lr(o, 100), 2.0 * 0.1);
    for (int64_t k = 0; k < 40; ++k) EXPECT_GE(scheduled_lr(o, k), 2.0 * 0.1) << k;
}

TEST(EngineSchedule, CosineWithoutWarmupDecaysToZero) {
    auto o = opts("cosine", 0, 4);
    EXPECT_DOUBLE_EQ(scheduled_lr(o, 0), 2.0);
    EXPECT_NEAR(scheduled_lr(o, 1), 2.0 * 0.5 * (1 + std::cos(0.25 * M_PI)), 1e-15);
    EXPECT_NEAR(scheduled_lr(o, 2), 1.0, 1e-15);
    EXPECT_EQ(scheduled_lr(o, 4), 0.0);
}

TEST(EngineSchedule, CosineFullCycleComesBack) {
    auto o = opts("cosine", 0, 10);
    o.num_cycles = 1.0;  // cos(2 pi progress): down to 0 at the middle, back to lr at the end
    EXPECT_NEAR(scheduled_lr(o, 5), 0.0, 1e-15);
    EXPECT_NEAR(scheduled_lr(o, 10), 2.0, 1e-15);
}

TEST(EngineSchedule, InvalidOptionsNameTheField) {
    auto expect_bad = [](OptimOptions o, const std::string& field) {
        try {
            scheduled_lr(o, 0);
            ADD_FAILURE() << "no error for " << field;
        } catch (const ValueError& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
    };
    auto o = opts("linear", 0, 10);
    expect_bad(o, "scheduler");
    o = opts("cosine", 0, 10, 1.5);
    expect_bad(o, "min_lr_ratio");
    o = opts("cosine", 0, 0);
    expect_bad(o, "total_steps");
    o = opts("constant", -1, 10);
    expect_bad(o, "warmup_steps");
    o = opts("constant", 0, 10);
    o.lr = -1;
    expect_bad(o, "lr");
    o = opts("constant", 0, 10);
    o.beta2 = 1.0;
    expect_bad(o, "beta2");
    o = opts("constant", 0, 10);
    o.zero_stage = 4;
    expect_bad(o, "zero_stage");
    o = opts("constant", 0, 10);
    o.grad_bucket_bytes = 0;
    expect_bad(o, "grad_bucket_bytes");
    EXPECT_THROW(scheduled_lr(opts("constant", 0, 10), -1), ValueError);
}

}  // namespace
}  // namespace rlpt::engine
