#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "rlpt/model/safetensors.h"
#include "test_model_helpers.h"

using rlpt::model::NamedTensors;
using rlpt::model::SafetensorsCheckpoint;
using rlpt::model::SafetensorsFile;
using rlpt::model::testing::expect_error;
using rlpt::model::testing::TempDir;
namespace fs = std::filesystem;

namespace {

// A raw file: 8-byte length, header text as given (no padding), then `data`.
void write_raw(const std::string& path, const std::string& header, const std::string& data, int64_t claimed_len = -1) {
    std::ofstream out(path, std::ios::binary);
    uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

NamedTensors one_of_each_dtype() {
    torch::manual_seed(7);
    NamedTensors t;
    t.emplace_back("f64", torch::randn({3, 2}, torch::kFloat64));
    t.emplace_back("f32", torch::randn({5}, torch::kFloat32));
    t.emplace_back("f16", torch::randn({2, 3}).to(torch::kFloat16));
    t.emplace_back("bf16", torch::randn({3}).to(torch::kBFloat16));  // odd byte count: 6
    t.emplace_back("i64", torch::tensor({int64_t{-5}, int64_t{0}, int64_t{1} << 40}, torch::kInt64));
    t.emplace_back("i32", torch::tensor({-7, 8, 2147483647}, torch::kInt32));
    t.emplace_back("i16", torch::tensor({-3, 32767}, torch::kInt16));
    t.emplace_back("i8", torch::tensor({-128, 5, 127}, torch::kInt8));
    t.emplace_back("u8", torch::tensor({0, 200, 255}, torch::kUInt8));
    t.emplace_back("bool", torch::tensor({true, false, true}, torch::kBool));
    t.emplace_back("scalar", torch::tensor(3.5, torch::kFloat32));
    t.emplace_back("empty", torch::empty({0, 4}, torch::kFloat32));
    return t;
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtypeBitExactAndAligned) {
    TempDir dir("st");
    const auto path = dir.file("all.safetensors");
    auto tensors = one_of_each_dtype();
    rlpt::model::save_safetensors(path, tensors);

    const std::string bytes = read_bytes(path);
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    EXPECT_EQ((8 + header_len) % 8, 0u) << "header must be padded to 8-byte alignment";
    auto header = nlohmann::json::parse(bytes.substr(8, header_len));
    EXPECT_EQ(header["__metadata__"]["format"], "pt");
    EXPECT_EQ(header["bf16"]["dtype"], "BF16");
    EXPECT_EQ(header["scalar"]["shape"], nlohmann::json::array());

    auto f = SafetensorsFile::open(path);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.names().size(), tensors.size());
    for (const auto& [name, expected] : tensors) {
        ASSERT_TRUE(f.contains(name)) << name;
        auto got = f.get(name);
        EXPECT_EQ(got.scalar_type(), expected.scalar_type()) << name;
        EXPECT_EQ(got.sizes(), expected.sizes()) << name;
        EXPECT_TRUE(torch::equal(got, expected)) << name;
        if (got.numel() > 0) {
            // Aliases the mapping: two reads share memory, and it is aligned to the element size.
            EXPECT_EQ(got.data_ptr(), f.get(name).data_ptr()) << name;
            EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data_ptr()) % got.element_size(), 0u) << name;
        }
    }
    // A converting read copies; the aliasing tensor outlives the SafetensorsFile.
    auto as_f32 = f.get("bf16", torch::kFloat32, torch::kCPU);
    EXPECT_EQ(as_f32.scalar_type(), torch::kFloat32);
    torch::Tensor survivor = f.get("f32");
    { auto moved = std::move(f); }
    EXPECT_TRUE(torch::equal(survivor, tensors[1].second));
}

TEST(Safetensors, WritesToReturnedTensorsDoNotReachTheFile) {
    TempDir dir("st");
    const auto path = dir.file("a.safetensors");
    rlpt::model::save_safetensors(path, {{"x", torch::ones({4})}});
    {
        auto f = SafetensorsFile::open(path);
        f.get("x").fill_(9.0);
    }
    EXPECT_TRUE(torch::equal(SafetensorsFile::open(path).get("x"), torch::ones({4})));
}

TEST(Safetensors, MisalignedDataIsCopiedNotAliased) {
    TempDir dir("st");
    const auto path = dir.file("mis.safetensors");
    float v[2] = {1.5f, -2.25f};
    std::string data(3, '\x07');
    data.append(reinterpret_cast<const char*>(v), 8);
    std::string header = R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
    header.append((8 - (8 + header.size()) % 8) % 8, ' ');
    write_raw(path, header, data);
    auto f = SafetensorsFile::open(path);
    EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(torch::equal(f.get("b"), torch::tensor({1.5f, -2.25f})));
    EXPECT_EQ(f.get("a")[2].item<int64_t>(), 7);
}

struct BrokenCase {
    const char* label;
    std::string header;
    std::string data;
    int64_t claimed_len;              // -1: the header's real length
    std::vector<std::string> expect;  // substrings of the message
};

TEST(Safetensors, BrokenFilesAreIoErrorsNamingFileAndTensor) {
    TempDir dir("st");
    const std::string eight(8, '\0');
    const std::vector<BrokenCase> cases = {
        {"bad_json", "{\"a\": ", "", -1, {"not valid JSON"}},
        {"not_object", "[1, 2]", "", -1, {"not a JSON object"}},
        {"header_past_end", "{}", "", 1000, {"header length 1000", "past the end"}},
        {"unknown_dtype",
         R"({"w":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})",
         "xx",
         -1,
         {"tensor 'w'", "unsupported safetensors dtype 'U16'"}},
        {"fp8_dtype", R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x", -1, {"'F8_E4M3'"}},
        {"offsets_past_buffer",
         R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
         "1234",
         -1,
         {"tensor 'w'", "out of range", "4 bytes"}},
        {"size_mismatch",
         R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
         eight,
         -1,
         {"tensor 'w'", "span 8 bytes", "needs 12"}},
        {"reversed_offsets",
         R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[5,1]}})",
         eight,
         -1,
         {"tensor 'w'", "out of range"}},
        {"overlap",
         R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
         eight,
         -1,
         {"'a' and 'b' overlap"}},
        {"missing_fields",
         R"({"w":{"dtype":"F32","shape":[1]}})",
         "1234",
         -1,
         {"tensor 'w'", "dtype, shape and data_offsets"}},
        {"negative_dim",
         R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
         "1234",
         -1,
         {"shape entry of tensor 'w'", "non-negative"}},
        {"bad_offsets",
         R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
         "1234",
         -1,
         {"tensor 'w'", "[begin, end]"}},
        {"huge_shape",
         R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
         eight,
         -1,
         {"tensor 'w'", "more than 2^64"}},
        {"metadata_not_string", R"({"__metadata__":{"format":1}})", "", -1, {"__metadata__ value for 'format'"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.label);
        const auto path = dir.file(std::string(c.label) + ".safetensors");
        write_raw(path, c.header, c.data, c.claimed_len);
        auto expect = c.expect;
        expect.push_back(path);
        expect_error<rlpt::IoError>([&] { SafetensorsFile::open(path); }, expect);
    }
    // Files shorter than the length prefix, and files that aren't there.
    const auto short_path = dir.file("short.safetensors");
    std::ofstream(short_path, std::ios::binary) << "abc";
    expect_error<rlpt::IoError>([&] { SafetensorsFile::open(short_path); }, {short_path, "truncated", "3 bytes"});
    const auto empty_path = dir.file("empty.safetensors");
    std::ofstream(empty_path, std::ios::binary).flush();
    expect_error<rlpt::IoError>([&] { SafetensorsFile::open(empty_path); }, {empty_path, "truncated", "0 bytes"});
    expect_error<rlpt::IoError>([&] { SafetensorsFile::open(dir.file("nope.safetensors")); },
                                {"nope.safetensors", "cannot open"});
    // Asking for a tensor that isn't there is the caller's mistake.
    rlpt::model::save_safetensors(dir.file("ok.safetensors"), {{"x", torch::ones({1})}});
    expect_error<rlpt::ValueError>([&] { SafetensorsFile::open(dir.file("ok.safetensors")).get("y"); }, {"'y'"});
}

TEST(Safetensors, WriterRejectsBadInput) {
    TempDir dir("st");
    const auto path = dir.file("w.safetensors");
    expect_error<rlpt::ValueError>(
        [&] {
            rlpt::model::save_safetensors(path, {{"a", torch::ones({1})}, {"a", torch::ones({2})}});
        },
        {"duplicate tensor name 'a'"});
    expect_error<rlpt::ValueError>(
        [&] {
            rlpt::model::save_safetensors(path, {{"__metadata__", torch::ones({1})}});
        },
        {"'__metadata__'"});
    expect_error<rlpt::ValueError>(
        [&] {
            rlpt::model::save_safetensors(path, {{"c", torch::ones({1}, torch::kComplexFloat)}});
        },
        {"cannot be stored"});
    EXPECT_FALSE(fs::exists(path));
    for (const auto& e : fs::directory_iterator(dir.str())) ADD_FAILURE() << "left behind: " << e.path();
}

TEST(Safetensors, NonContiguousAndStridedTensorsAreWrittenByValue) {
    TempDir dir("st");
    auto base = torch::arange(12, torch::kFloat32).view({3, 4});
    rlpt::model::save_safetensors(dir.file("s.safetensors"), {{"t", base.t()}, {"col", base.select(1, 2)}});
    auto f = SafetensorsFile::open(dir.file("s.safetensors"));
    EXPECT_TRUE(torch::equal(f.get("t"), base.t().contiguous()));
    EXPECT_TRUE(torch::equal(f.get("col"), torch::tensor({2.f, 6.f, 10.f})));
}

TEST(Safetensors, ShardedSaveLoadsBackAndResaveRemovesStaleShards) {
    TempDir dir("st");
    NamedTensors tensors;
    for (int i = 0; i < 5; ++i) tensors.emplace_back(fmt::format("layer.{}.w", i), torch::full({10}, float(i)));
    // 40 bytes each, 100-byte shards: [0,1], [2,3], [4].
    auto files = rlpt::model::save_safetensors_sharded(dir.str(), tensors, 100);
    ASSERT_EQ(files.size(), 4u);
    EXPECT_EQ(files[0], "model-00001-of-00003.safetensors");
    EXPECT_EQ(files[3], "model.safetensors.index.json");
    auto index = nlohmann::json::parse(read_bytes(dir.file(files[3])));
    EXPECT_EQ(index["metadata"]["total_size"], 200);
    EXPECT_EQ(index["weight_map"]["layer.2.w"], "model-00002-of-00003.safetensors");

    auto ck = SafetensorsCheckpoint::open(dir.str());
    EXPECT_EQ(ck.names().size(), 5u);
    for (const auto& [name, t] : tensors) EXPECT_TRUE(torch::equal(ck.get(name), t)) << name;
    EXPECT_NE(ck.file_of("layer.0.w"), ck.file_of("layer.4.w"));

    // A tensor bigger than the limit gets its own shard.
    files =
        rlpt::model::save_safetensors_sharded(dir.str(), {{"big", torch::zeros({100})}, {"s", torch::ones({1})}}, 100);
    EXPECT_EQ(files, (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                               "model.safetensors.index.json"}));
    EXPECT_FALSE(fs::exists(dir.file("model-00003-of-00003.safetensors")));
    EXPECT_FALSE(fs::exists(dir.file("model-00001-of-00003.safetensors")));

    // Unsharded save replaces shards and index.
    files = rlpt::model::save_safetensors_sharded(dir.str(), tensors, 0);
    EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir.str())) left.push_back(e.path().filename().string());
    EXPECT_EQ(left, std::vector<std::string>{"model.safetensors"});
    EXPECT_EQ(SafetensorsCheckpoint::open(dir.str()).source(), dir.file("model.safetensors"));
}

TEST(Safetensors, BrokenIndexesAreIoErrors) {
    TempDir dir("st");
    expect_error<rlpt::IoError>([&] { SafetensorsCheckpoint::open(dir.str()); },
                                {dir.str(), "neither model.safetensors nor model.safetensors.index.json"});
    const auto index = dir.file("model.safetensors.index.json");
    std::ofstream(index) << "{ not json";
    expect_error<rlpt::IoError>([&] { SafetensorsCheckpoint::open(dir.str()); }, {index, "not valid JSON"});
    std::ofstream(index) << R"({"metadata": {}})";
    expect_error<rlpt::IoError>([&] { SafetensorsCheckpoint::open(dir.str()); }, {index, "weight_map"});
    std::ofstream(index) << R"({"weight_map": {"a": "shard-1.safetensors"}})";
    expect_error<rlpt::IoError>([&] { SafetensorsCheckpoint::open(dir.str()); },
                                {"tensor 'a'", "shard-1.safetensors", "does not exist"});
    rlpt::model::save_safetensors(dir.file("shard-1.safetensors"), {{"b", torch::ones({1})}});
    expect_error<rlpt::IoError>([&] { SafetensorsCheckpoint::open(dir.str()); },
                                {"tensor 'a'", "shard-1.safetensors", "does not contain it"});
    std::ofstream(index) << R"({"weight_map": {"a": "../x.safetensors"}})";
    expect_error<rlpt::IoError>([&] { SafetensorsCheckpoint::open(dir.str()); }, {"plain file name"});
    std::ofstream(index) << R"({"weight_map": {"b": "shard-1.safetensors"}})";
    auto ck = SafetensorsCheckpoint::open(dir.str());
    EXPECT_EQ(ck.names(), std::vector<std::string>{"b"});
    expect_error<rlpt::ValueError>([&] { ck.get("a"); }, {"no tensor 'a'"});
}
