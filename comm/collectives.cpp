// The collectives (rlpt/comm/collectives.h): self, MPI, MPI through host staging, the choice.
// NCCL's are in nccl_collectives.cpp.
#include "rlpt/comm/collectives.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "collectives_detail.h"
#include "rlpt/comm/device.h"
#include "rlpt/core/error.h"

namespace rlpt::comm {
namespace detail {
namespace {

class SelfCollectives final : public Collectives {
  public:
    const char* name() const override { return "self"; }
    void start_allreduce_sum(const torch::Tensor&) override {}
    void finish_allreduces(const std::string&) override {}
    void start_allgather_shards(const torch::Tensor&, int64_t) override {}
    void finish_allgathers(const std::string&) override {}
    void reduce_scatter_sum(const torch::Tensor& full, const torch::Tensor& out) override {
        if (!out.is_same(full)) out.copy_(full.narrow(0, 0, out.numel()));
    }
    void broadcast(const torch::Tensor&, int) override {}
    bool allgather_slices(const torch::Tensor& local, const torch::Tensor& out, int64_t dim,
                          const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) override {
        if (counts[0] > 0 && !out.is_same(local))
            out.narrow(dim, starts[0], counts[0]).copy_(local.narrow(dim, 0, counts[0]));
        return true;
    }
};

// Owns a committed MPI datatype.
class MpiType {
  public:
    // `bytes` contiguous bytes.
    explicit MpiType(int64_t bytes) {
        RLPT_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &type_));
        RLPT_MPI_CHECK(MPI_Type_commit(&type_));
    }
    // `count` blocks of `block` bytes, `stride` bytes apart; with `extent` > 0 the type's extent
    // is set to that many bytes (so consecutive ranks' blocks interleave in an all-gather).
    MpiType(int64_t count, int64_t block, int64_t stride, int64_t extent) {
        MPI_Datatype bytes = MPI_DATATYPE_NULL, vec = MPI_DATATYPE_NULL;
        RLPT_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(block), MPI_BYTE, &bytes));
        RLPT_MPI_CHECK(MPI_Type_create_hvector(static_cast<int>(count), 1, stride, bytes, &vec));
        MPI_Type_free(&bytes);
        if (extent > 0) {
            RLPT_MPI_CHECK(MPI_Type_create_resized(vec, 0, extent, &type_));
            MPI_Type_free(&vec);
        } else {
            type_ = vec;
        }
        RLPT_MPI_CHECK(MPI_Type_commit(&type_));
    }
    ~MpiType() { MPI_Type_free(&type_); }
    MpiType(const MpiType&) = delete;
    MpiType& operator=(const MpiType&) = delete;
    MPI_Datatype get() const { return type_; }

  private:
    MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

int to_int(int64_t v, const char* what) {
    RLPT_CHECK(v >= 0 && v < std::numeric_limits<int>::max(), "MPI collectives: {} {} does not fit an int", what, v);
    return static_cast<int>(v);
}

void check_cpu_contiguous(const torch::Tensor& t, const char* op) {
    RLPT_CHECK(t.defined() && t.is_cpu() && t.is_contiguous(),
               "MPI collectives: {} needs a contiguous CPU tensor (device tensors go through mpi-staged)", op);
}

class MpiCollectives final : public Collectives {
  public:
    explicit MpiCollectives(const Communicator& group) : group_(group) {}

    const char* name() const override { return "mpi"; }

    void start_allreduce_sum(const torch::Tensor& t) override {
        check_cpu_contiguous(t, "all-reduce");
        RLPT_CHECK(t.scalar_type() == torch::kFloat32, "MPI collectives: all-reduce of {} (float32 only)",
                   c10::toString(t.scalar_type()));
        RLPT_CHECK(t.numel() * 4 <= kMaxMessageBytes, "MPI collectives: all-reduce bucket of {} bytes", t.numel() * 4);
        if (t.numel() == 0) return;
        MPI_Request req = MPI_REQUEST_NULL;
        RLPT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM,
                                      group_.get(), &req));
        pending_.push_back(req);
    }

    void finish_allreduces(const std::string& what) override {
        wait_all(pending_, Deadline::never(), what);
        pending_.clear();
    }

    void start_allgather_shards(const torch::Tensor& t, int64_t shard) override {
        check_cpu_contiguous(t, "all-gather");
        const int n = group_.size();
        RLPT_CHECK(shard % kShardAlign == 0 && t.numel() == shard * n,
                   "MPI collectives: all-gather of {} elements in shards of {} over {} ranks", t.numel(), shard, n);
        if (shard == 0) return;
        // Counts and displacements are ints: count in units of kShardAlign elements, and move
        // at most kMaxMessageBytes of each shard per round.
        const int64_t unit_bytes = kShardAlign * static_cast<int64_t>(t.element_size());
        const int64_t shard_units = shard / kShardAlign;
        RLPT_CHECK(shard_units * n < std::numeric_limits<int>::max(),
                   "MPI collectives: all-gather of {} elements is too large", t.numel());
        gather_types_.push_back(std::make_unique<MpiType>(unit_bytes));
        const MpiType& unit = *gather_types_.back();
        const int64_t round_units = std::max<int64_t>(1, kMaxMessageBytes / unit_bytes);
        std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
        for (int64_t off = 0; off < shard_units; off += round_units) {
            const int64_t c = std::min(round_units, shard_units - off);
            for (int r = 0; r < n; ++r) {
                counts[static_cast<size_t>(r)] = static_cast<int>(c);
                displs[static_cast<size_t>(r)] = static_cast<int>(r * shard_units + off);
            }
            MPI_Request req = MPI_REQUEST_NULL;
            RLPT_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.data_ptr(), counts.data(),
                                           displs.data(), unit.get(), group_.get(), &req));
            gathers_.push_back(req);
        }
    }

    void finish_allgathers(const std::string& what) override {
        wait_all(gathers_, Deadline::never(), what);
        gathers_.clear();
        gather_types_.clear();
    }

    void reduce_scatter_sum(const torch::Tensor& full, const torch::Tensor& out) override {
        check_cpu_contiguous(full, "reduce-scatter");
        check_cpu_contiguous(out, "reduce-scatter");
        const int n = group_.size();
        RLPT_CHECK(full.scalar_type() == torch::kFloat32 && out.scalar_type() == torch::kFloat32 &&
                       full.numel() == out.numel() * n,
                   "MPI collectives: reduce-scatter of {} elements into {} over {} ranks", full.numel(), out.numel(),
                   n);
        RLPT_CHECK(out.numel() * 4 <= kMaxMessageBytes,
                   "MPI collectives: reduce-scatter shard of {} bytes (at most {}): use more DP ranks or "
                   "smaller decoder layers",
                   out.numel() * 4, kMaxMessageBytes);
        if (out.numel() == 0) return;
        MPI_Request req = MPI_REQUEST_NULL;
        RLPT_MPI_CHECK(MPI_Ireduce_scatter_block(full.data_ptr(), out.data_ptr(), static_cast<int>(out.numel()),
                                                 MPI_FLOAT, MPI_SUM, group_.get(), &req));
        wait_one(req, Deadline::never(), "gradient reduce-scatter (ZeRO-2/3)");
    }

    void broadcast(const torch::Tensor& t, int root) override {
        check_cpu_contiguous(t, "broadcast");
        group_.bcast(t.data_ptr(), t.numel() * static_cast<int64_t>(t.element_size()), root);
    }

    bool allgather_slices(const torch::Tensor& local, const torch::Tensor& out, int64_t dim,
                          const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) override {
        check_cpu_contiguous(local, "slice all-gather");
        check_cpu_contiguous(out, "slice all-gather");
        const SliceGeometry g = slice_geometry(local, out, dim);
        const int n = group_.size(), me = group_.rank();
        auto* send = static_cast<char*>(local.data_ptr());
        auto* recv = static_cast<char*>(out.data_ptr());
        std::vector<MPI_Request> reqs;
        std::vector<std::unique_ptr<MpiType>> types;  // alive until the gathers finish
        if (g.inner_bytes == 0 || *std::max_element(counts.begin(), counts.end()) == 0) return true;
        if (g.outer == 1) {
            // Contiguous slices: MPI_Allgatherv in units of one slab (inner_bytes), at most
            // kMaxMessageBytes of each slice per round.
            RLPT_CHECK(g.inner_bytes <= kMaxMessageBytes, "MPI collectives: a slab of {} bytes", g.inner_bytes);
            types.push_back(std::make_unique<MpiType>(g.inner_bytes));
            const int64_t per_round = std::max<int64_t>(1, kMaxMessageBytes / g.inner_bytes);
            const int64_t most = *std::max_element(counts.begin(), counts.end());
            std::vector<int> c(static_cast<size_t>(n)), d(static_cast<size_t>(n));
            for (int64_t off = 0; off < most; off += per_round) {
                for (int r = 0; r < n; ++r) {
                    const auto i = static_cast<size_t>(r);
                    c[i] = to_int(std::clamp<int64_t>(counts[i] - off, 0, per_round), "slice count");
                    d[i] = to_int(starts[i] + std::min(off, counts[i]), "slice start");
                }
                MPI_Request req = MPI_REQUEST_NULL;
                RLPT_MPI_CHECK(MPI_Iallgatherv(send + std::min(off, counts[static_cast<size_t>(me)]) * g.inner_bytes,
                                               c[static_cast<size_t>(me)], types.back()->get(), recv, c.data(),
                                               d.data(), types.back()->get(), group_.get(), &req));
                reqs.push_back(req);
            }
        } else {
            // Strided slices: equal ones in rank order only (one receive type for every rank,
            // a vector of `outer` blocks whose extent is one block, so rank r's lands r blocks
            // further), at most kMaxMessageBytes of each slice per round of rows.
            if (!equal_slices_in_rank_order(starts, counts)) return false;
            const int64_t block = counts[0] * g.inner_bytes;
            RLPT_CHECK(block <= kMaxMessageBytes, "MPI collectives: a slice row of {} bytes", block);
            const int64_t per_round = std::max<int64_t>(1, kMaxMessageBytes / block);
            const int64_t out_stride = g.full * g.inner_bytes, local_stride = g.local * g.inner_bytes;
            for (int64_t row = 0; row < g.outer; row += per_round) {
                const int64_t rows = std::min(per_round, g.outer - row);
                types.push_back(std::make_unique<MpiType>(rows, block, out_stride, block));
                const MPI_Datatype recv_type = types.back()->get();
                types.push_back(std::make_unique<MpiType>(rows, block, local_stride, 0));
                MPI_Request req = MPI_REQUEST_NULL;
                RLPT_MPI_CHECK(MPI_Iallgather(send + row * local_stride, 1, types.back()->get(),
                                              recv + row * out_stride, 1, recv_type, group_.get(), &req));
                reqs.push_back(req);
            }
        }
        wait_all(reqs, Deadline::never(), "tensor-parallel all-gather");
        return true;
    }

  private:
    const Communicator& group_;
    // Requests still pending when the transport dies belong to a step that threw; waiting for
    // them could block on peers that are gone, so they are left to MPI_Finalize / MPI_Abort.
    std::vector<MPI_Request> pending_;
    std::vector<MPI_Request> gathers_;
    std::vector<std::unique_ptr<MpiType>> gather_types_;  // alive until their gathers finish
};

// MPI collectives on host copies of tensors on any device. The copies are new host tensors, made
// synchronously (a device-to-host copy waits for the kernels that produce the data); results are
// copied back when the collective completes: in finish_*() for the started ones.
class StagedMpiCollectives final : public Collectives {
  public:
    explicit StagedMpiCollectives(const Communicator& group) : mpi_(group) {}

    const char* name() const override { return "mpi-staged"; }

    void start_allreduce_sum(const torch::Tensor& t) override {
        reduces_.emplace_back(t, stage(t, "all-reduce"));
        mpi_.start_allreduce_sum(reduces_.back().second);
    }

    void finish_allreduces(const std::string& what) override {
        mpi_.finish_allreduces(what);
        unstage(reduces_);
    }

    void start_allgather_shards(const torch::Tensor& t, int64_t shard) override {
        gathers_.emplace_back(t, stage(t, "all-gather"));
        mpi_.start_allgather_shards(gathers_.back().second, shard);
    }

    void finish_allgathers(const std::string& what) override {
        mpi_.finish_allgathers(what);
        unstage(gathers_);
    }

    void reduce_scatter_sum(const torch::Tensor& full, const torch::Tensor& out) override {
        // `out` is overwritten: only its shape goes to the host.
        const torch::Tensor host_out = torch::empty(out.sizes(), out.options().device(torch::kCPU));
        mpi_.reduce_scatter_sum(stage(full, "reduce-scatter"), host_out);
        out.copy_(host_out);
    }

    void broadcast(const torch::Tensor& t, int root) override {
        const torch::Tensor host = stage(t, "broadcast");
        mpi_.broadcast(host, root);
        t.copy_(host);
    }

    bool allgather_slices(const torch::Tensor& local, const torch::Tensor& out, int64_t dim,
                          const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) override {
        // `out` is staged with its contents: the parts no slice covers come back unchanged.
        const torch::Tensor host_out = stage(out, "slice all-gather");
        if (!mpi_.allgather_slices(stage(local, "slice all-gather"), host_out, dim, starts, counts)) return false;
        out.copy_(host_out);
        return true;
    }

  private:
    using Staged = std::vector<std::pair<torch::Tensor, torch::Tensor>>;  // (tensor, its host copy)

    static torch::Tensor stage(const torch::Tensor& t, const char* op) {
        RLPT_CHECK(t.defined() && t.is_contiguous(), "MPI collectives (staged): {} needs a contiguous tensor", op);
        torch::NoGradGuard no_grad;
        return torch::empty(t.sizes(), t.options().device(torch::kCPU)).copy_(t);
    }
    static void unstage(Staged& staged) {
        torch::NoGradGuard no_grad;
        for (auto& [t, host] : staged) t.copy_(host);
        staged.clear();
    }

    MpiCollectives mpi_;
    // Started and not finished. After a failed finish they are dropped with the object; MPI may
    // still write into host copies of requests left to MPI_Finalize / MPI_Abort (see MpiCollectives).
    Staged reduces_, gathers_;
};

}  // namespace

SliceGeometry slice_geometry(const torch::Tensor& local, const torch::Tensor& out, int64_t dim) {
    SliceGeometry g;
    g.full = out.size(dim);
    g.local = local.size(dim);
    g.inner_bytes = static_cast<int64_t>(out.element_size());
    for (int64_t d = 0; d < out.dim(); ++d) {
        if (d < dim) g.outer *= out.size(d);
        if (d > dim) g.inner_bytes *= out.size(d);
    }
    return g;
}

bool equal_slices_in_rank_order(const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) {
    for (size_t r = 0; r < counts.size(); ++r)
        if (counts[r] != counts[0] || starts[r] != static_cast<int64_t>(r) * counts[0]) return false;
    return true;
}

}  // namespace detail

const char* collectives_kind_name(CollectivesKind k) {
    switch (k) {
        case CollectivesKind::kSelf: return "self";
        case CollectivesKind::kMpi: return "mpi";
        case CollectivesKind::kStagedMpi: return "mpi-staged";
        case CollectivesKind::kNccl: return "nccl";
    }
    return "?";
}

CollectivesKind choose_collectives(int n_ranks, const torch::Device& device, bool nccl_for_device) {
    if (n_ranks <= 1) return CollectivesKind::kSelf;
    if (device.is_cpu()) return CollectivesKind::kMpi;
    RLPT_CHECK(device.is_cuda(), "collectives: tensors on {} are not supported (cpu, cuda)", device.str());
    return nccl_for_device ? CollectivesKind::kNccl : CollectivesKind::kStagedMpi;
}

std::unique_ptr<Collectives> make_collectives(const Communicator* group, const torch::Device& device,
                                              const std::string& name) {
    const int n = group == nullptr ? 1 : group->size();
    return make_collectives(choose_collectives(n, device, nccl_for_device_tensors()), group, device, name,
                            Deadline::after_seconds(kNcclBootstrapTimeoutS));
}

std::unique_ptr<Collectives> make_collectives(CollectivesKind kind, const Communicator* group,
                                              const torch::Device& device, const std::string& name,
                                              const Deadline& bootstrap) {
    if (kind == CollectivesKind::kSelf) return std::make_unique<detail::SelfCollectives>();
    RLPT_CHECK(group != nullptr && group->valid(), "{}: {} collectives need a valid communicator", name,
               collectives_kind_name(kind));
    switch (kind) {
        case CollectivesKind::kMpi: return std::make_unique<detail::MpiCollectives>(*group);
        case CollectivesKind::kStagedMpi: return std::make_unique<detail::StagedMpiCollectives>(*group);
        case CollectivesKind::kNccl:
#if RLPT_HAVE_NCCL
            return detail::make_nccl_collectives(*group, device.has_index() ? device.index() : -1, name, bootstrap);
#else
            RLPT_THROW(ValueError, "{}: NCCL collectives need a build with NCCL (this rlpt was built without it)",
                       name);
#endif
        case CollectivesKind::kSelf: break;
    }
    RLPT_THROW(InternalError, "{}: unknown collectives kind {}", name, static_cast<int>(kind));
}

}  // namespace rlpt::comm
