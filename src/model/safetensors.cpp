// Safetensors reader: mmap + header validation. The writer is in safetensors_write.cpp.
#include "rlpt/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rlpt/core/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace rlpt::model {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace detail {
struct FileMapping {
    void* addr = nullptr;
    size_t size = 0;
    FileMapping() = default;
    FileMapping(const FileMapping&) = delete;
    FileMapping& operator=(const FileMapping&) = delete;
    ~FileMapping() {
        if (addr != nullptr && addr != MAP_FAILED) munmap(addr, size);
    }
};
}  // namespace detail

namespace {

constexpr int kMaxHeaderDepth = 16;

struct DtypeName {
    const char* name;
    torch::Dtype dtype;
};
constexpr DtypeName kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool},
};

std::shared_ptr<detail::FileMapping> map_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    RLPT_CHECK_KIND(IoError, fd >= 0, "cannot open safetensors file '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        RLPT_THROW(IoError, "cannot stat '{}': {}", path, std::strerror(err));
    }
    auto m = std::make_shared<detail::FileMapping>();
    m->size = static_cast<size_t>(st.st_size);
    if (m->size > 0) {
        // Private, writable mapping: writes to returned tensors copy pages, never reach the file.
        m->addr = mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (m->addr == MAP_FAILED) {
            int err = errno;
            ::close(fd);
            RLPT_THROW(IoError, "cannot mmap '{}' ({} bytes): {}", path, m->size, std::strerror(err));
        }
    }
    ::close(fd);
    return m;
}

uint64_t json_u64(const json& v, const std::string& path, const std::string& what) {
    RLPT_CHECK_KIND(IoError, v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                    "safetensors file '{}': {} must be a non-negative integer, got {}", path, what, v.dump());
    return v.get<uint64_t>();
}

torch::Tensor alias_or_copy(const std::shared_ptr<detail::FileMapping>& mapping, const uint8_t* data,
                            const SafetensorsTensorInfo& info) {
    auto opts = torch::TensorOptions().dtype(info.dtype).device(torch::kCPU);
    if (info.end == info.begin) return torch::empty(info.shape, opts);
    void* ptr = const_cast<uint8_t*>(data + info.begin);
    size_t elem = torch::elementSize(info.dtype);
    if (reinterpret_cast<uintptr_t>(ptr) % elem != 0) {
        auto out = torch::empty(info.shape, opts);
        std::memcpy(out.data_ptr(), ptr, info.end - info.begin);
        return out;
    }
    std::shared_ptr<detail::FileMapping> keep = mapping;
    return torch::from_blob(
        ptr, info.shape, [keep](void*) mutable { keep.reset(); }, opts);
}

}  // namespace

torch::Dtype safetensors_dtype_from_string(const std::string& s, const std::string& where) {
    for (const auto& d : kDtypes)
        if (s == d.name) return d.dtype;
    RLPT_THROW(IoError, "{}: unsupported safetensors dtype '{}' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)",
               where, s);
}

std::string safetensors_dtype_to_string(torch::Dtype dtype) {
    for (const auto& d : kDtypes)
        if (dtype == d.dtype) return d.name;
    RLPT_THROW(ValueError, "tensor dtype {} cannot be stored in safetensors by rlpt", c10::toString(dtype));
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    SafetensorsFile f;
    f.path_ = path;
    f.mapping_ = map_file(path);
    const size_t file_size = f.mapping_->size;
    const auto* base = static_cast<const uint8_t*>(f.mapping_->addr);
    RLPT_CHECK_KIND(IoError, file_size >= 8, "safetensors file '{}' is truncated: {} bytes, need at least 8", path,
                    file_size);
    uint64_t header_len = 0;
    std::memcpy(&header_len, base, 8);
    RLPT_CHECK_KIND(IoError, header_len <= file_size - 8,
                    "safetensors file '{}': header length {} runs past the end of the file ({} bytes)", path,
                    header_len, file_size);
    const char* hdr = reinterpret_cast<const char*>(base + 8);
    json header;
    // A header is 3 levels deep; refuse deep nesting while parsing (dump() in the error
    // messages below recurses per level and would overflow the stack on a hostile file).
    auto depth_guard = [&](int depth, json::parse_event_t event, json&) {
        if (depth > kMaxHeaderDepth &&
            (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start)) {
            RLPT_THROW(IoError, "safetensors file '{}': header is nested deeper than {} levels", path, kMaxHeaderDepth);
        }
        return true;
    };
    try {
        header = json::parse(hdr, hdr + header_len, depth_guard);
    } catch (const json::exception& e) {
        RLPT_THROW(IoError, "safetensors file '{}': header is not valid JSON: {}", path, e.what());
    }
    RLPT_CHECK_KIND(IoError, header.is_object(), "safetensors file '{}': header is not a JSON object", path);
    f.data_ = base + 8 + header_len;
    const uint64_t buffer_size = file_size - 8 - header_len;

    std::vector<std::pair<std::string, SafetensorsTensorInfo>> entries;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const json& v = it.value();
        if (name == "__metadata__") {
            RLPT_CHECK_KIND(IoError, v.is_object(), "safetensors file '{}': __metadata__ is not an object", path);
            for (auto m = v.begin(); m != v.end(); ++m) {
                RLPT_CHECK_KIND(IoError, m.value().is_string(),
                                "safetensors file '{}': __metadata__ value for '{}' is not a string", path, m.key());
                f.metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string where = fmt::format("safetensors file '{}', tensor '{}'", path, name);
        RLPT_CHECK_KIND(IoError,
                        v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                        "{}: entry must be an object with dtype, shape and data_offsets", where);
        RLPT_CHECK_KIND(IoError, v["dtype"].is_string(), "{}: dtype is not a string", where);
        SafetensorsTensorInfo info;
        info.dtype = safetensors_dtype_from_string(v["dtype"].get<std::string>(), where);
        RLPT_CHECK_KIND(IoError, v["shape"].is_array(), "{}: shape is not an array", where);
        uint64_t numel = 1;
        bool overflow = false;
        for (const auto& d : v["shape"]) {
            uint64_t dim = json_u64(d, path, fmt::format("a shape entry of tensor '{}'", name));
            RLPT_CHECK_KIND(IoError, dim <= static_cast<uint64_t>(INT64_MAX), "{}: dimension {} too large", where, dim);
            info.shape.push_back(static_cast<int64_t>(dim));
            overflow |= __builtin_mul_overflow(numel, dim, &numel);
        }
        const auto& off = v["data_offsets"];
        RLPT_CHECK_KIND(IoError, off.is_array() && off.size() == 2, "{}: data_offsets must be [begin, end]", where);
        info.begin = json_u64(off[0], path, fmt::format("data_offsets of tensor '{}'", name));
        info.end = json_u64(off[1], path, fmt::format("data_offsets of tensor '{}'", name));
        RLPT_CHECK_KIND(IoError, info.begin <= info.end && info.end <= buffer_size,
                        "{}: data_offsets [{}, {}] out of range (data buffer is {} bytes)", where, info.begin, info.end,
                        buffer_size);
        uint64_t nbytes = 0;
        overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(torch::elementSize(info.dtype)), &nbytes);
        RLPT_CHECK_KIND(IoError, !overflow && nbytes == info.end - info.begin,
                        "{}: data_offsets span {} bytes but shape {} x {} needs {}", where, info.end - info.begin,
                        v["shape"].dump(), v["dtype"].get<std::string>(),
                        overflow ? std::string("more than 2^64") : std::to_string(nbytes));
        entries.emplace_back(name, std::move(info));
    }
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
        return a.second.begin != b.second.begin ? a.second.begin < b.second.begin : a.first < b.first;
    });
    uint64_t prev_end = 0;
    const std::string* prev_name = nullptr;
    for (const auto& [name, info] : entries) {
        if (prev_name != nullptr && info.begin < prev_end)
            RLPT_THROW(IoError,
                       "safetensors file '{}': tensors '{}' and '{}' overlap (bytes [{}, {}) and ending at {})", path,
                       *prev_name, name, info.begin, info.end, prev_end);
        if (info.end > info.begin) {
            prev_end = info.end;
            prev_name = &name;
        }
    }
    for (auto& [name, info] : entries) {
        f.names_.push_back(name);
        f.infos_.emplace(name, info);
    }
    return f;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
    auto it = infos_.find(name);
    RLPT_CHECK(it != infos_.end(), "safetensors file '{}' has no tensor '{}'", path_, name);
    return it->second;
}

torch::Tensor SafetensorsFile::get(const std::string& name) const { return alias_or_copy(mapping_, data_, info(name)); }

torch::Tensor SafetensorsFile::get(const std::string& name, torch::Dtype dtype, torch::Device device) const {
    return get(name).to(device, dtype);
}

// ---- sharded checkpoints -------------------------------------------------------------------

namespace {

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    RLPT_CHECK_KIND(IoError, in.good(), "cannot open '{}'", path);
    std::stringstream ss;
    ss << in.rdbuf();
    RLPT_CHECK_KIND(IoError, !in.bad(), "error reading '{}'", path);
    return ss.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
    std::string target = path;
    if (fs::is_directory(path)) {
        fs::path single = fs::path(path) / "model.safetensors";
        fs::path index = fs::path(path) / "model.safetensors.index.json";
        if (fs::exists(single)) {
            target = single.string();
        } else if (fs::exists(index)) {
            target = index.string();
        } else {
            RLPT_THROW(IoError,
                       "checkpoint directory '{}' has neither model.safetensors nor "
                       "model.safetensors.index.json",
                       path);
        }
    }
    SafetensorsCheckpoint ck;
    ck.source_ = target;
    if (!ends_with(target, ".json")) {
        ck.files_.push_back(SafetensorsFile::open(target));
        for (const auto& n : ck.files_[0].names()) ck.where_[n] = 0;
    } else {
        RLPT_CHECK_KIND(IoError, fs::exists(target), "safetensors index '{}' does not exist", target);
        json index;
        try {
            index = json::parse(read_text_file(target));
        } catch (const json::exception& e) {
            RLPT_THROW(IoError, "safetensors index '{}' is not valid JSON: {}", target, e.what());
        }
        RLPT_CHECK_KIND(IoError, index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                        "safetensors index '{}' has no \"weight_map\" object", target);
        const fs::path dir = fs::path(target).parent_path();
        std::map<std::string, size_t> shard_ids;
        std::map<std::string, std::string> mapped;  // tensor -> shard file name
        for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
            RLPT_CHECK_KIND(IoError, it.value().is_string(),
                            "safetensors index '{}': weight_map entry '{}' is not a string", target, it.key());
            const std::string shard = it.value().get<std::string>();
            RLPT_CHECK_KIND(IoError, shard.find('/') == std::string::npos && shard != ".." && !shard.empty(),
                            "safetensors index '{}': shard name '{}' for tensor '{}' must be a plain file name", target,
                            shard, it.key());
            if (!shard_ids.count(shard)) {
                const fs::path shard_path = dir / shard;
                RLPT_CHECK_KIND(IoError, fs::exists(shard_path),
                                "safetensors index '{}' maps tensor '{}' to shard '{}', which does not exist", target,
                                it.key(), shard_path.string());
                shard_ids[shard] = ck.files_.size();
                ck.files_.push_back(SafetensorsFile::open(shard_path.string()));
            }
            const size_t id = shard_ids[shard];
            RLPT_CHECK_KIND(IoError, ck.files_[id].contains(it.key()),
                            "safetensors index '{}' maps tensor '{}' to '{}', which does not contain it", target,
                            it.key(), ck.files_[id].path());
            ck.where_[it.key()] = id;
        }
    }
    for (const auto& kv : ck.where_) ck.names_.push_back(kv.first);
    return ck;
}

namespace {
size_t checked_file(const std::map<std::string, size_t>& where, const std::string& source, const std::string& name) {
    auto it = where.find(name);
    RLPT_CHECK(it != where.end(), "checkpoint '{}' has no tensor '{}'", source, name);
    return it->second;
}
}  // namespace

const SafetensorsTensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
    return files_[checked_file(where_, source_, name)].info(name);
}

const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const {
    return files_[checked_file(where_, source_, name)].path();
}

torch::Tensor SafetensorsCheckpoint::get(const std::string& name) const {
    return files_[checked_file(where_, source_, name)].get(name);
}

torch::Tensor SafetensorsCheckpoint::get(const std::string& name, torch::Dtype dtype, torch::Device device) const {
    return get(name).to(device, dtype);
}

}  // namespace rlpt::model
