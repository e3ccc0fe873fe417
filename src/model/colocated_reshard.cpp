// Colocated resharding (rlpt/model/reshard_plan.h): the rollout-layout parameters filled from
// the actor's layout one parameter at a time, and the storage management around it.
#include <c10/core/StorageImpl.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "model/weights_io.h"
#include "rlpt/core/error.h"
#include "rlpt/model/reshard_plan.h"

namespace rlpt::model {

void free_storage(const torch::Tensor& t) {
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    if (s->nbytes() == 0) return;
    s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
    s->set_nbytes(0);
}

namespace {

// Fresh memory is slow to fill on a CPU host: the first write to every 4 KiB page faults (about
// 1.7 GB/s on the dev VM against ~10 GB/s into warm memory). Large host buffers re-allocated
// at every generation window or ZeRO-3 unit ask for transparent huge pages instead (one fault
// per 2 MiB; honoured when /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or
// "always", ignored otherwise).
constexpr size_t kHugePage = size_t(2) << 20;

void advise_huge_pages(void* data, size_t bytes) {
    if (data == nullptr || bytes < 2 * kHugePage) return;
    const auto begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
    const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice only
}

}  // namespace

void alloc_storage(const torch::Tensor& t) {
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    const size_t bytes = static_cast<size_t>(t.storage_offset() + t.numel()) * t.element_size();
    if (s->nbytes() >= bytes) return;
    RLPT_CHECK_KIND(InternalError, s->allocator() != nullptr, "alloc_storage: the tensor's storage has no allocator");
    at::DataPtr data = s->allocator()->allocate(bytes);
    if (t.is_cpu()) advise_huge_pages(data.get(), bytes);
    s->set_data_ptr_noswap(std::move(data));
    s->set_nbytes(bytes);
}

namespace {

// A parameter seen as a matrix: rows = size(0), columns = the product of the other sizes (a
// 1-D tensor is one column). A split along dim 0 cuts rows, along dim 1 (2-D only) columns.
struct Rect {
    int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
    bool empty() const { return r0 >= r1 || c0 >= c1; }
};
Rect intersect(const Rect& a, const Rect& b) {
    return {std::max(a.r0, b.r0), std::min(a.r1, b.r1), std::max(a.c0, b.c0), std::min(a.c1, b.c1)};
}

// One rank's slice of a parameter in one layout: its local matrix (padding included) and where
// it sits in the full one.
struct Slice2 {
    int64_t row_off = 0, col_off = 0;  // full coordinates of local (0, 0)
    int64_t rows = 0, cols = 0;        // local shape
    Rect real;                         // the part that exists in the full tensor (full coordinates)
    bool same_place(const Slice2& o) const {
        return row_off == o.row_off && col_off == o.col_off && rows == o.rows && cols == o.cols;
    }
};

Slice2 slice2(const std::string& name, const TpLayout& layout, const std::vector<int64_t>& full) {
    const ShardSpec s = shard_spec(name, layout);
    RLPT_CHECK_KIND(InternalError, !full.empty() && (s.dim < 1 || (s.dim == 1 && full.size() == 2)),
                    "colocated reshard: parameter '{}' of {} dimensions split along dim {}", name, full.size(), s.dim);
    Slice2 o;
    o.rows = full[0];
    o.cols = 1;
    for (size_t d = 1; d < full.size(); ++d) o.cols *= full[d];
    o.real = {0, o.rows, 0, o.cols};
    if (s.dim == 0) {
        o.row_off = s.start;
        o.rows = s.length;
        o.real.r0 = s.start;
        o.real.r1 = s.start + s.real();
    } else if (s.dim == 1) {
        o.col_off = s.start;
        o.cols = s.length;
        o.real.c0 = s.start;
        o.real.c1 = s.start + s.real();
    }
    return o;
}

// Elements [x, y) of a row-major matrix of `cols` columns as at most three rectangles.
std::vector<Rect> rows_of_range(int64_t x, int64_t y, int64_t cols) {
    std::vector<Rect> out;
    if (y <= x) return out;
    const int64_t ra = x / cols, ca = x % cols, rb = (y - 1) / cols, cb = (y - 1) % cols;
    if (ra == rb) return {Rect{ra, ra + 1, ca, cb + 1}};
    int64_t mid0 = ra, mid1 = rb + 1;
    if (ca > 0) {
        out.push_back({ra, ra + 1, ca, cols});
        mid0 = ra + 1;
    }
    if (cb < cols - 1) mid1 = rb;
    if (mid1 > mid0) out.push_back({mid0, mid1, 0, cols});
    if (cb < cols - 1) out.push_back({rb, rb + 1, 0, cb + 1});
    return out;
}

// Per rank of the exchange: [src tp, src tp rank, dst tp, dst tp rank, then begin, end per parameter].
constexpr size_t kInfoHead = 4;

}  // namespace

ColocatedReshardStats reshard_colocated(const std::vector<HeldSlice>& held, const ModelArgs& args, int64_t src_tp,
                                        int64_t src_tp_rank, comm::RegionExchange& exchange, torch::nn::Module& dst,
                                        const TpLayout& dst_layout) {
    const auto t0 = std::chrono::steady_clock::now();
    torch::NoGradGuard no_grad;
    ColocatedReshardStats stats;
    auto params = dst.named_parameters(/*recurse=*/true);
    RLPT_CHECK_KIND(InternalError, held.size() == params.size(),
                    "colocated reshard: the source has {} parameters, the destination {}", held.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
        const auto& p = params[i];
        RLPT_CHECK_KIND(InternalError, held[i].name == p.key() && held[i].data.defined() &&
                                           held[i].data.scalar_type() == p.value().scalar_type() &&
                                           held[i].data.numel() == held[i].end - held[i].begin,
                        "colocated reshard: source parameter {} '{}' does not match the destination's '{}'", i,
                        held[i].name, p.key());
        alloc_storage(p.value());
        stats.dst_bytes += p.value().numel() * p.value().element_size();
    }
    // Every rank's layouts and held ranges.
    const comm::Communicator& comm = exchange.comm();
    const int n = comm.size(), me = comm.rank();
    std::vector<int64_t> mine{src_tp, src_tp_rank, dst_layout.tp, dst_layout.rank};
    for (const auto& h : held) {
        mine.push_back(h.begin);
        mine.push_back(h.end);
    }
    const auto lengths = comm.allgather_i64(static_cast<int64_t>(mine.size()));
    for (int r = 0; r < n; ++r)
        RLPT_CHECK_KIND(InternalError, lengths[static_cast<size_t>(r)] == lengths[0],
                        "colocated reshard: rank {} has {} parameters, rank 0 {}", r,
                        (lengths[static_cast<size_t>(r)] - 4) / 2, (lengths[0] - 4) / 2);
    std::vector<int64_t> all(mine.size() * static_cast<size_t>(n));
    comm.allgather(mine.data(), all.data(), static_cast<int64_t>(mine.size() * sizeof(int64_t)));
    auto info = [&](int r, size_t k) { return all[static_cast<size_t>(r) * mine.size() + k]; };
    for (int r = 0; r < n; ++r)
        RLPT_CHECK_KIND(InternalError, info(r, 0) == src_tp,
                        "colocated reshard: rank {} holds the source at tp {}, this rank at tp {}", r, info(r, 0), src_tp);

    const int64_t max_bytes = std::min(exchange.options().bucket_bytes, comm::kMaxMessageBytes);
    std::vector<comm::RegionTransfer> transfers;
    for (size_t i = 0; i < params.size(); ++i) {
        const std::string& name = params[i].key();
        const torch::Tensor& out = params[i].value();
        const int64_t es = static_cast<int64_t>(out.element_size());
        const auto full = full_shape(shard_spec(name, dst_layout), out.sizes().vec());
        // Source classes: tp ranks holding the same slice (all of them for a replicated tensor,
        // the sharers of a replicated KV head), each a local matrix of its own.
        std::vector<Slice2> classes;
        std::vector<int> class_of(static_cast<size_t>(src_tp));
        for (int64_t t = 0; t < src_tp; ++t) {
            const Slice2 sl = slice2(name, tp_layout(args, src_tp, t), full);
            size_t k = 0;
            while (k < classes.size() && !classes[k].same_place(sl)) ++k;
            if (k == classes.size()) classes.push_back(sl);
            class_of[static_cast<size_t>(t)] = static_cast<int>(k);
        }
        for (int r = 0; r < n; ++r) {
            const Slice2 d = slice2(name, tp_layout(args, info(r, 2), info(r, 3)), full);
            if (r == me) {  // padding rows of a vocabulary slice exist on this rank only
                auto m = out.view({d.rows, d.cols});
                const int64_t real_rows = d.real.r1 - d.row_off;
                if (real_rows < d.rows) m.narrow(0, real_rows, d.rows - real_rows).zero_();
            }
            for (size_t k = 0; k < classes.size(); ++k) {
                const Slice2& c = classes[k];
                const Rect need = intersect(d.real, c.real);
                if (need.empty()) continue;
                // Cover the class's elements: each from one holder, this rank first, then the
                // ranks after it.
                std::vector<std::pair<int64_t, int64_t>> left{{0, c.rows * c.cols}};
                for (int step = 0; step < n && !left.empty(); ++step) {
                    const int a = (r + step) % n;
                    if (class_of[static_cast<size_t>(info(a, 1))] != static_cast<int>(k)) continue;
                    const int64_t b = info(a, kInfoHead + 2 * i), e = info(a, kInfoHead + 2 * i + 1);
                    std::vector<std::pair<int64_t, int64_t>> rest;
                    for (const auto& iv : left) {
                        const int64_t x = std::max(iv.first, b), y = std::min(iv.second, e);
                        if (x >= y) {
                            rest.push_back(iv);
                            continue;
                        }
                        if (iv.first < x) rest.emplace_back(iv.first, x);
                        if (y < iv.second) rest.emplace_back(y, iv.second);
                        for (const Rect& l : rows_of_range(x, y, c.cols)) {
                            const Rect q = intersect(
                                Rect{l.r0 + c.row_off, l.r1 + c.row_off, l.c0 + c.col_off, l.c1 + c.col_off}, need);
                            if (q.empty()) continue;
                            const int64_t w = q.c1 - q.c0;
                            const int64_t step_rows = std::max<int64_t>(1, max_bytes / (w * es));
                            for (int64_t r0 = q.r0; r0 < q.r1; r0 += step_rows) {
                                const int64_t h = std::min(step_rows, q.r1 - r0);
                                comm::RegionTransfer tr;
                                tr.src = a;
                                tr.dst = r;
                                tr.bytes = h * w * es;
                                tr.src_contiguous = h == 1 || w == c.cols;
                                tr.dst_contiguous = h == 1 || w == d.cols;
                                if (a == me) {
                                    const torch::Tensor& data = held[i].data;
                                    const int64_t at = (r0 - c.row_off) * c.cols + (q.c0 - c.col_off) - b;
                                    tr.src_region = data.as_strided({h, w}, {c.cols, 1}, data.storage_offset() + at);
                                }
                                if (r == me) {
                                    tr.dst_region = out.view({d.rows, d.cols})
                                                        .narrow(0, r0 - d.row_off, h)
                                                        .narrow(1, q.c0 - d.col_off, w);
                                }
                                transfers.push_back(std::move(tr));
                            }
                        }
                    }
                    left = std::move(rest);
                }
                RLPT_CHECK_KIND(InternalError, left.empty(),
                                "colocated reshard: no rank of the exchange holds elements [{}, {}) of '{}' (tp rank "
                                "class {}): the exchange must span every rank of the source",
                                left.front().first, left.front().second, name, k);
            }
        }
    }
    exchange.run(transfers);
    const auto& x = exchange.last_stats();
    stats.received_bytes = x.bytes_received;
    stats.sent_bytes = x.bytes_sent;
    stats.copied_bytes = x.bytes_received + x.bytes_local;
    stats.staged_bytes = x.packed_bytes + x.unpacked_bytes;
    stats.staging_bytes = x.staging_bytes;
    stats.n_messages = x.n_messages;
    stats.wait_seconds = x.wait_seconds;
    stats.copy_seconds = x.pack_seconds + x.unpack_seconds + x.local_seconds;
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return stats;
}

void release_parameter_storage(torch::nn::Module& m) {
    for (const auto& p : m.parameters(/*recurse=*/true)) free_storage(p);
}

int64_t allocated_parameter_bytes(const torch::nn::Module& m) {
    int64_t bytes = 0;
    for (const auto& p : m.parameters(/*recurse=*/true)) bytes += static_cast<int64_t>(p.storage().nbytes());
    return bytes;
}

}  // namespace rlpt::model
