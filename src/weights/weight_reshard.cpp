// Shard-to-shard weight sync (rlpt/weights/weight_reshard.h): agreement, the round schedule (messages
// cut into rounds of at most one bucket of staging per rank), packing with torch copies, the
// single-copy pairs (single_copy.h), the MPI point-to-point transport and the backend choice.
#include "rlpt/weights/weight_reshard.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <deque>

#include <fmt/ranges.h>

#include "rlpt/comm/shared_arena.h"
#include "rlpt/core/log.h"
#include "single_copy.h"
#include "weight_reshard_transport.h"
#include "weight_sync_plan.h"

namespace rlpt::weights {

using comm::arena_of;
using comm::Communicator;
using comm::Deadline;
using comm::device_collectives;
using comm::kMaxMessageBytes;
using comm::detail::Backoff;

std::string ReshardPlan::describe() const {
    std::string s = fmt::format("senders {}\n", n_senders);
    for (size_t t = 0; t < full_shapes.size(); ++t)
        s += fmt::format("shape {} [{}]\n", t, fmt::join(full_shapes[t], ", "));
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

constexpr int64_t kAlign = 16;  // staging offsets: any dtype can be viewed at them
constexpr size_t kMaxDims = 4;  // tensors of at most this many dimensions
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Sizes of a piece's region: the full shape with the sliced dimension cut to the piece.
std::vector<int64_t> region_shape(const ReshardPlan& plan, const ReshardPiece& p) {
    auto shape = plan.full_shapes[static_cast<size_t>(p.tensor)];
    if (p.dim >= 0) shape[static_cast<size_t>(p.dim)] = p.length;
    return shape;
}

// The piece's region of a rank's tensor (the source or destination side), rows [row0, +rows)
// of it along its first dimension.
torch::Tensor region(const torch::Tensor& t, const ReshardPiece& p, bool send, int64_t row0, int64_t rows) {
    torch::Tensor r = p.dim >= 0 ? t.narrow(p.dim, send ? p.src_offset : p.dst_offset, p.length) : t;
    return r.dim() == 0 ? r : r.narrow(0, row0, rows);
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
        if (!t.defined() || t.layout() != torch::kStrided || t.dim() > static_cast<int64_t>(kMaxDims))
            return fmt::format("tensor '{}' is not a dense tensor of at most {} dimensions", name, kMaxDims);
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

// ---- Moving regions: the schedule both WeightReshard and RegionExchange run ------------------

// Bytes transfer `t` stages on `rank` (a strided end of a message).
int64_t staged_on(const RegionTransfer& t, int rank) {
    if (t.src == t.dst) return 0;
    return (t.src == rank && !t.src_contiguous ? align_up(t.bytes) : 0) +
           (t.dst == rank && !t.dst_contiguous ? align_up(t.bytes) : 0);
}

// Counts transfer `t` (sent or received by rank `me`) in the stats.
void count_message(const RegionTransfer& t, int me, RegionExchangeStats& stats) {
    const bool send = t.src == me;
    ++stats.n_messages;
    (send ? stats.bytes_sent : stats.bytes_received) += t.bytes;
    (send ? stats.sent_to : stats.received_from)[static_cast<size_t>(send ? t.dst : t.src)] += t.bytes;
}

// This rank's end of a transfer as the single-copy path describes it (host memory only).
RegionLayout layout_of(const torch::Tensor& region) {
    if (!region.device().is_cpu()) {
        RegionLayout bad;
        bad.ndim = -1;
        return bad;
    }
    return describe_region(region.data_ptr(), static_cast<int64_t>(region.element_size()), region.sizes().data(),
                           region.strides().data(), region.dim());
}

// One round (region_exchange's schedule, weight_reshard.h): start every message of this rank in
// list order, copy the local transfers meanwhile, complete in order and unpack.
void run_round(P2pTransport& transport, int me, const std::vector<RegionTransfer>& all,
               const std::vector<char>& single_copy, size_t begin, size_t end, torch::Tensor& staging,
               const Deadline& deadline, RegionExchangeStats& stats) {
    using Clock = std::chrono::steady_clock;
    auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    ++stats.n_rounds;
    auto staged_view = [&](int64_t offset, const torch::Tensor& like) {
        return staging.narrow(0, offset, like.numel() * static_cast<int64_t>(like.element_size()))
            .view(like.scalar_type())
            .view(like.sizes());
    };
    struct Started {
        size_t transfer;
        int64_t staged_at;  // -1: in place
    };
    std::vector<Started> started;
    int64_t at = 0;
    for (size_t i = begin; i < end; ++i) {
        const RegionTransfer& t = all[i];
        if (t.src == t.dst || (t.src != me && t.dst != me) || single_copy[i]) continue;
        const bool send = t.src == me;
        const torch::Tensor& region = send ? t.src_region : t.dst_region;
        Started s{i, -1};
        void* data = nullptr;
        if (send ? t.src_contiguous : t.dst_contiguous) {
            RLPT_CHECK(region.device() == transport.device(), "weight transfer: a {} region for the {} transport",
                       region.device().str(), transport.name());
            data = region.data_ptr();
            ++stats.n_inplace_messages;
        } else {
            s.staged_at = at;
            at += align_up(t.bytes);
            torch::Tensor view = staged_view(s.staged_at, region);
            if (send) {
                const auto c0 = Clock::now();
                view.copy_(region);
                stats.pack_seconds += since(c0);
                stats.packed_bytes += t.bytes;
            }
            data = view.data_ptr();
        }
        transport.start(send, data, t.bytes, send ? t.dst : t.src, deadline);
        started.push_back(s);
        count_message(t, me, stats);
    }
    // Local copies while the messages move.
    const auto c0 = Clock::now();
    for (size_t i = begin; i < end; ++i) {
        const RegionTransfer& t = all[i];
        if (t.src != me || t.dst != me) continue;
        t.dst_region.copy_(t.src_region);
        stats.bytes_local += t.bytes;
    }
    stats.local_seconds += since(c0);
    for (const Started& s : started) {
        const auto w0 = Clock::now();
        transport.finish_oldest(deadline);
        stats.wait_seconds += since(w0);
        const RegionTransfer& t = all[s.transfer];
        if (s.staged_at >= 0 && t.dst == me) {
            const auto u0 = Clock::now();
            t.dst_region.copy_(staged_view(s.staged_at, t.dst_region));
            stats.unpack_seconds += since(u0);
            stats.unpacked_bytes += t.bytes;
        }
    }
}

// Moves an agreed transfer list (every rank passes the same one): the pairs of the transport's
// single copy first (the receiver reads the sender's regions; no staging), then the rest in
// rounds of at most `budget` staged bytes per rank, then waits until this rank's single-copy
// receivers are done with its memory. `staging` holds this rank's staging (reused when large
// enough; freed after the call unless `keep_staging`). `same_layouts`: every rank agreed that this
// list is the one of the previous call on this transport (same regions, same addresses) and every
// rank has entered this call, so the single-copy layouts need not move again (SingleCopy::start).
void move_regions(P2pTransport& transport, int me, int n, const std::vector<RegionTransfer>& transfers, int64_t budget,
                  torch::Tensor& staging, bool keep_staging, bool same_layouts, const Deadline& deadline,
                  RegionExchangeStats& stats) {
    using Clock = std::chrono::steady_clock;
    auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    torch::NoGradGuard no_grad;
    stats.sent_to.assign(static_cast<size_t>(n), 0);
    stats.received_from.assign(static_cast<size_t>(n), 0);
    transport.begin(deadline);
    SingleCopy* single = transport.single_copy();
    std::vector<char> via_single(transfers.size(), 0);
    std::vector<SingleCopy::Move> moves;
    std::vector<int64_t> copying(static_cast<size_t>(n), 0);  // bytes each rank copies itself
    for (size_t i = 0; single && i < transfers.size(); ++i) {
        const RegionTransfer& t = transfers[i];
        if (t.src == t.dst || t.bytes == 0 || !single->connects(t.src, t.dst)) continue;
        via_single[i] = 1;
        // Which end copies (the same choice on every rank, from the agreed list): the end that can
        // map the other's region when only one of them lies in an arena (memcpy through the
        // mapping, writes into its own memory; the colocated rollout copy, fresh every window, is
        // outside any arena); else the end whose region alone is strided (short runs are cheaper
        // locally under CMA, single_copy.h); else the end that copies less so far, so idle
        // senders share the work of busy receivers.
        const bool push = t.src_shared != t.dst_shared ? t.dst_shared
                          : t.src_contiguous != t.dst_contiguous
                              ? !t.src_contiguous
                              : copying[static_cast<size_t>(t.src)] < copying[static_cast<size_t>(t.dst)];
        copying[static_cast<size_t>(push ? t.src : t.dst)] += t.bytes;
        if (t.src != me && t.dst != me) continue;
        moves.push_back({t.src, t.dst, t.bytes, push, layout_of(t.src == me ? t.src_region : t.dst_region)});
        count_message(t, me, stats);
        ++stats.n_inplace_messages;
        ++stats.n_single_copy_messages;
    }
    if (single) {
        const auto w0 = Clock::now();
        single->start(std::move(moves), same_layouts);
        single->copy(deadline);
        stats.n_mapped_messages += single->mapped_moves();
        stats.mapped_bytes += single->mapped_bytes();
        stats.wait_seconds += since(w0);
    }
    // Rounds: cut before a transfer that would take some rank's staging past one bucket.
    std::vector<int64_t> used(static_cast<size_t>(n), 0);
    int64_t most_mine = 0;
    size_t begin = 0;
    std::vector<std::pair<size_t, size_t>> rounds;
    for (size_t i = 0; i < transfers.size(); ++i) {
        const RegionTransfer& t = transfers[i];
        if (via_single[i]) continue;
        const int64_t s = staged_on(t, t.src), d = staged_on(t, t.dst);  // both 0 for a local copy
        if (i > begin && ((s > 0 && used[static_cast<size_t>(t.src)] + s > budget) ||
                          (d > 0 && used[static_cast<size_t>(t.dst)] + d > budget))) {
            rounds.emplace_back(begin, i);
            begin = i;
            std::fill(used.begin(), used.end(), 0);
        }
        used[static_cast<size_t>(t.src)] += s;
        used[static_cast<size_t>(t.dst)] += d;
        most_mine = std::max(most_mine, used[static_cast<size_t>(me)]);
    }
    if (begin < transfers.size()) rounds.emplace_back(begin, transfers.size());
    if (most_mine > 0 && (!staging.defined() || staging.numel() < most_mine || staging.device() != transport.device()))
        staging = torch::empty({most_mine}, torch::TensorOptions().dtype(torch::kUInt8).device(transport.device()));
    stats.staging_bytes = staging.defined() ? staging.numel() : 0;
    for (const auto& r : rounds)
        run_round(transport, me, transfers, via_single, r.first, r.second, staging, deadline, stats);
    if (single) {
        const auto w0 = Clock::now();
        single->finish(deadline);
        stats.wait_seconds += since(w0);
    }
    if (!keep_staging) staging = torch::Tensor();
}

// What every rank contributes to the one all-gather that opens a sync (the agreement).
struct SyncCard {
    uint64_t magic = 0;
    uint64_t version = 0;       // the caller's; rank 0's is the sync's
    uint64_t agreement = 0;     // hash of the plan, names and dtypes: every rank's must be rank 0's
    uint64_t bucket_bytes = 0;  // the options'; rank 0's is the sync's
    int64_t ok = 0;             // 1: this rank can take part (local_problem found nothing)
    int64_t cached = 0;         // 1: plan, names, dtypes, local sizes, strides and data pointers as in its cache
    int64_t generation = 0;     // which sync built this rank's cache (0: none)
};
constexpr uint64_t kReshardMagic = 0x524c5054'52534844ULL;  // "RLPTRSHD"

// The transfer list of the last sync that computed one, kept for the next syncs of the same
// plan and tensors. Its regions borrow the tensors' memory (torch::from_blob, no ownership), so
// the cache never keeps a tensor the caller dropped alive; it is used only when every rank's
// data pointers, sizes and strides are those it was built from.
struct TransferCache {
    std::vector<int64_t> state;  // this rank's local_state when built
    int64_t generation = 0;
    uint64_t bucket_bytes = 0;
    std::vector<RegionTransfer> list;
    int64_t n_pieces = 0, total_bytes = 0;
};

class P2pWeightReshard final : public WeightReshard {
  public:
    P2pWeightReshard(std::string backend, Communicator comm, const WeightSyncOptions& options)
        : WeightReshard(options), backend_(std::move(backend)), comm_(std::move(comm)) {}

    ~P2pWeightReshard() override {
        if (broken_) {
            // A transfer that failed half-way may still write into these.
            new torch::Tensor(std::move(staging_));
            cards_.release();
        }
    }

    std::string backend_name() const override { return transport_ ? transport_->name() : backend_; }

  protected:
    void do_sync(const ReshardPlan& plan, const std::vector<std::string>& names, std::vector<torch::Tensor>& tensors,
                 uint64_t& version, WeightReshardStats& stats) override;

  private:
    void resolve(const std::vector<torch::Tensor>& tensors, const Deadline& deadline);
    std::vector<RegionTransfer> transfers(const ReshardPlan& plan, const std::vector<torch::Tensor>& tensors,
                                          const std::vector<int64_t>& elem_size, int64_t bucket_bytes,
                                          const Deadline& deadline) const;
    std::string refusal(const ReshardPlan& plan, const std::vector<std::string>& names,
                        const std::vector<torch::Tensor>& tensors, const std::string& problem,
                        const Deadline& deadline) const;

    std::string backend_;
    Communicator comm_;
    std::unique_ptr<P2pTransport> transport_;
    torch::Tensor staging_;
    // The agreement's receive buffer (rank order); leaked when a failed all-gather may still write.
    std::unique_ptr<std::vector<SyncCard>> cards_ = std::make_unique<std::vector<SyncCard>>();
    TransferCache cache_;
    int64_t generations_ = 0;
    bool broken_ = false;
    std::string broken_reason_;
};

// The transport of `backend` for these tensors (collective on `comm`: agrees whether every
// rank's tensors are on CUDA).
std::unique_ptr<P2pTransport> choose_transport(const std::string& backend, const Communicator& comm,
                                               const std::vector<torch::Tensor>& tensors,
                                               const WeightSyncOptions& options, const Deadline& deadline,
                                               const char* what) {
    int cuda_device = -1;
    int64_t all[2] = {tensors.empty() ? 0 : 1, 1};  // every rank's tensors on CUDA; on the host
    for (const auto& t : tensors) {
        if (t.defined() && !t.device().is_cpu()) all[1] = 0;
        if (!t.defined() || !t.is_cuda()) {
            all[0] = 0;
        } else if (cuda_device < 0) {
            cuda_device = t.device().index();
        }
    }
    comm.allreduce(all, 2, MPI_INT64_T, MPI_MIN, deadline);
    const bool all_cuda = all[0] != 0;
    std::unique_ptr<P2pTransport> transport;
#if RLPT_HAVE_NCCL
    if (weights_over_nccl(backend, true, device_collectives(), all_cuda)) {
        RLPT_CHECK_KIND(ConfigError, all_cuda,
                        "{} backend 'nccl' needs every rank's tensors on a CUDA device; use 'mpi' or 'auto'", what);
        transport = make_nccl_p2p(comm, cuda_device);
    }
#endif
    if (!transport) transport = make_mpi_p2p(comm, options.single_copy && all[1] != 0);
    if (comm.rank() == 0) RLPT_LOG_INFO("{}: backend '{}' uses '{}'", what, backend, transport->name());
    return transport;
}

void P2pWeightReshard::resolve(const std::vector<torch::Tensor>& tensors, const Deadline& deadline) {
    transport_ = choose_transport(backend_, comm_, tensors, options(), deadline, "weight reshard");
}

// The plan as region transfers (the same list on every rank): each piece cut along its first
// dimension into messages of at most one bucket; an end is in place where its region is
// contiguous in that rank's tensor (every rank's local sizes are all-gathered to know the
// other ends: row slices and whole tensors on both ends, a row-parallel column slice on the end
// holding exactly that slice), staged otherwise. Collective (the all-gather).
std::vector<RegionTransfer> P2pWeightReshard::transfers(const ReshardPlan& plan,
                                                        const std::vector<torch::Tensor>& tensors,
                                                        const std::vector<int64_t>& elem_size, int64_t bucket_bytes,
                                                        const Deadline& deadline) const {
    const int me = comm_.rank();
    const size_t nt = tensors.size();
    std::vector<int64_t> mine(nt * kMaxDims, 0), all(mine.size() * static_cast<size_t>(comm_.size()));
    for (size_t i = 0; i < nt; ++i)
        for (int64_t d = 0; d < tensors[i].dim(); ++d) mine[i * kMaxDims + static_cast<size_t>(d)] = tensors[i].size(d);
    comm_.allgather(mine.data(), all.data(), static_cast<int64_t>(mine.size() * sizeof(int64_t)), deadline);
    // Whether `rows` rows of the piece's region are contiguous in `rank`'s (contiguous) tensor
    // (the offsets do not matter): arithmetic on the sizes, as region(...).is_contiguous() on an
    // empty tensor of those sizes would say (torch calls per message cost every rank
    // milliseconds per sync).
    auto contiguous_on = [&](int rank, const ReshardPiece& p, int64_t rows) {
        const size_t nd = plan.full_shapes[static_cast<size_t>(p.tensor)].size();
        if (nd == 0) return true;
        const int64_t* sizes = &all[(static_cast<size_t>(rank) * nt + static_cast<size_t>(p.tensor)) * kMaxDims];
        std::vector<int64_t> box(sizes, sizes + nd);
        if (p.dim >= 0) box[static_cast<size_t>(p.dim)] = p.length;
        box[0] = rows;
        int64_t numel = 1;
        for (int64_t b : box) numel *= b;
        if (numel <= 1) return true;
        // Contiguous iff every dimension inside the innermost cut one is whole and every one
        // outside it has one entry (size-1 dimensions do not count).
        size_t cut = nd;
        for (size_t d = nd; d-- > 0;) {
            if (box[d] != sizes[d]) {
                cut = d;
                break;
            }
        }
        for (size_t d = 0; d < cut && cut < nd; ++d)
            if (box[d] != 1) return false;
        return true;
    };
    const int64_t max_bytes = std::min(bucket_bytes, kMaxMessageBytes);
    std::vector<RegionTransfer> out;
    for (const ReshardPiece& p : plan.pieces) {
        const auto shape = region_shape(plan, p);
        const int64_t rows = shape.empty() ? 1 : shape[0];
        int64_t row_bytes = elem_size[static_cast<size_t>(p.tensor)];
        for (size_t d = 1; d < shape.size(); ++d) row_bytes *= shape[d];
        if (rows == 0 || row_bytes == 0) continue;
        const int64_t step = std::max<int64_t>(1, max_bytes / row_bytes);  // one oversized row goes alone
        for (int64_t r = 0; r < rows; r += step) {
            const int64_t take = std::min(step, rows - r);
            RegionTransfer t;
            t.src = p.src;
            t.dst = p.dst;
            t.bytes = take * row_bytes;
            t.src_contiguous = contiguous_on(p.src, p, take);
            t.dst_contiguous = contiguous_on(p.dst, p, take);
            const torch::Tensor& local = tensors[static_cast<size_t>(p.tensor)];
            if (p.src == me) t.src_region = region(local, p, true, r, take);
            if (p.dst == me) t.dst_region = region(local, p, false, r, take);
            RLPT_CHECK((!t.src_region.defined() || !t.src_contiguous || t.src_region.is_contiguous()) &&
                           (!t.dst_region.defined() || !t.dst_contiguous || t.dst_region.is_contiguous()),
                       "weight reshard: piece of tensor {} flagged contiguous but strided here", p.tensor);
            out.push_back(std::move(t));
        }
    }
    return out;
}

// Everything of this rank a sync's transfer list depends on, as words: first the part every rank
// must agree on (the plan, the tensors' dtypes, a hash of the names: `*n_agreed` words), then this
// rank's tensors' data pointers, shared arenas, sizes, strides and devices. Equal to a cached one exactly when the
// cached transfer list is still this rank's list.
std::vector<int64_t> local_state(const ReshardPlan& plan, const std::vector<std::string>& names,
                                 const std::vector<torch::Tensor>& tensors, size_t* n_agreed) {
    std::vector<int64_t> s;
    s.reserve(8 + plan.pieces.size() * 7 + tensors.size() * 16);
    s.push_back(plan.n_senders);
    s.push_back(static_cast<int64_t>(plan.full_shapes.size()));
    for (const auto& shape : plan.full_shapes) {
        s.push_back(static_cast<int64_t>(shape.size()));
        s.insert(s.end(), shape.begin(), shape.end());
    }
    s.push_back(static_cast<int64_t>(plan.pieces.size()));
    for (const ReshardPiece& p : plan.pieces)
        s.insert(s.end(), {p.tensor, p.src, p.dst, p.dim, p.src_offset, p.dst_offset, p.length});
    uint64_t h = kFnvOffset;
    for (const auto& name : names)
        h = fnv1a_bytes(h, name.data(), static_cast<int64_t>(name.size()) + 1);  // with the NUL
    s.push_back(static_cast<int64_t>(names.size()));
    s.push_back(static_cast<int64_t>(h));
    s.push_back(static_cast<int64_t>(tensors.size()));
    for (const auto& t : tensors) s.push_back(t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1);
    *n_agreed = s.size();
    for (const auto& t : tensors) {
        const bool dense = t.defined() && t.layout() == torch::kStrided && t.has_storage();
        s.push_back(dense ? static_cast<int64_t>(reinterpret_cast<intptr_t>(t.data_ptr())) : 0);
        s.push_back(dense ? t.dim() : -1);
        if (!dense) continue;
        s.push_back(static_cast<int64_t>(t.device().type()));
        s.push_back(t.device().index());
        // The shared arena the memory lies in: a new arena at a freed one's address is new memory
        // to a peer that maps arenas (the single copy's layouts name the arena).
        s.push_back(t.is_cpu() ? static_cast<int64_t>(
                                     arena_of(t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size())).id)
                               : 0);
        s.insert(s.end(), t.sizes().begin(), t.sizes().end());
        s.insert(s.end(), t.strides().begin(), t.strides().end());
    }
    return s;
}

// A view of `t`'s memory that does not own it (undefined stays undefined).
torch::Tensor borrowed(const torch::Tensor& t) {
    if (!t.defined()) return t;
    return torch::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options());
}

// The first line where `mine` differs from rank 0's `root` (both ReshardPlan::describe() plus
// one line per tensor).
std::string first_difference(const std::string& root, const std::string& mine) {
    size_t a = 0, b = 0;
    for (int line = 0; a < root.size() || b < mine.size(); ++line) {
        const size_t ea = std::min(root.find('\n', a), root.size()), eb = std::min(mine.find('\n', b), mine.size());
        if (root.compare(a, ea - a, mine, b, eb - b) != 0) {
            return fmt::format("first difference at line {} of the plan: rank 0 has '{}', this rank has '{}'", line,
                               root.substr(a, ea - a), mine.substr(b, eb - b));
        }
        a = ea + 1;
        b = eb + 1;
    }
    return "the plan's hash differs from rank 0's";
}

std::string P2pWeightReshard::refusal(const ReshardPlan& plan, const std::vector<std::string>& names,
                                      const std::vector<torch::Tensor>& tensors, const std::string& problem,
                                      const Deadline& deadline) const {
    const std::vector<SyncCard>& cards = *cards_;
    const int me = comm_.rank();
    std::string text = plan.describe();
    for (size_t i = 0; i < tensors.size(); ++i) {
        text += fmt::format("tensor {} {} {}\n", i, i < names.size() ? names[i] : std::string("-"),
                            tensors[i].defined() ? c10::toString(tensors[i].scalar_type()) : "undefined");
    }
    std::string root_text = me == 0 ? text : std::string();
    comm_.bcast_string(root_text, 0, deadline);
    std::string why = problem;
    if (why.empty() && cards[static_cast<size_t>(me)].agreement != cards[0].agreement)
        why = first_difference(root_text, text);
    const auto problems = comm_.allgather_strings(why, deadline);
    std::string bad, detail;
    for (size_t r = 0; r < problems.size(); ++r) {
        if (problems[r].empty()) continue;
        bad += fmt::format("{}{}", bad.empty() ? "" : ", ", r);
        detail += fmt::format("; rank {}: {}", r, problems[r]);
    }
    return fmt::format("weight sync of version {} refused before any payload moved: sync-communicator rank(s) {} "
                       "disagree with rank 0's plan ({} pieces){}",
                       cards[0].version, bad, plan.pieces.size(), detail);
}

void P2pWeightReshard::do_sync(const ReshardPlan& plan, const std::vector<std::string>& names,
                               std::vector<torch::Tensor>& tensors, uint64_t& version, WeightReshardStats& stats) {
    using Clock = std::chrono::steady_clock;
    auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    RLPT_CHECK_KIND(CommError, !broken_, "weight reshard is unusable after an earlier failure mid-transfer: {}",
                    broken_reason_);
    const Deadline deadline = Deadline::after_seconds(options().timeout_s);
    const auto t_agree = Clock::now();
    const int me = comm_.rank(), n = comm_.size();
    // The agreement: one all-gather of every rank's card (weight_reshard.h, step 1).
    const std::string problem = local_problem(plan, names, tensors, me, n);
    size_t n_agreed = 0;
    std::vector<int64_t> state = local_state(plan, names, tensors, &n_agreed);
    SyncCard mine;
    mine.magic = kReshardMagic;
    mine.version = version;
    mine.agreement = fnv1a_words(kFnvOffset, state.data(), static_cast<int64_t>(n_agreed * sizeof(int64_t)));
    mine.bucket_bytes = static_cast<uint64_t>(options().bucket_bytes);
    mine.ok = problem.empty() ? 1 : 0;
    mine.cached = cache_.generation > 0 && state == cache_.state ? 1 : 0;
    mine.generation = cache_.generation;
    std::vector<SyncCard>& cards = *cards_;
    cards.assign(static_cast<size_t>(n), SyncCard{});
    std::string mismatch;
    bool reuse = false;
    try {
        comm_.allgather(&mine, cards.data(), sizeof(SyncCard), deadline);
        bool agreed = true;
        reuse = cards[0].bucket_bytes == cache_.bucket_bytes;
        for (const SyncCard& c : cards) {
            agreed = agreed && c.magic == kReshardMagic && c.ok == 1 && c.agreement == cards[0].agreement;
            reuse = reuse && c.cached == 1 && c.generation == cards[0].generation;
        }
        reuse = reuse && agreed;
        if (!agreed) {
            mismatch = refusal(plan, names, tensors, problem, deadline);
        } else if (!transport_) {
            resolve(tensors, deadline);
        }
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::kConfig) throw;  // collective and clean: nothing moved
        broken_ = true;
        broken_reason_ = e.what();
        rethrow_with_context("weight reshard: agreeing on the plan", e);
    }
    if (!mismatch.empty()) throw CommError("weight reshard: " + mismatch, __FILE__, __LINE__);
    stats.agree_seconds = since(t_agree);
    const SyncCard& root = cards[0];
    try {
        if (!reuse) {  // every rank computes the list again (the same decision on every rank)
            cache_ = TransferCache{};
            std::vector<int64_t> elem_size(tensors.size(), 0);
            for (size_t i = 0; i < tensors.size(); ++i)
                if (tensors[i].defined()) elem_size[i] = static_cast<int64_t>(tensors[i].element_size());
            cache_.list = transfers(plan, tensors, elem_size, static_cast<int64_t>(root.bucket_bytes), deadline);
            for (RegionTransfer& t : cache_.list) {
                t.src_region = borrowed(t.src_region);
                t.dst_region = borrowed(t.dst_region);
            }
            for (const auto& p : plan.pieces) {
                cache_.n_pieces += (p.src == me || p.dst == me) ? 1 : 0;
                int64_t bytes = elem_size[static_cast<size_t>(p.tensor)];
                for (int64_t d : region_shape(plan, p)) bytes *= d;
                cache_.total_bytes += bytes;
            }
            cache_.bucket_bytes = root.bucket_bytes;
            cache_.state = std::move(state);
            cache_.generation = ++generations_;
        }
        stats.reused_transfers = reuse;
        stats.n_pieces = cache_.n_pieces;
        stats.plan_seconds = since(t_agree);
        RegionExchangeStats x;
        // The staging stays between syncs (like WeightSync's buffers): at most one bucket.
        move_regions(*transport_, me, n, cache_.list, static_cast<int64_t>(root.bucket_bytes), staging_,
                     /*keep_staging=*/true, /*same_layouts=*/reuse, deadline, x);
        stats.n_messages = x.n_messages;
        stats.n_direct_messages = x.n_inplace_messages;
        stats.n_single_copy_messages = x.n_single_copy_messages;
        stats.n_mapped_messages = x.n_mapped_messages;
        stats.mapped_bytes = x.mapped_bytes;
        stats.packed_bytes = x.packed_bytes;
        stats.unpacked_bytes = x.unpacked_bytes;
        stats.pack_seconds = x.pack_seconds;
        stats.unpack_seconds = x.unpack_seconds;
        stats.wait_seconds = x.wait_seconds;
        stats.bytes_sent = x.bytes_sent;
        stats.bytes_received = x.bytes_received;
    } catch (const std::exception& e) {
        broken_ = true;
        broken_reason_ = e.what();
        cache_ = TransferCache{};
        if (transport_) transport_->abandon();
        throw;
    }
    version = root.version;
    stats.version = root.version;
    stats.plan_bytes = cache_.total_bytes;
}

// ---- Region exchange ---------------------------------------------------------------------------

class P2pRegionExchange final : public RegionExchange {
  public:
    P2pRegionExchange(std::string backend, Communicator comm, const WeightSyncOptions& options)
        : RegionExchange(options), backend_(std::move(backend)), comm_(std::move(comm)) {}
    ~P2pRegionExchange() override {
        if (broken_) new torch::Tensor(std::move(staging_));  // a failed transfer may still write into it
    }
    const Communicator& comm() const override { return comm_; }
    std::string backend_name() const override { return transport_ ? transport_->name() : backend_; }
    void run(const std::vector<RegionTransfer>& transfers) override;

  private:
    std::string backend_;
    Communicator comm_;
    std::unique_ptr<P2pTransport> transport_;
    torch::Tensor staging_;
    bool broken_ = false;
    std::string broken_reason_;
};

void P2pRegionExchange::run(const std::vector<RegionTransfer>& transfers) {
    RLPT_CHECK_KIND(CommError, !broken_, "region exchange is unusable after an earlier failure mid-transfer: {}",
                    broken_reason_);
    const auto t0 = std::chrono::steady_clock::now();
    stats_ = RegionExchangeStats{};
    const Deadline deadline = Deadline::after_seconds(options().timeout_s);
    const int me = comm_.rank(), n = comm_.size();
    // Agreement: the same list on every rank, and this rank's regions where the list says.
    std::string problem;
    uint64_t hash = kFnvOffset;
    std::vector<torch::Tensor> mine;
    for (size_t i = 0; i < transfers.size(); ++i) {
        const RegionTransfer& t = transfers[i];
        const int64_t meta[6] = {t.src,
                                 t.dst,
                                 t.bytes,
                                 t.src_contiguous ? 1 : 0,
                                 t.dst_contiguous ? 1 : 0,
                                 (t.src_shared ? 2 : 0) + (t.dst_shared ? 1 : 0)};
        if (t.src != t.dst) hash = fnv1a_bytes(hash, meta, sizeof(meta));  // local copies are the rank's own
        if (!problem.empty()) continue;
        if (t.src < 0 || t.src >= n || t.dst < 0 || t.dst >= n || t.bytes < 0 || t.bytes > kMaxMessageBytes) {
            problem = fmt::format("transfer {} ({} -> {}, {} bytes) is outside the {} ranks or the message limit", i,
                                  t.src, t.dst, t.bytes, n);
            continue;
        }
        for (int end = 0; end < 2 && problem.empty(); ++end) {
            const bool is_src = end == 0;
            if ((is_src ? t.src : t.dst) != me) continue;
            const torch::Tensor& r = is_src ? t.src_region : t.dst_region;
            const bool contiguous = is_src ? t.src_contiguous : t.dst_contiguous;
            if (!r.defined() || r.numel() * static_cast<int64_t>(r.element_size()) != t.bytes ||
                (contiguous && t.src != t.dst && !r.is_contiguous())) {
                problem = fmt::format("transfer {} ({} -> {}): this rank's {} region is {} for {} {} bytes", i, t.src,
                                      t.dst, is_src ? "source" : "destination",
                                      r.defined() ? fmt::format("{} {}", r.sizes(), c10::toString(r.scalar_type()))
                                                  : std::string("undefined"),
                                      t.bytes, contiguous ? "contiguous" : "strided");
            } else {
                mine.push_back(r);
            }
        }
        if (problem.empty() && t.src == me && t.dst == me &&
            (t.src_region.sizes() != t.dst_region.sizes() || t.src_region.scalar_type() != t.dst_region.scalar_type()))
            problem = fmt::format("local transfer {}: source {} and destination {} differ", i, t.src_region.sizes(),
                                  t.dst_region.sizes());
    }
    // One all-gather of (hash, ok) per rank; the problems' texts only when one rank has one.
    const int64_t mine_card[2] = {static_cast<int64_t>(hash), problem.empty() ? 1 : 0};
    std::vector<int64_t> cards(2 * static_cast<size_t>(n));
    comm_.allgather(mine_card, cards.data(), sizeof(mine_card), deadline);
    bool agreed = true;
    for (size_t r = 0; r < static_cast<size_t>(n); ++r)
        agreed = agreed && cards[2 * r] == cards[0] && cards[2 * r + 1] == 1;
    if (!agreed) {
        const auto problems = comm_.allgather_strings(problem, deadline);
        std::string mismatch;
        for (int r = 0; r < n; ++r) {
            if (cards[2 * static_cast<size_t>(r)] != cards[0])
                mismatch += fmt::format("; rank {} was given another transfer list than rank 0", r);
            if (!problems[static_cast<size_t>(r)].empty())
                mismatch += fmt::format("; rank {}: {}", r, problems[static_cast<size_t>(r)]);
        }
        throw CommError("region exchange: " + mismatch.substr(2), __FILE__, __LINE__);
    }
    try {
        if (!transport_) transport_ = choose_transport(backend_, comm_, mine, options(), deadline, "region exchange");
        // The staging is freed after each run: a colocated rollout holds nothing between windows.
        move_regions(*transport_, me, n, transfers, options().bucket_bytes, staging_, /*keep_staging=*/false,
                     /*same_layouts=*/false, deadline, stats_);
    } catch (const std::exception& e) {
        broken_ = true;
        broken_reason_ = e.what();
        if (transport_) transport_->abandon();
        throw;
    }
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- MPI point to point ---------------------------------------------------------------------

constexpr int kReshardTag = 4243;

class MpiP2p final : public P2pTransport {
  public:
    MpiP2p(const Communicator& comm, bool single_copy) : comm_(comm), want_single_copy_(single_copy) {}
    const char* name() const override { return "mpi"; }
    torch::Device device() const override { return torch::kCPU; }
    void begin(const Deadline& deadline) override {
        if (want_single_copy_ && !single_copy_) single_copy_ = std::make_unique<SingleCopy>(comm_, true, deadline);
    }
    SingleCopy* single_copy() override {
        return single_copy_ && single_copy_->pairs() > 0 ? single_copy_.get() : nullptr;
    }
    void abandon() noexcept override {
        if (single_copy_) single_copy_->abandon();
    }
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
    bool want_single_copy_;
    std::unique_ptr<SingleCopy> single_copy_;
};

}  // namespace

std::unique_ptr<P2pTransport> make_mpi_p2p(const Communicator& comm, bool single_copy) {
    return std::make_unique<MpiP2p>(comm, single_copy);
}

}  // namespace detail

namespace {
void check_backend(const std::string& backend, const Communicator& comm, const WeightSyncOptions& options,
                   const char* what) {
    detail::check_options(options);
    RLPT_CHECK_KIND(ConfigError, comm.valid(), "{}: the communicator is null", what);
    check_weight_backend(backend, RLPT_HAVE_NCCL, device_collectives(), "weight_sync");
}
}  // namespace

std::unique_ptr<WeightReshard> make_weight_reshard(const std::string& backend, const Communicator& comm,
                                                   const WeightSyncOptions& options) {
    check_backend(backend, comm, options, "make_weight_reshard");
    return std::make_unique<detail::P2pWeightReshard>(backend, comm.dup(), options);
}

std::unique_ptr<RegionExchange> make_region_exchange(const std::string& backend, const Communicator& comm,
                                                     const WeightSyncOptions& options) {
    check_backend(backend, comm, options, "make_region_exchange");
    return std::make_unique<detail::P2pRegionExchange>(backend, comm.dup(), options);
}

}  // namespace rlpt::weights
