// Broken .safetensors files: truncation at every byte, seeded byte mutations and named header
// defects. Every one must be an IoError naming the file (and the tensor where there is one);
// a file that still opens must hand out every tensor without a crash.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <string>
#include <vector>

#include "rlpt/model/safetensors.h"
#include "test_malformed_util.h"

namespace rlpt::model {
namespace {

using malformed::expect_error;
using malformed::TempDir;

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// 8-byte little-endian length + header + data.
std::string raw_file(const std::string& header, const std::string& data = "", int64_t claimed = -1) {
    uint64_t n = claimed >= 0 ? static_cast<uint64_t>(claimed) : header.size();
    std::string s(8, '\0');
    std::memcpy(&s[0], &n, 8);
    return s + header + data;
}

std::string valid_file_bytes(const TempDir& dir) {
    NamedTensors t;
    t.emplace_back("w", torch::arange(6, torch::kFloat32).reshape({2, 3}));
    t.emplace_back("ids", torch::tensor({int64_t{1}, int64_t{-2}}, torch::kInt64));
    t.emplace_back("flag", torch::tensor({true, false, true}, torch::kBool));
    t.emplace_back("half", torch::ones({3}, torch::kFloat16));
    const std::string path = dir.file("valid.safetensors");
    save_safetensors(path, t, {{"format", "pt"}, {"note", "x"}});
    return read_all(path);
}

// Opens and touches every tensor (sums it) so a bad alias would show up.
void open_and_read(const std::string& path) {
    auto f = SafetensorsFile::open(path);
    for (const auto& name : f.names()) {
        torch::Tensor t = f.get(name);
        if (t.numel() > 0) (void)t.to(torch::kFloat64).sum().item<double>();
    }
}

TEST(MalformedSafetensors, EveryTruncationIsAnIoError) {
    TempDir dir("st");
    const std::string bytes = valid_file_bytes(dir);
    const std::string path = dir.file("cut.safetensors");
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    ASSERT_LT(8 + header_len, bytes.size());
    for (size_t n = 0; n < bytes.size(); ++n) {
        dir.write("cut.safetensors", bytes.substr(0, n));
        std::vector<std::string> parts = {"cut.safetensors"};
        if (n < 8) parts.push_back("is truncated");
        else if (n < 8 + header_len) parts.push_back("runs past the end of the file");
        else parts.push_back("out of range");  // the data buffer is short: a tensor's offsets run past it
        expect_error<IoError>([&] { SafetensorsFile::open(path); }, parts, fmt::format("truncated to {} bytes", n));
    }
    dir.write("cut.safetensors", bytes);
    EXPECT_NO_THROW(open_and_read(path));
}

TEST(MalformedSafetensors, NamedHeaderDefects) {
    struct Case {
        const char* name;
        std::string bytes;
        std::vector<std::string> parts;
    };
    const std::string ok_entry = R"("w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
    const std::string data8(8, '\0');
    const std::vector<Case> cases = {
        {"empty file", "", {"is truncated: 0 bytes, need at least 8"}},
        {"huge header length", raw_file("{}", "", int64_t{0x7fffffffffffffff}), {"runs past the end of the file"}},
        {"header length 2^64-1",
         [] {
             std::string s(8, '\xff');
             return s + "{}";
         }(),
         {"header length 18446744073709551615 runs past the end"}},
        {"zero header length", raw_file("", data8), {"header is not valid JSON"}},
        {"header not JSON", raw_file("not json", data8), {"header is not valid JSON"}},
        {"header is an array", raw_file("[1, 2]", data8), {"header is not a JSON object"}},
        {"entry not an object", raw_file(R"({"w": 5})", data8), {"tensor 'w'", "must be an object with dtype, shape"}},
        {"missing shape", raw_file(R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", data8), {"tensor 'w'"}},
        {"dtype not a string",
         raw_file(R"({"w": {"dtype": 7, "shape": [2], "data_offsets": [0, 8]}})", data8),
         {"tensor 'w'", "dtype is not a string"}},
        {"unknown dtype",
         raw_file(R"({"w": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}})", data8),
         {"tensor 'w'", "unsupported safetensors dtype 'F8_E4M3'"}},
        {"negative dim",
         raw_file(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", data8),
         {"a shape entry of tensor 'w' must be a non-negative integer, got -2"}},
        {"float dim",
         raw_file(R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", data8),
         {"must be a non-negative integer, got 2.5"}},
        {"nested dim",
         raw_file(R"({"w": {"dtype": "F32", "shape": [[2]], "data_offsets": [0, 8]}})", data8),
         {"must be a non-negative integer, got [2]"}},
        {"shape overflow",
         raw_file(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 8]}})", data8),
         {"tensor 'w'", "needs more than 2^64"}},
        {"offsets wrong size",
         raw_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", data8),
         {"tensor 'w'", "data_offsets span 8 bytes but shape [3] x F32 needs 12"}},
        {"offsets reversed",
         raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", data8),
         {"tensor 'w'", "data_offsets [8, 0] out of range"}},
        {"offsets past the buffer",
         raw_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", data8),
         {"tensor 'w'", "out of range (data buffer is 8 bytes)"}},
        {"offsets not a pair",
         raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", data8),
         {"data_offsets must be [begin, end]"}},
        {"offset overflow",
         raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1e999]}})", data8),
         {"header is not valid JSON", "number overflow"}},
        {"overlap",
         raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                  data8),
         {"tensors 'a' and 'b' overlap"}},
        {"metadata not an object",
         raw_file(R"({"__metadata__": [1], )" + ok_entry + "}", data8),
         {"__metadata__ is not an object"}},
        {"metadata value not a string",
         raw_file(R"({"__metadata__": {"k": 1}, )" + ok_entry + "}", data8),
         {"__metadata__ value for 'k' is not a string"}},
        {"deep header",
         raw_file("{\"w\": " + malformed::nested_json(200000) + "}", data8),
         {"header is nested deeper than 16 levels"}},
        {"invalid utf-8 name",
         raw_file("{\"\xff\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", data8),
         {"header is not valid JSON"}},
    };
    TempDir dir("st");
    for (const auto& c : cases) {
        const std::string path = dir.write("bad.safetensors", c.bytes);
        std::vector<std::string> parts = c.parts;
        parts.push_back("bad.safetensors");
        expect_error<IoError>([&] { SafetensorsFile::open(path); }, parts, c.name);
    }
}

TEST(MalformedSafetensors, FuzzedFilesOnlyGiveIoErrors) {
    TempDir dir("st");
    const std::string bytes = valid_file_bytes(dir);
    const std::string path = dir.file("fuzz.safetensors");
    auto counts = malformed::fuzz({bytes}, 1000, 99, "{}[]\":,0123456789-.eFIUB",
                                  [&](const std::string& b) {
                                      dir.write("fuzz.safetensors", b);
                                      open_and_read(path);
                                  },
                                  {ErrorKind::kIo});
    EXPECT_EQ(counts.bad, 0);
    EXPECT_GT(counts.rejected, 150);
    EXPECT_GT(counts.accepted, 10) << "flips inside the data buffer leave a valid file";
}

}  // namespace
}  // namespace rlpt::model
