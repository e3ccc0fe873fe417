#include "engine/transport.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "rlpt/core/error.h"

namespace rlpt::engine::detail {
namespace {

class SelfTransport final : public Transport {
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
    RLPT_CHECK(v >= 0 && v < std::numeric_limits<int>::max(), "engine MPI transport: {} {} does not fit an int", what,
               v);
    return static_cast<int>(v);
}

void check_cpu_contiguous(const torch::Tensor& t, const char* op) {
    RLPT_CHECK(t.defined() && t.is_cpu() && t.is_contiguous(),
               "engine MPI transport: {} needs a contiguous CPU tensor (CUDA tensors need a build with NCCL)", op);
}

class MpiTransport final : public Transport {
  public:
    explicit MpiTransport(const comm::Communicator& dp) : dp_(dp) {}

    const char* name() const override { return "mpi"; }

    void start_allreduce_sum(const torch::Tensor& t) override {
        check_cpu_contiguous(t, "all-reduce");
        RLPT_CHECK(t.scalar_type() == torch::kFloat32, "engine MPI transport: all-reduce of {} (float32 only)",
                   c10::toString(t.scalar_type()));
        RLPT_CHECK(t.numel() * 4 <= comm::kMaxMessageBytes, "engine MPI transport: all-reduce bucket of {} bytes",
                   t.numel() * 4);
        if (t.numel() == 0) return;
        MPI_Request req = MPI_REQUEST_NULL;
        RLPT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM,
                                      dp_.get(), &req));
        pending_.push_back(req);
    }

    void finish_allreduces(const std::string& what) override {
        comm::wait_all(pending_, comm::Deadline::never(), what);
        pending_.clear();
    }

    void start_allgather_shards(const torch::Tensor& t, int64_t shard) override {
        check_cpu_contiguous(t, "all-gather");
        const int n = dp_.size();
        RLPT_CHECK(shard % kShardAlign == 0 && t.numel() == shard * n,
                   "engine MPI transport: all-gather of {} elements in shards of {} over {} ranks", t.numel(), shard,
                   n);
        if (shard == 0) return;
        // Counts and displacements are ints: count in units of kShardAlign elements, and move
        // at most kMaxMessageBytes of each shard per round.
        const int64_t unit_bytes = kShardAlign * static_cast<int64_t>(t.element_size());
        const int64_t shard_units = shard / kShardAlign;
        RLPT_CHECK(shard_units * n < std::numeric_limits<int>::max(),
                   "engine MPI transport: all-gather of {} elements is too large", t.numel());
        gather_types_.push_back(std::make_unique<MpiType>(unit_bytes));
        const MpiType& unit = *gather_types_.back();
        const int64_t round_units = std::max<int64_t>(1, comm::kMaxMessageBytes / unit_bytes);
        std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
        for (int64_t off = 0; off < shard_units; off += round_units) {
            const int64_t c = std::min(round_units, shard_units - off);
            for (int r = 0; r < n; ++r) {
                counts[static_cast<size_t>(r)] = static_cast<int>(c);
                displs[static_cast<size_t>(r)] = static_cast<int>(r * shard_units + off);
            }
            MPI_Request req = MPI_REQUEST_NULL;
            RLPT_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.data_ptr(), counts.data(),
                                           displs.data(), unit.get(), dp_.get(), &req));
            gathers_.push_back(req);
        }
    }

    void finish_allgathers(const std::string& what) override {
        comm::wait_all(gathers_, comm::Deadline::never(), what);
        gathers_.clear();
        gather_types_.clear();
    }

    void reduce_scatter_sum(const torch::Tensor& full, const torch::Tensor& out) override {
        check_cpu_contiguous(full, "reduce-scatter");
        check_cpu_contiguous(out, "reduce-scatter");
        const int n = dp_.size();
        RLPT_CHECK(full.scalar_type() == torch::kFloat32 && out.scalar_type() == torch::kFloat32 &&
                       full.numel() == out.numel() * n,
                   "engine MPI transport: reduce-scatter of {} elements into {} over {} ranks", full.numel(),
                   out.numel(), n);
        RLPT_CHECK(out.numel() * 4 <= comm::kMaxMessageBytes,
                   "engine MPI transport: reduce-scatter shard of {} bytes (at most {}): use more DP ranks or "
                   "smaller decoder layers",
                   out.numel() * 4, comm::kMaxMessageBytes);
        if (out.numel() == 0) return;
        MPI_Request req = MPI_REQUEST_NULL;
        RLPT_MPI_CHECK(MPI_Ireduce_scatter_block(full.data_ptr(), out.data_ptr(), static_cast<int>(out.numel()),
                                                 MPI_FLOAT, MPI_SUM, dp_.get(), &req));
        comm::wait_one(req, comm::Deadline::never(), "gradient reduce-scatter (ZeRO-2/3)");
    }

    void broadcast(const torch::Tensor& t, int root) override {
        check_cpu_contiguous(t, "broadcast");
        dp_.bcast(t.data_ptr(), t.numel() * static_cast<int64_t>(t.element_size()), root);
    }

    bool allgather_slices(const torch::Tensor& local, const torch::Tensor& out, int64_t dim,
                          const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) override {
        check_cpu_contiguous(local, "slice all-gather");
        check_cpu_contiguous(out, "slice all-gather");
        const SliceGeometry g = slice_geometry(local, out, dim);
        const int n = dp_.size(), me = dp_.rank();
        auto* send = static_cast<char*>(local.data_ptr());
        auto* recv = static_cast<char*>(out.data_ptr());
        std::vector<MPI_Request> reqs;
        std::vector<std::unique_ptr<MpiType>> types;  // alive until the gathers finish
        if (g.inner_bytes == 0 || *std::max_element(counts.begin(), counts.end()) == 0) return true;
        if (g.outer == 1) {
            // Contiguous slices: MPI_Allgatherv in units of one slab (inner_bytes), at most
            // kMaxMessageBytes of each slice per round.
            RLPT_CHECK(g.inner_bytes <= comm::kMaxMessageBytes, "engine MPI transport: a slab of {} bytes",
                       g.inner_bytes);
            types.push_back(std::make_unique<MpiType>(g.inner_bytes));
            const int64_t per_round = std::max<int64_t>(1, comm::kMaxMessageBytes / g.inner_bytes);
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
                                               d.data(), types.back()->get(), dp_.get(), &req));
                reqs.push_back(req);
            }
        } else {
            // Strided slices: equal ones in rank order only (one receive type for every rank,
            // a vector of `outer` blocks whose extent is one block, so rank r's lands r blocks
            // further), at most kMaxMessageBytes of each slice per round of rows.
            if (!equal_slices_in_rank_order(starts, counts)) return false;
            const int64_t block = counts[0] * g.inner_bytes;
            RLPT_CHECK(block <= comm::kMaxMessageBytes, "engine MPI transport: a slice row of {} bytes", block);
            const int64_t per_round = std::max<int64_t>(1, comm::kMaxMessageBytes / block);
            const int64_t out_stride = g.full * g.inner_bytes, local_stride = g.local * g.inner_bytes;
            for (int64_t row = 0; row < g.outer; row += per_round) {
                const int64_t rows = std::min(per_round, g.outer - row);
                types.push_back(std::make_unique<MpiType>(rows, block, out_stride, block));
                const MPI_Datatype recv_type = types.back()->get();
                types.push_back(std::make_unique<MpiType>(rows, block, local_stride, 0));
                MPI_Request req = MPI_REQUEST_NULL;
                RLPT_MPI_CHECK(MPI_Iallgather(send + row * local_stride, 1, types.back()->get(),
                                              recv + row * out_stride, 1, recv_type, dp_.get(), &req));
                reqs.push_back(req);
            }
        }
        comm::wait_all(reqs, comm::Deadline::never(), "tensor-parallel all-gather");
        return true;
    }

  private:
    const comm::Communicator& dp_;
    // Requests still pending when the transport dies belong to a step that threw; waiting for
    // them could block on peers that are gone, so they are left to MPI_Finalize / MPI_Abort.
    std::vector<MPI_Request> pending_;
    std::vector<MPI_Request> gathers_;
    std::vector<std::unique_ptr<MpiType>> gather_types_;  // alive until their gathers finish
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

std::unique_ptr<Transport> make_self_transport() { return std::make_unique<SelfTransport>(); }

std::unique_ptr<Transport> make_mpi_transport(const comm::Communicator& dp) {
    RLPT_CHECK(dp.valid(), "engine: the MPI transport needs a valid communicator");
    return std::make_unique<MpiTransport>(dp);
}

}  // namespace rlpt::engine::detail
