// Shard-to-shard weight sync (rlpt/comm/weight_reshard.h): agreement, the bucket schedule,
// packing with torch copies, the MPI point-to-point transport and the backend choice.
#include "rlpt/comm/weight_reshard.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include <fmt/ranges.h>

#include "rlpt/core/log.h"
#include "weight_reshard_transport.h"
#include "weight_sync_backends.h"
#include "weight_sync_plan.h"

namespace rlpt::comm {

std::string ReshardPlan::describe() const {
    std::string s = fmt::format("senders {}\n", n_senders);
    for (size_t t = 0; t < full_shapes.size(); ++t) s += fmt::format("shape {} [{}]\n", t, fmt::join(full_shapes[t], ", "));
    for (const auto& p : pieces) {
        s += fmt::format("t{} {}->{} dim {} src {} dst {} len {}\n", p.tensor, p.src, p.dst, p.dim, p.src_offset,
                         p.dst_offset, p.length);
    }
    return s;
}

WeightReshard::WeightReshard(WeightSyncOptions options) : options_(options) { detail::check_options(options_); }

void WeightReshard::sync(const ReshardPlan& plan, const std::vector<std::string>& names,
                         std::vector<torch::Tensor>& tensors, uint64_t& version) {
    const auto t0 = std::chrono::steady_clock::now();
    WeightReshardStats stats;
    do_sync(plan, names, tensors, version, stats);
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_ = stats;
}

namespace detail {
namespace {

constexpr int64_t kAlign = 16;  // bucket offsets: any dtype can be viewed at them
constexpr size_t kDirectInFlight = 64;
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Rows [row0, row0 + rows) of a piece's region (along its first dimension) inside a bucket.
struct Part {
    int piece = 0;
    int64_t row0 = 0, rows = 0;
    int64_t offset = 0, bytes = 0;
};
struct Bucket {
    int src = 0, dst = 0;
    int64_t index = 0;    // within its (src, dst) pair
    int64_t bytes = 0;
    bool direct = false;  // one part of one large piece (see below)
    std::vector<Part> parts;
};

// Sizes of a piece's region: the full shape with the sliced dimension cut to the piece.
std::vector<int64_t> region_shape(const ReshardPlan& plan, const ReshardPiece& p) {
    auto shape = plan.full_shapes[static_cast<size_t>(p.tensor)];
    if (p.dim >= 0) shape[static_cast<size_t>(p.dim)] = p.length;
    return shape;
}

// The buckets `rank` sends or receives, in the global order (index within pair, src, dst).
// A pure function of the plan, the element sizes and the two sizes: both ends of a pair compute
// the same buckets. Pieces of at least `direct_min_bytes` go as messages of their own (cut into
// row ranges), each end moving it straight from / into its tensor where that region is
// contiguous (dimension-0 slices and whole tensors on both ends; a row-parallel column slice on
// the end that holds exactly that slice) and through a pack buffer otherwise; the other pieces
// are packed back to back.
std::vector<Bucket> plan_buckets(const ReshardPlan& plan, const std::vector<int64_t>& elem_size,
                                 int64_t bucket_bytes, int64_t direct_min_bytes, int rank) {
    struct Pair {
        std::vector<Bucket> list;
        int64_t open = -1;  // the packed bucket being filled
    };
    std::map<std::pair<int, int>, Pair> pairs;
    for (size_t i = 0; i < plan.pieces.size(); ++i) {
        const ReshardPiece& p = plan.pieces[i];
        if (p.src != rank && p.dst != rank) continue;
        const auto shape = region_shape(plan, p);
        const int64_t rows = shape.empty() ? 1 : shape[0];
        int64_t row_elems = 1;
        for (size_t d = 1; d < shape.size(); ++d) row_elems *= shape[d];
        const int64_t row_bytes = row_elems * elem_size[static_cast<size_t>(p.tensor)];
        if (rows == 0 || row_bytes == 0) continue;
        Pair& pair = pairs[{p.src, p.dst}];
        auto add_bucket = [&](bool direct) {
            pair.list.push_back(Bucket{p.src, p.dst, static_cast<int64_t>(pair.list.size()), 0, direct, {}});
            return static_cast<int64_t>(pair.list.size()) - 1;
        };
        const bool direct = rows * row_bytes >= direct_min_bytes;
        for (int64_t r = 0; r < rows;) {
            if (direct || pair.open < 0) {
                const int64_t b = add_bucket(direct);
                if (!direct) pair.open = b;
            }
            Bucket& b = direct ? pair.list.back() : pair.list[static_cast<size_t>(pair.open)];
            const int64_t at = align_up(b.bytes);
            int64_t fit = at < bucket_bytes ? (bucket_bytes - at) / row_bytes : 0;
            if (fit == 0 && !b.parts.empty()) {
                pair.open = -1;  // full: the next round opens another
                continue;
            }
            const int64_t take = std::min(std::max<int64_t>(fit, 1), rows - r);  // one oversized row goes alone
            b.parts.push_back(Part{static_cast<int>(i), r, take, at, take * row_bytes});
            b.bytes = at + take * row_bytes;
            r += take;
        }
    }
    std::vector<Bucket> out;
    for (auto& kv : pairs)
        for (auto& b : kv.second.list) out.push_back(std::move(b));
    std::stable_sort(out.begin(), out.end(), [](const Bucket& a, const Bucket& b) {
        return std::tie(a.index, a.src, a.dst) < std::tie(b.index, b.src, b.dst);
    });
    return out;
}

// The piece's region of this rank's tensor (the source or destination side), rows of `part`.
torch::Tensor region(const torch::Tensor& t, const ReshardPiece& p, bool send, const Part& part) {
    torch::Tensor r = p.dim >= 0 ? t.narrow(p.dim, send ? p.src_offset : p.dst_offset, p.length) : t;
    return r.dim() == 0 ? r : r.narrow(0, part.row0, part.rows);
}

// Why this rank cannot take part in `plan` with these tensors ("" when it can).
std::string local_problem(const ReshardPlan& plan, const std::vector<std::string>& names,
                          const std::vector<torch::Tensor>& tensors, int rank, int size) {
    const size_t n = tensors.size();
    if (names.size() != n || plan.full_shapes.size() != n) {
        return fmt::format("{} tensors, {} names, {} full shapes in the plan", n, names.size(),
                           plan.full_shapes.size());
    }
    if (plan.n_senders < 1 || plan.n_senders >= size) {
        return fmt::format("the plan has {} senders in a sync communicator of {} ranks", plan.n_senders, size);
    }
    for (size_t i = 0; i < plan.pieces.size(); ++i) {
        const ReshardPiece& p = plan.pieces[i];
        if (p.tensor < 0 || static_cast<size_t>(p.tensor) >= n || p.src < 0 || p.src >= plan.n_senders ||
            p.dst < plan.n_senders || p.dst >= size) {
            return fmt::format("piece {} (tensor {}, {} -> {}) is outside the plan's tensors or ranks", i, p.tensor,
                               p.src, p.dst);
        }
        if (p.src != rank && p.dst != rank) continue;
        const torch::Tensor& t = tensors[static_cast<size_t>(p.tensor)];
        const std::string& name = names[static_cast<size_t>(p.tensor)];
        if (!t.defined() || t.layout() != torch::kStrided) return fmt::format("tensor '{}' is not a dense tensor", name);
        const auto& full = plan.full_shapes[static_cast<size_t>(p.tensor)];
        bool ok = t.dim() == static_cast<int64_t>(full.size()) && p.dim < t.dim();
        for (int64_t d = 0; ok && d < t.dim(); ++d) {
            if (d != p.dim) ok = t.size(d) == full[static_cast<size_t>(d)];
        }
        const int64_t offset = p.src == rank ? p.src_offset : p.dst_offset;
        if (ok && p.dim >= 0) ok = offset >= 0 && p.length >= 0 && offset + p.length <= t.size(p.dim);
        if (!ok) {
            return fmt::format("tensor '{}' of shape {} cannot hold piece {} (dim {}, offset {}, length {} of full "
                               "shape [{}])",
                               name, t.sizes(), i, p.dim, offset, p.length, fmt::join(full, ", "));
        }
    }
    return {};
}

class P2pWeightReshard final : public WeightReshard {
  public:
    P2pWeightReshard(std::string backend, Communicator comm, const WeightSyncOptions& options)
        : WeightReshard(options), backend_(std::move(backend)), comm_(std::move(comm)) {}

    ~P2pWeightReshard() override {
        if (broken_) {
            // A transfer that failed half-way may still write into these.
            for (auto& b : buffers_) new torch::Tensor(std::move(b));
            header_.release();
        }
    }

    std::string backend_name() const override { return transport_ ? transport_->name() : backend_; }

  protected:
    void do_sync(const ReshardPlan& plan, const std::vector<std::string>& names, std::vector<torch::Tensor>& tensors,
                 uint64_t& version, WeightReshardStats& stats) override;

  private:
    void resolve(const std::vector<torch::Tensor>& tensors, const Deadline& deadline);
    void transfer(const ReshardPlan& plan, const std::vector<Bucket>& buckets, std::vector<torch::Tensor>& tensors,
                  const Deadline& deadline, WeightReshardStats& stats);

    std::string backend_;
    Communicator comm_;
    std::unique_ptr<P2pTransport> transport_;
    std::vector<torch::Tensor> buffers_;
    std::unique_ptr<WireHeader> header_ = std::make_unique<WireHeader>();
    bool broken_ = false;
    std::string broken_reason_;
};

void P2pWeightReshard::resolve(const std::vector<torch::Tensor>& tensors, const Deadline& deadline) {
    int cuda_device = -1;
    int64_t all_cuda = tensors.empty() ? 0 : 1;
    for (const auto& t : tensors) {
        if (!t.defined() || !t.is_cuda()) {
            all_cuda = 0;
        } else if (cuda_device < 0) {
            cuda_device = t.device().index();
        }
    }
    comm_.allreduce(&all_cuda, 1, MPI_INT64_T, MPI_MIN, deadline);
#if RLPT_HAVE_NCCL
    if (backend_ == "nccl" || (backend_ == "auto" && all_cuda)) {
        RLPT_CHECK_KIND(ConfigError, all_cuda,
                        "weight reshard backend 'nccl' needs every rank's tensors on a CUDA device; use 'mpi' or 'auto'");
        transport_ = make_nccl_p2p(comm_, cuda_device);
    }
#endif
    if (!transport_) transport_ = make_mpi_p2p(comm_);
    if (comm_.rank() == 0) RLPT_LOG_INFO("weight reshard: backend '{}' uses '{}'", backend_, transport_->name());
}

void P2pWeightReshard::transfer(const ReshardPlan& plan, const std::vector<Bucket>& buckets,
                                std::vector<torch::Tensor>& tensors, const Deadline& deadline,
                                WeightReshardStats& stats) {
    const int me = comm_.rank();
    const torch::Device device = transport_->device();
    torch::NoGradGuard no_grad;
    // The tensor memory a direct bucket moves, when it is contiguous on the transport's device.
    // (Strided regions - a row-parallel column slice on the end holding a wider one - are packed
    // or unpacked: an MPI hvector datatype there measured 4-5x slower than a contiguous message
    // plus an unpack copy with Open MPI's shared-memory transport, which pipelines derived
    // datatypes through small fragments instead of one single-copy read.)
    auto direct_region = [&](const Bucket& b) {
        if (!b.direct) return torch::Tensor();
        const Part& part = b.parts.front();
        const ReshardPiece& p = plan.pieces[static_cast<size_t>(part.piece)];
        torch::Tensor r = region(tensors[static_cast<size_t>(p.tensor)], p, b.src == me, part);
        return r.device() == device && r.is_contiguous() ? r : torch::Tensor();
    };
    int64_t largest = 0;
    for (const Bucket& b : buckets) {
        if (!direct_region(b).defined()) largest = std::max(largest, b.bytes);
    }
    const size_t n_buffers = static_cast<size_t>(options().n_buffers);
    buffers_.resize(n_buffers);
    std::vector<size_t> free_slots;
    for (size_t s = n_buffers; s-- > 0;) {
        if (largest > 0 && (!buffers_[s].defined() || buffers_[s].numel() < largest || buffers_[s].device() != device))
            buffers_[s] = torch::empty({largest}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
        free_slots.push_back(s);
    }
    auto view = [&](const torch::Tensor& buffer, const Part& part, const torch::Tensor& like) {
        return buffer.narrow(0, part.offset, part.bytes).view(like.scalar_type()).view(like.sizes());
    };
    struct InFlight {
        size_t bucket;
        int64_t slot;  // -1: straight from / into tensor memory
    };
    std::deque<InFlight> in_flight;
    // Direct buckets need no slot: let many run at once, so a transfer made of many medium
    // messages is not bound by one scheduling round trip per message (oversubscribed ranks).
    const size_t max_in_flight = n_buffers + kDirectInFlight;
    using Clock = std::chrono::steady_clock;
    auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    auto finish_oldest = [&] {
        const auto t0 = Clock::now();
        transport_->finish_oldest(deadline);
        stats.wait_seconds += since(t0);
        const InFlight f = in_flight.front();
        in_flight.pop_front();
        if (f.slot < 0) return;
        const Bucket& b = buckets[f.bucket];
        if (b.dst == me) {
            const auto t1 = Clock::now();
            for (const Part& part : b.parts) {
                const ReshardPiece& p = plan.pieces[static_cast<size_t>(part.piece)];
                torch::Tensor dst = region(tensors[static_cast<size_t>(p.tensor)], p, false, part);
                dst.copy_(view(buffers_[static_cast<size_t>(f.slot)], part, dst));
            }
            stats.unpack_seconds += since(t1);
            stats.unpacked_bytes += b.bytes;
        }
        free_slots.push_back(static_cast<size_t>(f.slot));
    };
    transport_->begin(deadline);
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
        const Bucket& b = buckets[bi];
        const bool send = b.src == me;
        while (in_flight.size() >= max_in_flight) finish_oldest();
        InFlight f{bi, -1};
        void* data = nullptr;
        if (torch::Tensor r = direct_region(b); r.defined()) {
            data = r.data_ptr();
            ++stats.n_direct_messages;
        } else {
            while (free_slots.empty()) finish_oldest();
            f.slot = static_cast<int64_t>(free_slots.back());
            free_slots.pop_back();
            const torch::Tensor& buffer = buffers_[static_cast<size_t>(f.slot)];
            data = buffer.data_ptr();
            if (send) {
                const auto t0 = Clock::now();
                for (const Part& part : b.parts) {
                    const ReshardPiece& p = plan.pieces[static_cast<size_t>(part.piece)];
                    torch::Tensor src = region(tensors[static_cast<size_t>(p.tensor)], p, true, part);
                    view(buffer, part, src).copy_(src);
                }
                stats.pack_seconds += since(t0);
                stats.packed_bytes += b.bytes;
            }
        }
        transport_->start(send, data, b.bytes, send ? b.dst : b.src, deadline);
        in_flight.push_back(f);
        ++stats.n_messages;
        (send ? stats.bytes_sent : stats.bytes_received) += b.bytes;
    }
    while (!in_flight.empty()) finish_oldest();
}

void P2pWeightReshard::do_sync(const ReshardPlan& plan, const std::vector<std::string>& names,
                               std::vector<torch::Tensor>& tensors, uint64_t& version, WeightReshardStats& stats) {
    RLPT_CHECK_KIND(CommError, !broken_, "weight reshard is unusable after an earlier failure mid-transfer: {}",
                    broken_reason_);
    const Deadline deadline = Deadline::after_seconds(options().timeout_s);
    const auto t_agree = std::chrono::steady_clock::now();
    const int me = comm_.rank();
    // The agreement of weight_sync_plan.h over a layout text made of the plan, names and dtypes.
    Layout layout;
    layout.has_names = true;
    layout.local_error = local_problem(plan, names, tensors, me, comm_.size());
    layout.text = plan.describe();
    std::vector<int64_t> elem_size(tensors.size(), 0);
    for (size_t i = 0; i < tensors.size(); ++i) {
        const bool ok = tensors[i].defined();
        if (ok) elem_size[i] = static_cast<int64_t>(tensors[i].element_size());
        layout.text += fmt::format("{} {} {}\n", i, i < names.size() ? names[i] : std::string("-"),
                                   ok ? c10::toString(tensors[i].scalar_type()) : "undefined");
    }
    layout.nbytes.assign(tensors.size(), 0);
    if (layout.local_error.empty()) {
        for (const auto& p : plan.pieces) {
            int64_t n = elem_size[static_cast<size_t>(p.tensor)];
            for (int64_t d : region_shape(plan, p)) n *= d;
            layout.total_bytes += n;
        }
    }
    layout.hash = fnv1a_bytes(kFnvOffset, layout.text.data(), static_cast<int64_t>(layout.text.size()));
    WireHeader& header = *header_;
    header = me == 0 ? root_header(layout, version, options()) : WireHeader();
    std::string mismatch;
    try {
        mismatch = agree_on_layout(comm_, header, layout, std::string(), deadline);
        if (mismatch.empty() && !transport_) resolve(tensors, deadline);
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::kConfig) throw;  // collective and clean: nothing moved
        broken_ = true;
        broken_reason_ = e.what();
        rethrow_with_context("weight reshard: agreeing on the plan", e);
    }
    if (!mismatch.empty()) throw CommError("weight reshard: " + mismatch, __FILE__, __LINE__);
    try {
        const auto buckets = plan_buckets(plan, elem_size, static_cast<int64_t>(header.bucket_bytes),
                                          static_cast<int64_t>(header.inplace_min_bytes), me);
        for (const auto& p : plan.pieces) stats.n_pieces += (p.src == me || p.dst == me) ? 1 : 0;
        stats.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_agree).count();
        transfer(plan, buckets, tensors, deadline, stats);
    } catch (const std::exception& e) {
        broken_ = true;
        broken_reason_ = e.what();
        if (transport_) transport_->abandon();
        throw;
    }
    version = header.version;
    stats.version = header.version;
    stats.plan_bytes = static_cast<int64_t>(header.total_bytes);
}

// ---- MPI point to point ---------------------------------------------------------------------

constexpr int kReshardTag = 4243;

class MpiP2p final : public P2pTransport {
  public:
    explicit MpiP2p(const Communicator& comm) : comm_(comm) {}
    const char* name() const override { return "mpi"; }
    torch::Device device() const override { return torch::kCPU; }
    void begin(const Deadline&) override {}
    void start(bool send, void* data, int64_t bytes, int peer, const Deadline&) override {
        RLPT_CHECK(bytes <= kMaxMessageBytes, "weight reshard: a {}-byte message exceeds the MPI limit", bytes);
        MPI_Request req = MPI_REQUEST_NULL;
        if (send) {
            RLPT_MPI_CHECK(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, kReshardTag, comm_.get(), &req));
        } else {
            RLPT_MPI_CHECK(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, kReshardTag, comm_.get(), &req));
        }
        requests_.push_back(req);
    }
    // Polls without sleeping (every rank is inside the sync; see mpi_weight_sync.cpp).
    void finish_oldest(const Deadline& deadline) override {
        static const std::string kWhat = "weight reshard (mpi) payload";
        Backoff watch(&kWhat);
        MPI_Request& req = requests_.front();
        for (int flag = 0;;) {
            RLPT_MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
            if (flag) break;
            watch.report();
            if (deadline.expired()) {
                throw TimeoutError(
                    "weight reshard (mpi): deadline passed waiting for a bucket; raise trainer.call_timeout_s if "
                    "the transfer is just slow");
            }
            sched_yield();
        }
        requests_.pop_front();
    }

  private:
    const Communicator& comm_;
    std::deque<MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<P2pTransport> make_mpi_p2p(const Communicator& comm) { return std::make_unique<MpiP2p>(comm); }

}  // namespace detail

std::unique_ptr<WeightReshard> make_weight_reshard(const std::string& backend, const Communicator& comm,
                                                   const WeightSyncOptions& options) {
    detail::check_options(options);
    RLPT_CHECK_KIND(ConfigError, comm.valid(), "make_weight_reshard: the sync communicator is null");
    RLPT_CHECK_KIND(ConfigError, backend == "auto" || backend == "mpi" || backend == "nccl",
                    "unknown weight_sync backend '{}' (expected auto, mpi or nccl)", backend);
#if !RLPT_HAVE_NCCL
    RLPT_CHECK_KIND(ConfigError, backend != "nccl",
                    "weight_sync backend 'nccl' is not available: this rlpt was built without NCCL; use 'mpi' or "
                    "'auto'");
#endif
    return std::make_unique<detail::P2pWeightReshard>(backend, comm.dup(), options);
}

}  // namespace rlpt::comm
