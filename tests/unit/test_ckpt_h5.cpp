// HDF5 checkpoint files: round trips of every dtype, blobs and attributes, atomic commit, and the
// IoErrors of damaged or foreign files.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>

#include "rlpt/ckpt/crc32.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/core/error.h"

namespace fs = std::filesystem;
using rlpt::ckpt::EntryKind;
using rlpt::ckpt::H5Reader;
using rlpt::ckpt::H5Writer;

namespace {

class TempDir {
  public:
    TempDir() {
        static std::atomic<int> counter{0};
        path_ = fs::temp_directory_path() /
                ("rlpt_ckpt_h5_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    fs::path path_;
};

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
}

// Expects `fn` to throw E whose message contains every fragment.
template <class E, class F>
void expect_error(F&& fn, std::initializer_list<std::string> fragments) {
    try {
        fn();
        ADD_FAILURE() << "expected an exception mentioning " << *fragments.begin();
    } catch (const E& e) {
        for (const auto& f : fragments) {
            EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "'" << f << "' not in: " << e.what();
        }
    }
}

uint32_t bitwise_crc32(const std::string& s) {
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : s) {
        c ^= b;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    return ~c;
}

TEST(Crc32, KnownValuesAndChaining) {
    EXPECT_EQ(rlpt::ckpt::crc32("123456789", 9), 0xCBF43926u);
    EXPECT_EQ(rlpt::ckpt::crc32("", 0), 0u);
    EXPECT_EQ(rlpt::ckpt::crc32("a", 1), 0xE8B7BE43u);
    std::string data;
    for (int i = 0; i < 1000; ++i) data.push_back(char((i * 131 + 7) & 0xFF));
    for (size_t len : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(999)}) {
        for (size_t off : {size_t(0), size_t(1), size_t(3)}) {
            const std::string piece = data.substr(off, len);
            EXPECT_EQ(rlpt::ckpt::crc32(piece.data(), piece.size()), bitwise_crc32(piece));
        }
    }
    const uint32_t head = rlpt::ckpt::crc32(data.data(), 300);
    EXPECT_EQ(rlpt::ckpt::crc32(data.data() + 300, 700, head), bitwise_crc32(data));
}

torch::Tensor sample(torch::ScalarType dtype, torch::IntArrayRef sizes) {
    const auto opts = torch::TensorOptions().dtype(dtype);
    if (dtype == torch::kBool) return torch::randint(0, 2, sizes).to(torch::kBool);
    if (c10::isIntegralType(dtype, /*includeBool=*/false)) {
        const int64_t lo = dtype == torch::kByte ? 0 : -100;
        return torch::randint(lo, 100, sizes, opts);
    }
    return torch::randn(sizes, opts) * 3;
}

TEST(CkptH5, RoundTripEveryDtypeAndShape) {
    TempDir dir;
    const std::string path = dir.file("rt.h5");
    const std::vector<torch::ScalarType> dtypes = {torch::kFloat,    torch::kDouble,       torch::kHalf,
                                                   torch::kBFloat16, torch::kBool,         torch::kByte,
                                                   torch::kChar,     torch::kShort,        torch::kInt,
                                                   torch::kLong,     torch::kComplexFloat, torch::kComplexDouble};
    const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {}, {0, 4}, {7}, {2, 1, 3}};
    torch::manual_seed(1);
    std::map<std::string, torch::Tensor> written;
    {
        H5Writer w(path);
        for (auto dtype : dtypes) {
            for (size_t s = 0; s < shapes.size(); ++s) {
                const std::string name = std::string("actor/optimizer/") + c10::toString(dtype) + "/model.layers." +
                                         std::to_string(s) + ".weight";
                written[name] = sample(dtype, shapes[s]);
                w.write_tensor(name, written[name]);
            }
        }
        w.commit();
    }
    H5Reader r(path);
    EXPECT_EQ(r.format_version(), rlpt::ckpt::kFormatVersion);
    EXPECT_EQ(r.list().size(), written.size());
    for (const auto& [name, want] : written) {
        SCOPED_TRACE(name);
        const torch::Tensor got = r.read_tensor(name);
        EXPECT_EQ(got.scalar_type(), want.scalar_type());
        EXPECT_EQ(got.sizes(), want.sizes());
        EXPECT_TRUE(got.is_contiguous());
        EXPECT_TRUE(torch::equal(got, want));
        const auto meta = r.tensor_meta(name);
        EXPECT_EQ(meta.dtype, want.scalar_type());
        EXPECT_EQ(meta.sizes, want.sizes().vec());
    }
}

TEST(CkptH5, TensorsAreWrittenByValue) {
    TempDir dir;
    const std::string path = dir.file("views.h5");
    const torch::Tensor base = torch::arange(12, torch::kFloat).reshape({3, 4});
    const torch::Tensor param = torch::randn({4}).requires_grad_(true);
    const torch::Tensor z = torch::complex(torch::randn({3}), torch::randn({3})).conj();
    {
        H5Writer w(path);
        w.write_tensor("transposed", base.t());
        w.write_tensor("strided", base.slice(1, 0, 4, 2));
        w.write_tensor("param", param);
        w.write_tensor("conj", z);
        w.commit();
    }
    H5Reader r(path);
    EXPECT_TRUE(torch::equal(r.read_tensor("transposed"), base.t()));
    EXPECT_TRUE(torch::equal(r.read_tensor("strided"), base.slice(1, 0, 4, 2)));
    EXPECT_TRUE(torch::equal(r.read_tensor("param"), param.detach()));
    EXPECT_FALSE(r.read_tensor("param").requires_grad());
    EXPECT_TRUE(torch::equal(r.read_tensor("conj"), z.resolve_conj()));
}

TEST(CkptH5, BlobsAttributesAndListing) {
    TempDir dir;
    const std::string path = dir.file("blobs.h5");
    const std::string binary("rng\0state\xff\x01", 12);
    const std::string json = R"({"epoch": 3, "offset": 1234})";
    {
        H5Writer w(path);
        w.write_blob("actor/rng/cpu", binary);
        w.write_blob("data/position", json);
        w.write_blob("empty", "");
        w.write_tensor("actor/model/w", torch::ones({2}));
        w.set_int_attr("step", 41);
        w.set_int_attr("step", 42);  // replaced
        w.set_int_attr("min", std::numeric_limits<int64_t>::min());
        w.set_double_attr("lr", 1e-6);
        w.set_double_attr("kl", -std::numeric_limits<double>::infinity());
        w.set_string_attr("config_hash", "9f2c\xc3\xa9");
        w.set_string_attr("note", "");
        w.commit();
    }
    H5Reader r(path);
    EXPECT_EQ(r.read_blob("actor/rng/cpu"), binary);
    EXPECT_EQ(r.read_blob("data/position"), json);
    EXPECT_EQ(r.read_blob("empty"), "");
    EXPECT_EQ(r.int_attr("step"), 42);
    EXPECT_EQ(r.int_attr("min"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(r.double_attr("lr"), 1e-6);
    EXPECT_EQ(r.double_attr("kl"), -std::numeric_limits<double>::infinity());
    EXPECT_EQ(r.string_attr("config_hash"), "9f2c\xc3\xa9");
    EXPECT_EQ(r.string_attr("note"), "");
    EXPECT_TRUE(r.has_attr("lr"));
    EXPECT_FALSE(r.has_attr("missing"));
    EXPECT_EQ(r.attr_names(), (std::vector<std::string>{"config_hash", "kl", "lr", "min", "note", "step"}));

    EXPECT_EQ(r.list(), (std::vector<std::string>{"actor/model/w", "actor/rng/cpu", "data/position", "empty"}));
    EXPECT_EQ(r.list("actor"), (std::vector<std::string>{"actor/model/w", "actor/rng/cpu"}));
    EXPECT_EQ(r.list("actor/rng"), (std::vector<std::string>{"actor/rng/cpu"}));
    EXPECT_TRUE(r.list("nothing/here").empty());
    EXPECT_TRUE(r.contains("actor/rng/cpu"));
    EXPECT_FALSE(r.contains("actor/rng"));  // a group
    EXPECT_FALSE(r.contains("actor/rng/cpu/x"));
    EXPECT_FALSE(r.contains("nope/deeper"));
    EXPECT_EQ(r.kind("actor/rng/cpu"), EntryKind::kBlob);
    EXPECT_EQ(r.kind("actor/model/w"), EntryKind::kTensor);

    expect_error<rlpt::IoError>([&] { r.int_attr("lr"); }, {"attribute 'lr' is a double, not a int64"});
    expect_error<rlpt::IoError>([&] { r.string_attr("step"); }, {"'step' is a int64, not a string"});
    expect_error<rlpt::IoError>([&] { r.double_attr("nope"); }, {"no attribute 'nope'"});
    expect_error<rlpt::IoError>([&] { r.read_tensor("actor/rng/cpu"); }, {"is a blob, not a tensor"});
    expect_error<rlpt::IoError>([&] { r.read_blob("actor/model/w"); }, {"is a tensor, not a blob"});
    expect_error<rlpt::IoError>([&] { r.read_tensor("actor/model/missing"); },
                                {"no tensor named 'actor/model/missing'", path});
    expect_error<rlpt::IoError>([&] { r.read_tensor("actor/model"); }, {"'actor/model' is a group"});
}

TEST(CkptH5, NothingVisibleBeforeCommit) {
    TempDir dir;
    const std::string path = dir.file("atomic.h5");
    H5Writer w(path);
    w.write_tensor("x", torch::arange(5));
    EXPECT_FALSE(fs::exists(path));
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    const auto digest = w.commit();
    EXPECT_TRUE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_EQ(digest, rlpt::ckpt::file_digest(path));
    EXPECT_EQ(digest.size, fs::file_size(path));
    expect_error<rlpt::ValueError>([&] { w.write_tensor("y", torch::ones({1})); }, {"already committed"});
    expect_error<rlpt::ValueError>([&] { w.commit(); }, {"already committed"});
}

TEST(CkptH5, AbandonedWriterLeavesThePreviousFile) {
    TempDir dir;
    const std::string path = dir.file("keep.h5");
    {
        H5Writer w(path);
        w.write_tensor("v", torch::full({3}, 1.0));
        w.commit();
    }
    try {
        H5Writer w(path);
        w.write_tensor("v", torch::full({3}, 2.0));
        throw std::runtime_error("crash before commit");
    } catch (const std::runtime_error&) {
    }
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_TRUE(torch::equal(H5Reader(path).read_tensor("v"), torch::full({3}, 1.0)));
    {
        H5Writer w(path);
        w.write_tensor("v", torch::full({3}, 3.0));
        w.commit();  // replaces the old file
    }
    EXPECT_TRUE(torch::equal(H5Reader(path).read_tensor("v"), torch::full({3}, 3.0)));

    H5Writer moved_from(dir.file("moved.h5"));
    H5Writer moved_to = std::move(moved_from);
    expect_error<rlpt::ValueError>([&] { moved_from.write_blob("b", "x"); }, {"moved from"});
    moved_to.write_blob("b", "x");
    moved_to.commit();
    H5Reader reader(dir.file("moved.h5"));
    H5Reader reader2 = std::move(reader);
    EXPECT_EQ(reader2.read_blob("b"), "x");
    expect_error<rlpt::ValueError>([&] { reader.list(); }, {"moved from"});
}

TEST(CkptH5, WriterRejectsBadArguments) {
    TempDir dir;
    H5Writer w(dir.file("bad.h5"));
    w.write_tensor("a/b", torch::ones({1}));
    expect_error<rlpt::ValueError>([&] { w.write_tensor("a/b", torch::ones({1})); }, {"'a/b' was already written"});
    expect_error<rlpt::ValueError>([&] { w.write_blob("a/b/c", "x"); }, {"'a/b' is a dataset"});
    expect_error<rlpt::ValueError>([&] { w.write_blob("a", "x"); }, {"'a' is already a group"});
    for (const std::string& bad :
         std::vector<std::string>{"", "/a", "a/", "a//b", "a/./b", "../a", std::string("a\0b", 3)}) {
        EXPECT_THROW(w.write_tensor(bad, torch::ones({1})), rlpt::ValueError) << bad;
    }
    expect_error<rlpt::ValueError>([&] { w.write_tensor("u", torch::Tensor()); }, {"'u' is undefined"});
    const torch::Tensor q = torch::quantize_per_tensor(torch::ones({2}), 0.1, 0, torch::kQInt8);
    expect_error<rlpt::ValueError>([&] { w.write_tensor("q", q); }, {"does not support"});
    expect_error<rlpt::ValueError>([&] { w.set_int_attr("rlpt_format_version", 2); }, {"reserved prefix"});
    expect_error<rlpt::ValueError>([&] { w.set_string_attr("s", std::string("a\0b", 3)); }, {"NUL"});
    expect_error<rlpt::IoError>([&] { H5Writer(dir.file("no/such/dir/x.h5")); }, {"does not exist"});
}

// ---- damaged and foreign files ----------------------------------------------------------------

std::string write_sample(const TempDir& dir, const std::string& name) {
    const std::string path = dir.file(name);
    H5Writer w(path);
    w.write_tensor("actor/w", torch::arange(4096, torch::kFloat) * 1.25f + 3.0f);
    w.write_tensor("actor/b", torch::arange(16, torch::kLong));
    w.set_int_attr("step", 7);
    w.commit();
    return path;
}

// Rewrites a root attribute of an existing file with the raw HDF5 API.
void overwrite_root_attr(const std::string& path, const char* name, const std::function<void(hid_t)>& write) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Adelete(f, name), 0);
    write(f);
    ASSERT_GE(H5Fclose(f), 0);
}

TEST(CkptH5, ChecksumMismatchNamesTheDataset) {
    TempDir dir;
    const std::string path = write_sample(dir, "flip.h5");
    std::string bytes = read_bytes(path);
    const torch::Tensor w = torch::arange(4096, torch::kFloat) * 1.25f + 3.0f;
    const std::string pattern(static_cast<const char*>(w.data_ptr()), 256);
    const size_t at = bytes.find(pattern);
    ASSERT_NE(at, std::string::npos);
    bytes[at + 1000] ^= 0x10;
    write_bytes(path, bytes);
    H5Reader r(path);
    expect_error<rlpt::IoError>([&] { r.read_tensor("actor/w"); },
                                {"checksum mismatch in dataset 'actor/w'", path, "corrupt"});
    EXPECT_TRUE(torch::equal(r.read_tensor("actor/b"), torch::arange(16, torch::kLong)));
}

TEST(CkptH5, ForeignAndDamagedFilesAreClearIoErrors) {
    TempDir dir;
    expect_error<rlpt::IoError>([&] { H5Reader(dir.file("missing.h5")); }, {"does not exist"});
    write_bytes(dir.file("text.h5"), "not an HDF5 file at all");
    expect_error<rlpt::IoError>([&] { H5Reader(dir.file("text.h5")); }, {"is not an HDF5 file"});

    const std::string plain = dir.file("plain.h5");
    H5Fclose(H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    expect_error<rlpt::IoError>([&] { H5Reader r(plain); }, {"not an rlpt checkpoint"});

    const std::string version = write_sample(dir, "version.h5");
    overwrite_root_attr(version, "rlpt_format_version", [](hid_t f) {
        const hid_t space = H5Screate(H5S_SCALAR);
        const hid_t a = H5Acreate2(f, "rlpt_format_version", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
        const int64_t v = 99;
        H5Awrite(a, H5T_NATIVE_INT64, &v);
        H5Aclose(a);
        H5Sclose(space);
    });
    expect_error<rlpt::IoError>([&] { H5Reader r(version); },
                                {"format version 99 is not supported", "reads version 1"});

    const std::string magic = write_sample(dir, "magic.h5");
    overwrite_root_attr(magic, "rlpt_magic", [](hid_t f) {
        const hid_t space = H5Screate(H5S_SCALAR);
        const hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);  // variable length, as h5py writes strings
        const hid_t a = H5Acreate2(f, "rlpt_magic", t, space, H5P_DEFAULT, H5P_DEFAULT);
        const char* v = "someone-else";
        H5Awrite(a, t, &v);
        H5Aclose(a);
        H5Tclose(t);
        H5Sclose(space);
    });
    expect_error<rlpt::IoError>([&] { H5Reader r(magic); }, {"wrong magic 'someone-else'"});

    const std::string truncated = write_sample(dir, "truncated.h5");
    const std::string bytes = read_bytes(truncated);
    write_bytes(truncated, bytes.substr(0, bytes.size() / 2));
    testing::internal::CaptureStderr();
    expect_error<rlpt::IoError>([&] { H5Reader r(truncated); }, {"opening checkpoint file", "truncated"});
    // HDF5's own error stack goes into the exception, not to stderr.
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace

// Range reads of 1-D tensors (sharded checkpoints read only the elements they need).
TEST(H5Store, ReadTensorRange) {
    TempDir dir;
    const std::string path = dir.file("range.h5");
    const auto f = torch::arange(10, torch::kFloat32);
    const auto b = torch::arange(6, torch::kFloat32).to(torch::kBFloat16);
    {
        H5Writer w(path);
        w.write_tensor("a/f", f);
        w.write_tensor("a/b", b);
        w.write_tensor("a/m", torch::zeros({2, 3}));
        w.commit();
    }
    H5Reader r(path);
    EXPECT_TRUE(torch::equal(r.read_tensor_range("a/f", 3, 4), f.narrow(0, 3, 4)));
    EXPECT_TRUE(torch::equal(r.read_tensor_range("a/b", 5, 1), b.narrow(0, 5, 1)));
    EXPECT_EQ(r.read_tensor_range("a/f", 10, 0).numel(), 0);
    expect_error<rlpt::IoError>([&] { r.read_tensor_range("a/f", 8, 3); }, {"[8, 11)", "a/f", "10 elements"});
    expect_error<rlpt::IoError>([&] { r.read_tensor_range("a/m", 0, 1); }, {"a/m", "not a 1-D"});
}
