// Transport-independent parts of the weight sync: layout description and agreement, the
// message plan, checksums, the "auto" backend and the factory (the protocol itself:
// sync_skeleton.cpp).
#include "rlpt/weights/weight_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include "rlpt/core/log.h"
#include "sync_skeleton.h"
#include "weight_sync_plan.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "weights_checksum reads 64-bit words as little-endian");

namespace rlpt::weights {

using comm::Communicator;
using comm::Deadline;
using comm::device_collectives;
using comm::device_collectives_name;
using comm::DeviceCollectives;
using comm::kMaxMessageBytes;

namespace detail {

uint64_t fnv1a_words(uint64_t h, const void* data, int64_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    const int64_t n_words = bytes / 8;
    for (int64_t i = 0; i < n_words; ++i) {
        uint64_t w;
        std::memcpy(&w, p + 8 * i, 8);
        h ^= w;
        h *= kFnvPrime;
    }
    return fnv1a_bytes(h, p + 8 * n_words, bytes - 8 * n_words);
}

void check_options(const WeightSyncOptions& o) {
    RLPT_CHECK_KIND(ConfigError, o.bucket_bytes >= 1 && o.bucket_bytes <= kMaxMessageBytes,
                    "weight_sync.bucket_bytes must be in [1, {}], got {}", kMaxMessageBytes, o.bucket_bytes);
    RLPT_CHECK_KIND(ConfigError, o.inplace_min_bytes >= 0, "weight_sync.inplace_min_bytes must be >= 0, got {}",
                    o.inplace_min_bytes);
    RLPT_CHECK_KIND(ConfigError, o.n_buffers >= 1 && o.n_buffers <= 64,
                    "weight_sync.n_buffers must be in [1, 64], got {}", o.n_buffers);
}

namespace {
std::string join_sizes(torch::IntArrayRef sizes) {
    std::string s = "[";
    for (size_t i = 0; i < sizes.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(sizes[i]);
    }
    return s + "]";
}

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// Explains how this rank's layout differs from the root's (a receiver that disagreed).
std::string describe_difference(const std::string& root_text, const Layout& mine) {
    auto root_lines = split_lines(root_text);
    auto my_lines = split_lines(mine.text);
    std::string out;
    if (root_lines.size() != my_lines.size()) {
        out = fmt::format("the root sends {} tensors, this rank has {}", root_lines.size(), my_lines.size());
    }
    for (size_t i = 0; i < std::min(root_lines.size(), my_lines.size()); ++i) {
        if (root_lines[i] != my_lines[i]) {
            if (!out.empty()) out += "; ";
            out += fmt::format("first difference at tensor {}: root has '{}', this rank has '{}'", i, root_lines[i],
                               my_lines[i]);
            break;
        }
    }
    return out.empty() ? "layout hash differs from the root's" : out;
}
}  // namespace

Layout describe_layout(const std::vector<std::string>* names, const std::vector<torch::Tensor>& tensors) {
    Layout layout;
    layout.has_names = names != nullptr;
    if (names && names->size() != tensors.size()) {
        layout.local_error = fmt::format("{} names given for {} tensors", names->size(), tensors.size());
    }
    layout.nbytes.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        const torch::Tensor& t = tensors[i];
        std::string name = names && i < names->size() ? (*names)[i] : std::string("-");
        int64_t n = 0;
        if (!t.defined()) {
            layout.text += fmt::format("{} {} undefined\n", i, name);
            if (layout.local_error.empty()) {
                layout.local_error = fmt::format("tensor {} ('{}') is undefined", i, name);
            }
        } else if (t.layout() != torch::kStrided) {
            layout.text += fmt::format("{} {} non-strided\n", i, name);
            if (layout.local_error.empty()) {
                layout.local_error = fmt::format("tensor {} ('{}') is not a dense (strided) tensor", i, name);
            }
        } else {
            n = t.numel() * static_cast<int64_t>(t.element_size());
            layout.text += fmt::format("{} {} {} {}\n", i, name, c10::toString(t.scalar_type()), join_sizes(t.sizes()));
        }
        layout.nbytes.push_back(n);
        layout.total_bytes += n;
    }
    layout.hash = fnv1a_bytes(kFnvOffset, layout.text.data(), static_cast<int64_t>(layout.text.size()));
    return layout;
}

WireHeader root_header(const Layout& layout, uint64_t version, const WeightSyncOptions& options) {
    WireHeader h;
    h.magic = kWireMagic;
    h.version = version;
    h.n_tensors = layout.nbytes.size();
    h.total_bytes = static_cast<uint64_t>(layout.total_bytes);
    h.layout_hash = layout.hash;
    h.bucket_bytes = static_cast<uint64_t>(options.bucket_bytes);
    h.inplace_min_bytes = static_cast<uint64_t>(options.inplace_min_bytes);
    h.has_names = layout.has_names ? 1 : 0;
    return h;
}

std::string agree_on_layout(const Communicator& comm, WireHeader& header, const Layout& layout,
                            const std::string& backend_error, const Deadline& deadline) {
    const bool root = comm.rank() == 0;
    comm.bcast(&header, sizeof(header), 0, deadline);

    std::string problem = layout.local_error;
    if (problem.empty() && !root) {
        if (header.magic != kWireMagic) {
            problem = fmt::format("bad weight-sync header magic {:#x} (peer is not a weight sync?)", header.magic);
        } else if ((header.has_names != 0) != layout.has_names) {
            problem = header.has_names ? "the root passed parameter names, this rank did not"
                                       : "this rank passed parameter names, the root did not";
        } else if (header.n_tensors != layout.nbytes.size() ||
                   header.total_bytes != static_cast<uint64_t>(layout.total_bytes) ||
                   header.layout_hash != layout.hash) {
            problem = "layout";  // detailed below, once the root's layout text is known
        }
    }
    if (problem.empty() && !backend_error.empty()) problem = backend_error;

    auto ok = comm.allgather_i64(problem.empty() ? 1 : 0, deadline);
    std::vector<int> bad;
    for (size_t r = 0; r < ok.size(); ++r) {
        if (!ok[r]) bad.push_back(static_cast<int>(r));
    }
    if (bad.empty()) return std::string();

    std::string root_text = root ? layout.text : std::string();
    comm.bcast_string(root_text, 0, deadline);
    if (problem == "layout") problem = describe_difference(root_text, layout);

    std::string bad_list;
    for (int r : bad) bad_list += (bad_list.empty() ? "" : ", ") + std::to_string(r);
    std::string msg =
        fmt::format("weight sync of version {} refused before any payload moved: sync-communicator rank(s) "
                    "{} disagree with the root's layout ({} tensors, {} bytes)",
                    header.version, bad_list, header.n_tensors, header.total_bytes);
    if (!problem.empty()) msg += fmt::format("; on this rank ({}): {}", comm.rank(), problem);
    return msg;
}

SyncPlan make_plan(const std::vector<int64_t>& nbytes, int64_t bucket_bytes, int64_t inplace_min_bytes) {
    RLPT_ASSERT(bucket_bytes >= 1);
    SyncPlan plan;
    plan.last_message_of_tensor.assign(nbytes.size(), -1);
    Message open;  // the bucket being filled
    auto flush = [&] {
        if (open.bytes == 0) return;
        for (const Piece& p : open.pieces) {
            plan.last_message_of_tensor[p.tensor] = static_cast<int>(plan.messages.size());
        }
        plan.messages.push_back(std::move(open));
        open = Message();
    };
    for (size_t i = 0; i < nbytes.size(); ++i) {
        const int tensor = static_cast<int>(i);
        const int64_t n = nbytes[i];
        if (n == 0) continue;
        if (n >= inplace_min_bytes) {
            for (int64_t off = 0; off < n; off += bucket_bytes) {
                Message m;
                m.inplace = true;
                m.bytes = std::min(bucket_bytes, n - off);
                m.pieces.push_back(Piece{tensor, off, 0, m.bytes});
                plan.last_message_of_tensor[i] = static_cast<int>(plan.messages.size());
                plan.messages.push_back(std::move(m));
            }
            continue;
        }
        for (int64_t off = 0; off < n;) {
            const int64_t take = std::min(n - off, bucket_bytes - open.bytes);
            open.pieces.push_back(Piece{tensor, off, open.bytes, take});
            open.bytes += take;
            off += take;
            if (open.bytes == bucket_bytes) flush();
        }
    }
    flush();
    return plan;
}

int64_t pack_buffer_bytes(const SyncPlan& plan, const std::vector<bool>& direct) {
    int64_t bytes = 0;
    for (const Message& m : plan.messages) {
        if (m.inplace && direct[m.pieces.front().tensor]) continue;
        bytes = std::max(bytes, m.bytes);
    }
    return bytes;
}

namespace {

// "auto": picks the backend collectively at the first sync.
class AutoWeightSync final : public WeightSync {
  public:
    AutoWeightSync(Communicator comm, const WeightSyncOptions& options) : WeightSync(options), comm_(std::move(comm)) {}

    std::string backend_name() const override { return inner_ ? inner_->backend_name() : std::string("auto"); }

  protected:
    void do_sync(const std::vector<std::string>* names, std::vector<torch::Tensor>& tensors, uint64_t& version,
                 WeightSyncStats& stats) override {
        if (!inner_) resolve(tensors);
        if (names) {
            inner_->sync(*names, tensors, version);
        } else {
            inner_->sync(tensors, version);
        }
        stats = inner_->last_stats();
    }

  private:
    void resolve(const std::vector<torch::Tensor>& tensors) {
        int64_t all_cuda = tensors.empty() ? 0 : 1;
        for (const auto& t : tensors) {
            if (!t.defined() || !t.is_cuda()) all_cuda = 0;
        }
        const Deadline deadline = Deadline::after_seconds(options().timeout_s);
        const bool root = comm_.rank() == 0;
        comm_.allreduce(&all_cuda, 1, MPI_INT64_T, MPI_MIN, deadline);
#if RLPT_HAVE_NCCL
        if (weights_over_nccl("auto", true, device_collectives(), all_cuda != 0)) {
            inner_ = make_nccl_weight_sync(std::move(comm_), options());
        }
#endif
        if (!inner_) inner_ = make_mpi_weight_sync(std::move(comm_), options());
        if (root) RLPT_LOG_INFO("weight sync: backend 'auto' resolved to '{}'", inner_->backend_name());
    }

    Communicator comm_;
    std::unique_ptr<WeightSync> inner_;
};

}  // namespace
}  // namespace detail

WeightSync::WeightSync(WeightSyncOptions options) : options_(options) { detail::check_options(options_); }

void WeightSync::sync(std::vector<torch::Tensor>& tensors, uint64_t& version) {
    const auto t0 = std::chrono::steady_clock::now();
    WeightSyncStats stats;
    do_sync(nullptr, tensors, version, stats);
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_ = stats;
}

void WeightSync::sync(const std::vector<std::string>& names, std::vector<torch::Tensor>& tensors, uint64_t& version) {
    const auto t0 = std::chrono::steady_clock::now();
    WeightSyncStats stats;
    do_sync(&names, tensors, version, stats);
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_ = stats;
}

std::unique_ptr<WeightSync> make_weight_sync(const std::string& backend, const Communicator& comm,
                                             const WeightSyncOptions& options) {
    detail::check_options(options);
    RLPT_CHECK_KIND(ConfigError, comm.valid(),
                    "make_weight_sync: the sync communicator is null (is this rank a member?)");
    check_weight_backend(backend, RLPT_HAVE_NCCL, device_collectives(), "weight_sync");
    if (backend == "mpi") return detail::make_mpi_weight_sync(comm.dup(), options);
    if (backend == "auto") return std::make_unique<detail::AutoWeightSync>(comm.dup(), options);
#if RLPT_HAVE_NCCL
    // "nccl". Collective check, so every rank fails alike when any rank lacks a GPU.
    const int64_t n_devices = detail::cuda_device_count();
    auto all = comm.allgather_i64(n_devices);
    std::string without;
    for (size_t r = 0; r < all.size(); ++r) {
        if (all[r] == 0) without += (without.empty() ? "" : ", ") + std::to_string(r);
    }
    RLPT_CHECK_KIND(ConfigError, without.empty(),
                    "weight_sync backend 'nccl' needs a CUDA device on every rank, but "
                    "sync-communicator rank(s) {} see none (no GPU or no driver); use "
                    "backend 'mpi' or 'auto'",
                    without);
    return detail::make_nccl_weight_sync(comm.dup(), options);
#else
    RLPT_THROW(InternalError, "check_weight_backend accepted '{}' in a build without NCCL", backend);
#endif
}

void check_weight_backend(const std::string& backend, bool nccl_built, DeviceCollectives collectives,
                          const char* what) {
    RLPT_CHECK_KIND(ConfigError, backend == "auto" || backend == "mpi" || backend == "nccl",
                    "unknown {} backend '{}' (expected auto, mpi or nccl)", what, backend);
    if (backend != "nccl") return;
    RLPT_CHECK_KIND(ConfigError, nccl_built,
                    "{} backend 'nccl' is not available: this rlpt was built without NCCL (its LibTorch is "
                    "CPU-only, or it was configured without NCCL); use backend 'mpi' or 'auto'",
                    what);
    RLPT_CHECK_KIND(ConfigError, collectives == DeviceCollectives::kNccl,
                    "{} backend 'nccl' conflicts with device collectives '{}' (trainer.device_collectives): "
                    "ranks whose collectives on GPU tensors go over MPI (ranks sharing a GPU) cannot use NCCL for "
                    "weights; use backend 'mpi' or 'auto', or set trainer.device_collectives=nccl",
                    what, device_collectives_name(collectives));
}

bool weights_over_nccl(const std::string& backend, bool nccl_built, DeviceCollectives collectives, bool all_cuda) {
    if (backend == "nccl") return true;
    return backend == "auto" && nccl_built && collectives == DeviceCollectives::kNccl && all_cuda;
}

uint64_t weights_checksum(const std::vector<torch::Tensor>& tensors) {
    uint64_t h = detail::kFnvOffset;
    for (const auto& t : tensors) {
        uint64_t n = 0;
        torch::Tensor host;
        if (t.defined()) {
            host = t.to(torch::kCPU).contiguous();
            n = static_cast<uint64_t>(host.numel()) * host.element_size();
        }
        h = detail::fnv1a_words(h, &n, sizeof(n));
        if (n > 0) h = detail::fnv1a_words(h, host.data_ptr(), static_cast<int64_t>(n));
    }
    return h;
}

}  // namespace rlpt::weights
