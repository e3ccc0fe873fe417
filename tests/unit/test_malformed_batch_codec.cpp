// decode_layout on broken messages: every truncation of a valid encoding, seeded byte
// mutations and forged huge counts. Each must be a CommError ("malformed batch message: ..."),
// never a crash, a huge allocation or another exception; what decodes must be self-consistent.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <string>
#include <vector>

#include "rlpt/batch/batch_codec.h"
#include "test_malformed_util.h"

namespace rlpt {
namespace {

using malformed::expect_error;

Batch sample_batch() {
    Batch b(3);
    b.set("input_ids", torch::arange(12, torch::kInt64).reshape({3, 4}));
    b.set("old_log_prob", torch::zeros({3, 4}, torch::kFloat32));
    b.set("flags", torch::zeros({3}, torch::kBool));
    b.set_strings("data_source", {"a", "", "gsm8k"});
    b.set_ints("index", {7, -1, 1 << 20});
    b.set_meta("step", int64_t{5});
    b.set_meta("temperature", 0.7);
    b.set_meta("phase", std::string("rollout"));
    b.set_meta("stop_ids", std::vector<int64_t>{2, 7, -1});
    b.add_metric("reward/mean", 0.5);
    b.add_metric("tokens", 12.0, Reduce::kSum);
    return b;
}

std::string encoded() {
    std::string s;
    encode_layout(sample_batch(), s);
    return s;
}

// Everything a receiver relies on after a successful decode.
void check_consistent(const BatchLayout& L) {
    for (const auto& c : L.columns) {
        ASSERT_GE(c.shape.size(), 1u);
        ASSERT_EQ(c.shape[0], L.skeleton.size());
        int64_t numel = 1;
        for (int64_t d : c.shape) {
            ASSERT_GE(d, 0);
            numel *= d;
        }
        ASSERT_EQ(c.nbytes, numel * static_cast<int64_t>(c10::elementSize(c.dtype)));
    }
    for (const auto& [name, v] : L.skeleton.string_fields())
        ASSERT_EQ(static_cast<int64_t>(v.size()), L.skeleton.size());
    for (const auto& [name, v] : L.skeleton.int_fields()) ASSERT_EQ(static_cast<int64_t>(v.size()), L.skeleton.size());
}

TEST(MalformedBatchCodec, ValidEncodingRoundTrips) {
    const std::string s = encoded();
    BatchLayout L = decode_layout(s.data(), s.size());
    EXPECT_EQ(L.skeleton.size(), 3);
    ASSERT_EQ(L.columns.size(), 3u);
    EXPECT_EQ(L.columns[0].name, "flags");  // name order
    EXPECT_EQ(L.skeleton.strings("data_source")[2], "gsm8k");
    EXPECT_EQ(L.skeleton.ints("index")[2], 1 << 20);
    EXPECT_EQ(L.skeleton.meta_ints("stop_ids"), (std::vector<int64_t>{2, 7, -1}));
    check_consistent(L);
}

TEST(MalformedBatchCodec, EveryTruncationIsACommError) {
    const std::string s = encoded();
    for (size_t n = 0; n < s.size(); ++n) {
        const std::string cut = s.substr(0, n);
        expect_error<CommError>([&] { decode_layout(cut.data(), cut.size()); }, {"malformed batch message"},
                                fmt::format("truncated to {} of {} bytes", n, s.size()));
    }
    // Extra bytes are refused too.
    const std::string longer = s + "x";
    expect_error<CommError>([&] { decode_layout(longer.data(), longer.size()); }, {"trailing bytes after the layout"});
}

// Writes a little-endian u64/i64 at `at`.
std::string with_u64(std::string s, size_t at, uint64_t v) {
    std::memcpy(&s[at], &v, 8);
    return s;
}

TEST(MalformedBatchCodec, ForgedCountsAndValues) {
    const std::string s = encoded();
    // Layout: magic u32 | rows i64 | ncols u64 | ...
    struct Case {
        const char* name;
        std::string bytes;
        std::vector<std::string> parts;
    };
    std::string bad_magic = s;
    bad_magic[0] ^= 1;
    std::string bad_dtype = s;
    // First column: name length u64 at 20, name "flags" (5 bytes), then the dtype byte.
    bad_dtype[20 + 8 + 5] = static_cast<char>(200);
    const std::vector<Case> cases = {
        {"bad magic", bad_magic, {"bad layout magic"}},
        {"negative rows", with_u64(s, 4, static_cast<uint64_t>(-5)), {"negative row count -5"}},
        {"rows mismatch", with_u64(s, 4, 4), {"column 'flags' has 3 rows, batch has 4"}},
        {"huge rows", with_u64(s, 4, 0x7fffffffffffffffull), {"malformed batch message"}},
        {"huge column count",
         with_u64(s, 12, 0xffffffffffffffffull),
         {"column count 18446744073709551615 exceeds the message size"}},
        {"huge name length", with_u64(s, 20, 0x7fffffffffffffffull), {"truncated while reading column name"}},
        {"unknown dtype", bad_dtype, {"unknown dtype code 200"}},
        {"rank 0", with_u64(s, 20 + 8 + 5 + 1, 0), {"column 'flags' has rank 0"}},
        {"rank 17", with_u64(s, 20 + 8 + 5 + 1, 17), {"malformed batch message"}},
        {"negative dim",
         with_u64(s, 20 + 8 + 5 + 1 + 8, static_cast<uint64_t>(-1)),
         {"column 'flags' has bad dimension -1"}},
        {"empty", "", {"truncated while reading magic"}},
    };
    for (const auto& c : cases) {
        expect_error<CommError>([&] { decode_layout(c.bytes.data(), c.bytes.size()); }, c.parts, c.name);
    }
}

TEST(MalformedBatchCodec, FuzzedMessagesOnlyGiveCommErrors) {
    const std::string s = encoded();
    std::string empty_layout;
    encode_layout(Batch(0), empty_layout);
    int decoded = 0;
    auto counts = malformed::fuzz({s, empty_layout}, 5000, 2026, "",
                                  [&](const std::string& b) {
                                      BatchLayout L = decode_layout(b.data(), b.size());
                                      check_consistent(L);
                                      ++decoded;
                                  },
                                  {ErrorKind::kComm});
    EXPECT_EQ(counts.bad, 0);
    EXPECT_GT(counts.rejected, 2000);
    EXPECT_GT(decoded, 20) << "flips in string bytes and values still decode";
}

}  // namespace
}  // namespace rlpt
