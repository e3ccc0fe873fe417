// Prompt-length filtering and its report.
#include <gtest/gtest.h>

#include "rlpt/core/error.h"
#include "rlpt/data/length_filter.h"

using namespace rlpt::data;

namespace {

std::vector<Example> make(const std::vector<std::string>& prompts) {
    std::vector<Example> out;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        Example e;
        e.prompt = prompts[i];
        e.index = static_cast<int64_t>(i) + 100;
        out.push_back(e);
    }
    return out;
}

// One "token" per character.
int64_t chars(const std::string& s) { return static_cast<int64_t>(s.size()); }

}  // namespace

TEST(DataLengthFilter, KeepsShortPromptsAndReports) {
    LengthFilterResult r =
        filter_by_prompt_length(make({"aaa", "aaaaaa", "a", "aaaaaaaa", "aaaa", "aaaaaaa"}), chars, 4, 2);
    ASSERT_EQ(r.kept.size(), 3u);
    EXPECT_EQ(r.kept[0].index, 100);  // order and indices kept
    EXPECT_EQ(r.kept[1].index, 102);
    EXPECT_EQ(r.kept[2].index, 104);
    EXPECT_EQ(r.kept[2].prompt, "aaaa");  // == max_length is kept
    const LengthFilterReport& rep = r.report;
    EXPECT_EQ(rep.total, 6);
    EXPECT_EQ(rep.kept, 3);
    EXPECT_EQ(rep.filtered, 3);
    EXPECT_EQ(rep.max_length, 4);
    EXPECT_EQ(rep.longest, 8);
    EXPECT_EQ(rep.longest_index, 103);
    EXPECT_EQ(rep.example_indices, (std::vector<int64_t>{101, 103}));  // capped at 2
    EXPECT_EQ(rep.example_lengths, (std::vector<int64_t>{6, 8}));
    EXPECT_EQ(rep.summary(),
              "prompt length filter (max 4 tokens): kept 3 of 6, dropped 3; longest 8 tokens (index 103); "
              "dropped e.g. #101 (6 tokens), #103 (8 tokens)");
}

TEST(DataLengthFilter, NothingFiltered) {
    LengthFilterResult r = filter_by_prompt_length(make({"ab", "abc"}), chars, 10);
    EXPECT_EQ(r.kept.size(), 2u);
    EXPECT_EQ(r.report.filtered, 0);
    EXPECT_EQ(r.report.summary(),
              "prompt length filter (max 10 tokens): kept 2 of 2, dropped 0; longest 3 tokens (index 101)");
    EXPECT_TRUE(filter_by_prompt_length({}, chars, 10).kept.empty());
}

TEST(DataLengthFilter, Errors) {
    EXPECT_THROW(filter_by_prompt_length(make({"a"}), chars, 0), rlpt::ValueError);
    EXPECT_THROW(filter_by_prompt_length(make({"a"}), nullptr, 5), rlpt::ValueError);
    try {
        filter_by_prompt_length(
            make({"a", "bb"}), [](const std::string& s) -> int64_t { return s == "bb" ? -1 : 1; }, 5);
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("returned -1 for example 101"), std::string::npos) << e.message();
    }
    try {
        filter_by_prompt_length(make({"aaaa", "aaaaa"}), chars, 3);
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("every prompt is longer than the limit: prompt length filter (max 3 tokens): "
                                   "kept 0 of 2"),
                  std::string::npos)
            << e.message();
    }
}
