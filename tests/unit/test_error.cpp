#include <gtest/gtest.h>

#include "rlpt/core/error.h"

TEST(Error, CheckFormatsOnlyOnFailureAndCarriesLocation) {
    int calls = 0;
    auto count = [&] {
        ++calls;
        return 1;
    };
    RLPT_CHECK(true, "never formatted {}", count());
    EXPECT_EQ(calls, 0);
    try {
        RLPT_CHECK(1 + 1 == 3, "bad sum {}", 2);
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_EQ(e.message(), "bad sum 2");
        EXPECT_NE(std::string(e.what()).find("ValueError: bad sum 2"), std::string::npos);
        EXPECT_NE(e.where().find("tests/unit/test_error.cpp:"), std::string::npos);
    }
}

TEST(Error, ContextKeepsKind) {
    try {
        try {
            throw rlpt::IoError("missing file x");
        } catch (const rlpt::Error& e) {
            rlpt::rethrow_with_context("loading critic", e);
        }
    } catch (const rlpt::IoError& e) {
        EXPECT_EQ(e.message(), "loading critic: missing file x");
        return;
    }
    FAIL() << "expected IoError";
}

TEST(Error, AssertIsInternalError) { EXPECT_THROW(RLPT_ASSERT(false), rlpt::InternalError); }
