// Safetensors writer: atomic single files and Hugging Face-style shards + index.
#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include <fmt/ranges.h>

#include "rlpt/core/error.h"
#include "rlpt/model/safetensors.h"

namespace rlpt::model {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// An open temp file that is removed unless commit() renamed it into place.
class AtomicFile {
  public:
    explicit AtomicFile(std::string path)
        : path_(std::move(path)), tmp_(fmt::format("{}.tmp.{}", path_, static_cast<long>(getpid()))) {
        fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        RLPT_CHECK_KIND(IoError, fd_ >= 0, "cannot create '{}': {}", tmp_, std::strerror(errno));
    }
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile() {
        if (fd_ >= 0) ::close(fd_);
        if (!committed_) ::unlink(tmp_.c_str());
    }
    void write(const void* data, size_t n) {
        const char* p = static_cast<const char*>(data);
        while (n > 0) {
            ssize_t w = ::write(fd_, p, n);
            if (w < 0 && errno == EINTR) continue;
            RLPT_CHECK_KIND(IoError, w > 0, "writing '{}' failed: {}", tmp_, std::strerror(errno));
            p += w;
            n -= static_cast<size_t>(w);
        }
    }
    void commit() {
        RLPT_CHECK_KIND(IoError, ::fsync(fd_) == 0, "fsync '{}' failed: {}", tmp_, std::strerror(errno));
        int rc = ::close(fd_);
        fd_ = -1;
        RLPT_CHECK_KIND(IoError, rc == 0, "closing '{}' failed: {}", tmp_, std::strerror(errno));
        RLPT_CHECK_KIND(IoError, ::rename(tmp_.c_str(), path_.c_str()) == 0, "renaming '{}' to '{}' failed: {}", tmp_,
                        path_, std::strerror(errno));
        committed_ = true;
    }

  private:
    std::string path_;
    std::string tmp_;
    int fd_ = -1;
    bool committed_ = false;
};

uint64_t tensor_bytes(const torch::Tensor& t) {
    return static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(t.element_size());
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
    AtomicFile f(path);
    f.write(text.data(), text.size());
    f.commit();
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, const TensorFetch& fetch) {
    // Data order: larger elements first (stable), so every tensor starts at a multiple of its
    // element size and readers can alias it without copying.
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return tensors[a].second.element_size() > tensors[b].second.element_size();
    });
    json header = json::object();
    if (!metadata.empty()) {
        json meta = json::object();
        for (const auto& [k, v] : metadata) meta[k] = v;
        header["__metadata__"] = meta;
    }
    std::vector<torch::Tensor> data(tensors.size());
    uint64_t offset = 0;
    for (size_t i : order) {
        const auto& [name, t] = tensors[i];
        RLPT_CHECK(!name.empty() && name != "__metadata__", "cannot save tensor named '{}' to '{}'", name, path);
        RLPT_CHECK(!header.contains(name), "duplicate tensor name '{}' when saving '{}'", name, path);
        RLPT_CHECK(t.defined(), "tensor '{}' is undefined (saving '{}')", name, path);
        json entry;
        entry["dtype"] = safetensors_dtype_to_string(t.scalar_type());
        entry["shape"] = t.sizes().vec();
        const uint64_t n = tensor_bytes(t);
        entry["data_offsets"] = {offset, offset + n};
        offset += n;
        header[name] = entry;
        if (!fetch) data[i] = t.detach().to(torch::kCPU).contiguous();
    }
    std::string text = header.dump();
    text.append((8 - (8 + text.size()) % 8) % 8, ' ');
    const uint64_t header_len = text.size();

    AtomicFile f(path);
    f.write(&header_len, 8);
    f.write(text.data(), text.size());
    for (size_t i : order) {
        if (fetch) {
            const auto& [name, t] = tensors[i];
            data[i] = fetch(i).detach().to(torch::kCPU).contiguous();
            RLPT_CHECK(data[i].sizes() == t.sizes() && data[i].scalar_type() == t.scalar_type(),
                       "tensor '{}' fetched as {} {}, declared {} {} (saving '{}')", name,
                       c10::toString(data[i].scalar_type()), data[i].sizes(), c10::toString(t.scalar_type()), t.sizes(),
                       path);
        }
        if (data[i].numel() > 0) f.write(data[i].data_ptr(), tensor_bytes(data[i]));
        if (fetch) data[i] = torch::Tensor();
    }
    f.commit();
}

std::vector<std::string> save_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                                                  uint64_t max_shard_bytes, const std::string& base,
                                                  const TensorFetch& fetch) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    RLPT_CHECK_KIND(IoError, !ec && fs::is_directory(dir), "cannot create directory '{}': {}", dir, ec.message());

    std::vector<NamedTensors> shards(1);
    std::vector<size_t> first_of_shard{0};  // index into `tensors` of each shard's first tensor
    uint64_t current = 0, total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& nt = tensors[i];
        const uint64_t n = tensor_bytes(nt.second);
        if (max_shard_bytes > 0 && !shards.back().empty() && current + n > max_shard_bytes) {
            shards.emplace_back();
            first_of_shard.push_back(i);
            current = 0;
        }
        shards.back().push_back(nt);
        current += n;
        total += n;
    }

    auto shard_fetch = [&](size_t s) -> TensorFetch {
        if (!fetch) return nullptr;
        return [&fetch, off = first_of_shard[s]](size_t i) { return fetch(off + i); };
    };
    std::vector<std::string> written;
    if (shards.size() == 1) {
        written.push_back(base + ".safetensors");
        save_safetensors((fs::path(dir) / written[0]).string(), shards[0], {{"format", "pt"}}, shard_fetch(0));
    } else {
        json weight_map = json::object();
        for (size_t i = 0; i < shards.size(); ++i) {
            std::string name = fmt::format("{}-{:05d}-of-{:05d}.safetensors", base, i + 1, shards.size());
            save_safetensors((fs::path(dir) / name).string(), shards[i], {{"format", "pt"}}, shard_fetch(i));
            for (const auto& nt : shards[i]) weight_map[nt.first] = name;
            written.push_back(name);
        }
        json index;
        index["metadata"] = {{"total_size", total}};
        index["weight_map"] = weight_map;
        written.push_back(base + ".safetensors.index.json");
        write_file_atomic((fs::path(dir) / written.back()).string(), index.dump(2) + "\n");
    }

    // Remove what an earlier save with the same base name left behind.
    const std::set<std::string> keep(written.begin(), written.end());
    const std::regex shard_re(std::regex_replace(base, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                              R"(-\d{5}-of-\d{5}\.safetensors)");
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (keep.count(name)) continue;
        if (name == base + ".safetensors" || name == base + ".safetensors.index.json" ||
            std::regex_match(name, shard_re)) {
            fs::remove(entry.path(), ec);
            RLPT_CHECK_KIND(IoError, !ec, "cannot remove stale checkpoint file '{}': {}", entry.path().string(),
                            ec.message());
        }
    }
    return written;
}

}  // namespace rlpt::model
