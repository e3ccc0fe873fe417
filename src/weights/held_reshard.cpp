// Resharding from what the ranks hold (rlpt/weights/held_reshard.h): a destination layout filled
// point to point from the source's held slices (the hybrid engine's colocated reshard and the
// ZeRO-3 actor's sync to separate rollout ranks), and the storage management around it.
#include <c10/core/StorageImpl.h>
#include <sys/mman.h>

#include <algorithm>
#include <memory>
#include <new>
#include <chrono>
#include <cstdint>

#include "rlpt/comm/shared_arena.h"
#include "rlpt/core/error.h"
#include "rlpt/core/fnv.h"
#include "rlpt/weights/held_reshard.h"

namespace rlpt::weights {

using engine::advise_huge_pages;
using engine::alloc_storage;
using engine::free_storage;
using engine::HeldSlice;
using engine::kHugePage;
using engine::needed_storage_bytes;
using engine::ScratchMemory;
using model::full_shape;
using model::ModelArgs;
using model::shard_spec;
using model::ShardSpec;
using model::tp_layout;
using model::TpLayout;

HostBlock::HostBlock(size_t bytes) : mapped_(bytes + kHugePage) {
    base_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED) throw std::bad_alloc();
    data_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base_) + kHugePage - 1) & ~(kHugePage - 1));
    advise_huge_pages(data_, bytes);
}

HostBlock::~HostBlock() { munmap(base_, mapped_); }

namespace {

// alloc_storage for every tensor of `ts` without storage: first in the spans of `scratch` (same
// device, first with room, in order; each such storage keeps scratch.owner alive), the host ones
// left over in one block, 2 MiB-aligned and advised as huge pages as a whole (allocated one by
// one, tensors under 4 MiB, at hidden 768 every attention projection, would get no advice and
// fault in 4 KiB pages at every generation window; the block is freed when every one of those
// storages is, free_storage), the device ones left over from their allocator. Returns the bytes
// placed in scratch.
// Points `t`'s storage at `data` (needed_storage_bytes(t) of them), keeping `owner` alive until the
// storage is freed (free_storage) or pointed elsewhere.
void point_storage_at(const torch::Tensor& t, void* data, std::shared_ptr<void> owner) {
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    auto* ctx = new std::shared_ptr<void>(std::move(owner));
    s->set_data_ptr_noswap(at::DataPtr(
        data, ctx, [](void* o) { delete static_cast<std::shared_ptr<void>*>(o); }, t.device()));
    s->set_nbytes(needed_storage_bytes(t));
}

int64_t alloc_storages_together(const std::vector<torch::Tensor>& ts, const ScratchMemory& scratch) {
    constexpr size_t kAlign = 64;
    const auto rounded = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
    std::vector<size_t> used(scratch.spans.size(), 0);  // bytes taken from each span (aligned)
    int64_t placed = 0;
    // `t` in the first span of scratch on its device with room left; false when none has.
    const auto place_in_scratch = [&](const torch::Tensor& t) {
        for (size_t i = 0; i < scratch.spans.size(); ++i) {
            const torch::Tensor& span = scratch.spans[i];
            auto* base = static_cast<char*>(span.data_ptr());
            // The first aligned address at or after what is used (span starts need not be aligned).
            const size_t at = used[i] + (kAlign - reinterpret_cast<uintptr_t>(base + used[i]) % kAlign) % kAlign;
            if (span.device() != t.device() || at + needed_storage_bytes(t) > static_cast<size_t>(span.nbytes()))
                continue;
            point_storage_at(t, base + at, scratch.owner);
            used[i] = at + needed_storage_bytes(t);
            placed += static_cast<int64_t>(needed_storage_bytes(t));
            return true;
        }
        return false;
    };
    size_t total = 0;
    std::vector<const torch::Tensor*> together;
    std::vector<const c10::StorageImpl*> seen;  // tied weights: one storage under two names
    for (const auto& t : ts) {
        const c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
        if (std::find(seen.begin(), seen.end(), st) != seen.end()) continue;
        seen.push_back(st);
        if (st->nbytes() >= needed_storage_bytes(t) || place_in_scratch(t)) continue;
        if (t.is_cpu()) {
            together.push_back(&t);
            total += rounded(needed_storage_bytes(t));
        } else {
            alloc_storage(t);
        }
    }
    if (together.empty()) return placed;
    auto block = std::make_shared<HostBlock>(total);  // freed with the last storage pointing into it
    char* at = block->data();
    for (const torch::Tensor* t : together) {
        point_storage_at(*t, at, block);
        at += rounded(needed_storage_bytes(*t));
    }
    return placed;
}

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
                    "held reshard: parameter '{}' of {} dimensions split along dim {}", name, full.size(), s.dim);
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

// Per rank of the exchange, all-gathered: a head, then [begin, end) of every parameter held.
// kSrcShared / kDstShared: every held slice / destination parameter of the rank lies in a shared
// weight arena (the copying end of a pair is then chosen to map it, RegionTransfer).
enum Head : size_t {
    kOk,
    kHasSrc,
    kSrcTp,
    kSrcRank,
    kHasDst,
    kDstTp,
    kDstRank,
    kSignature,
    kSrcShared,
    kDstShared,
    kHeadSize
};

// One parameter as this rank sees it (from its destination module and/or its held slices).
struct Param {
    std::string name;
    std::vector<int64_t> full;  // the whole tensor's shape
    int64_t element_size = 0;
    torch::Tensor dst;     // this rank's destination tensor (undefined on a source-only rank)
    bool aliased = false;  // dst's storage is the part of this rank's held slice it needs (no copy)
};

// FNV-1a over the names, dtypes and full shapes: every rank of the exchange must agree on it.
int64_t signature(const std::vector<Param>& params, const std::vector<torch::ScalarType>& dtypes) {
    uint64_t h = kFnvOffset;
    const auto mix = [&](const void* p, size_t n) { h = fnv1a_bytes(h, p, static_cast<int64_t>(n)); };
    for (size_t i = 0; i < params.size(); ++i) {
        mix(params[i].name.data(), params[i].name.size() + 1);
        const auto t = static_cast<int64_t>(dtypes[i]);
        mix(&t, sizeof(t));
        for (int64_t d : params[i].full) mix(&d, sizeof(d));
    }
    return static_cast<int64_t>(h);
}

// The part of held slice `h` (source layout `src_layout`) that is exactly this rank's destination
// slice of the parameter (layout `dst_layout`, full shape `full`), when it lies there whole and
// in the destination's row-major order: a view of the held data; undefined otherwise (padding
// in the destination, part of it not held here, or its rows not contiguous in the held slice).
torch::Tensor held_part_as_dst(const std::string& name, const std::vector<int64_t>& full, const TpLayout& src_layout,
                               const TpLayout& dst_layout, const HeldSlice& h) {
    const Slice2 d = slice2(name, dst_layout, full), s = slice2(name, src_layout, full);
    const Rect whole{d.row_off, d.row_off + d.rows, d.col_off, d.col_off + d.cols};
    const Rect inside = intersect(whole, s.real);
    const auto same = [](const Rect& a, const Rect& b) {
        return a.r0 == b.r0 && a.r1 == b.r1 && a.c0 == b.c0 && a.c1 == b.c1;
    };
    if (whole.empty() || !same(d.real, whole) || !same(inside, whole)) return {};
    if (d.rows > 1 && d.cols != s.cols) return {};  // its rows are apart in the source's slice
    const int64_t start = (d.row_off - s.row_off) * s.cols + (d.col_off - s.col_off), count = d.rows * d.cols;
    if (start < h.begin || start + count > h.end) return {};
    return h.data.narrow(0, start - h.begin, count);
}

// This rank's parameter list and, in `problem`, why it cannot take part (empty: it can). Local.
std::vector<Param> local_params(const HeldSource* src, torch::nn::Module* dst, const TpLayout& dst_layout,
                                const ScratchMemory& scratch, const ModelArgs& args,
                                std::vector<torch::ScalarType>& dtypes, std::string& problem, int64_t& scratch_bytes) {
    std::vector<Param> out;
    if (dst != nullptr) {
        std::vector<torch::Tensor> storage_for;
        const auto dst_params = dst->named_parameters(/*recurse=*/true);
        std::vector<char> aliased(dst_params.size(), 0);
        if (src != nullptr && src->held.size() == dst_params.size()) {
            // A destination tensor that is whole, in order, inside what this rank holds of the
            // same parameter takes that memory instead of a copy of it: the held slices are not
            // written while the rollout copy lives (the source trains only after it is freed).
            const TpLayout src_layout = tp_layout(args, src->tp, src->tp_rank);
            for (size_t i = 0; i < dst_params.size(); ++i) {
                const torch::Tensor& t = dst_params[i].value();
                const HeldSlice& h = src->held[i];
                if (h.name != dst_params[i].key() || !t.is_contiguous() || t.storage_offset() != 0 ||
                    t.storage().nbytes() != 0 || !h.data.defined() || h.data.dim() != 1 || !h.data.is_contiguous() ||
                    h.data.numel() != h.end - h.begin || h.data.scalar_type() != t.scalar_type() ||
                    h.data.device() != t.device())
                    continue;
                const auto full = full_shape(shard_spec(h.name, dst_layout), t.sizes().vec());
                const torch::Tensor part = held_part_as_dst(h.name, full, src_layout, dst_layout, h);
                if (!part.defined() || part.numel() != t.numel()) continue;
                point_storage_at(t, part.data_ptr(), std::make_shared<torch::Tensor>(part));  // keeps it alive
                aliased[i] = 1;
            }
        }
        for (const auto& p : dst_params) storage_for.push_back(p.value());
        scratch_bytes = alloc_storages_together(storage_for, scratch);
        for (const auto& p : dst_params) {
            if (problem.empty() && !p.value().is_contiguous())
                problem = fmt::format("destination parameter '{}' is not contiguous", p.key());
            out.push_back({p.key(), full_shape(shard_spec(p.key(), dst_layout), p.value().sizes().vec()),
                           static_cast<int64_t>(p.value().element_size()), p.value(), aliased[out.size()] != 0});
            dtypes.push_back(p.value().scalar_type());
        }
    }
    if (src == nullptr) return out;
    const TpLayout src_layout = tp_layout(args, src->tp, src->tp_rank);
    const bool both = dst != nullptr;
    if (both && src->held.size() != out.size() && problem.empty())
        problem = fmt::format("the source has {} parameters, the destination {}", src->held.size(), out.size());
    for (size_t i = 0; i < src->held.size(); ++i) {
        const HeldSlice& h = src->held[i];
        const auto full = full_shape(shard_spec(h.name, src_layout), h.shape);
        const bool fits =
            h.data.defined() && h.data.dim() == 1 && h.data.is_contiguous() && h.data.numel() == h.end - h.begin;
        if (!both) {
            out.push_back({h.name, full, fits ? static_cast<int64_t>(h.data.element_size()) : 0, torch::Tensor()});
            dtypes.push_back(fits ? h.data.scalar_type() : torch::kFloat32);
        }
        if (!problem.empty()) continue;
        if (!fits) {
            problem = fmt::format("held slice of '{}' is not a contiguous 1-D tensor of its {} elements", h.name,
                                  h.end - h.begin);
        } else if (both && i < out.size() &&
                   (h.name != out[i].name || h.data.scalar_type() != dtypes[i] || full != out[i].full)) {
            problem =
                fmt::format("source parameter {} '{}' does not match the destination's '{}'", i, h.name, out[i].name);
        }
    }
    return out;
}

// Where one end of a transfer lies in its tensor: h rows of w elements, `ld` apart, from
// element `at` of the tensor (a held slice or a destination parameter, flattened).
struct RegionRef {
    int64_t param = -1, at = 0, h = 0, w = 0, ld = 0;
};
struct PlannedTransfer {
    int src = 0, dst = 0;
    int64_t bytes = 0;
    bool src_contiguous = true, dst_contiguous = true;
    bool src_shared = false, dst_shared = false;
    RegionRef from, to;  // on this rank's end only
};
struct PaddingRange {
    int64_t param = 0, at = 0, count = 0;
};

// Elements [x, y) of source class `c`: the number of them inside `need` (full coordinates).
int64_t needed_elements(int64_t x, int64_t y, const Slice2& c, const Rect& need) {
    int64_t n = 0;
    for (const Rect& l : rows_of_range(x, y, c.cols)) {
        const Rect q = intersect(Rect{l.r0 + c.row_off, l.r1 + c.row_off, l.c0 + c.col_off, l.c1 + c.col_off}, need);
        if (!q.empty()) n += (q.r1 - q.r0) * (q.c1 - q.c0);
    }
    return n;
}

// A run [x, y) of a source class's elements that destination rank `dst` takes from `holder`,
// which holds [begin, ...) of them.
struct Segment {
    int holder = 0;
    int64_t x = 0, y = 0, begin = 0;
};

}  // namespace

struct HeldReshard::Plan {
    std::vector<int64_t> info;  // every rank's, as gathered: the plan holds while it is unchanged
    std::vector<PlannedTransfer> transfers;
    std::vector<PaddingRange> padding;  // this rank's destination rows with no source
};

namespace {

// Computes the transfer list every rank of the exchange computes (the same list, in the same
// order), with the regions of this rank's ends. Local.
class Planner {
  public:
    Planner(const ModelArgs& args, const std::vector<int64_t>& info, int n, int me, int64_t max_bytes,
            const std::vector<Param>& params)
        : args_(args),
          info_(info),
          stride_(info.size() / static_cast<size_t>(n)),
          n_(n),
          me_(me),
          max_bytes_(max_bytes),
          params_(params),
          load_(static_cast<size_t>(n), 0) {
        src_tp_ = -1;
        for (int r = 0; r < n_; ++r) {
            if (!at(r, kHasSrc)) continue;
            RLPT_CHECK_KIND(InternalError, src_tp_ < 0 || at(r, kSrcTp) == src_tp_,
                            "held reshard: rank {} holds the source at tp {}, another rank at tp {}", r, at(r, kSrcTp),
                            src_tp_);
            src_tp_ = at(r, kSrcTp);
        }
        RLPT_CHECK_KIND(InternalError, src_tp_ > 0, "held reshard: no rank of the exchange holds the source");
    }

    HeldReshard::Plan build() {
        HeldReshard::Plan plan;
        plan.info = info_;
        for (size_t i = 0; i < params_.size(); ++i) plan_param(i, plan);
        return plan;
    }

  private:
    int64_t at(int r, size_t k) const { return info_[static_cast<size_t>(r) * stride_ + k]; }
    int64_t held_begin(int r, size_t i) const { return at(r, kHeadSize + 2 * i); }
    int64_t held_end(int r, size_t i) const { return at(r, kHeadSize + 2 * i + 1); }

    // Source classes of parameter `i`: tp ranks holding the same slice (all of them for a
    // replicated tensor, the sharers of a replicated KV head), each a local matrix of its own.
    void source_classes(size_t i, std::vector<Slice2>& classes, std::vector<int>& class_of) const {
        class_of.assign(static_cast<size_t>(src_tp_), 0);
        for (int64_t t = 0; t < src_tp_; ++t) {
            const Slice2 sl = slice2(params_[i].name, tp_layout(args_, src_tp_, t), params_[i].full);
            size_t k = 0;
            while (k < classes.size() && !classes[k].same_place(sl)) ++k;
            if (k == classes.size()) classes.push_back(sl);
            class_of[static_cast<size_t>(t)] = static_cast<int>(k);
        }
    }

    void plan_param(size_t i, HeldReshard::Plan& plan) {
        std::vector<Slice2> classes;
        std::vector<int> class_of;
        source_classes(i, classes, class_of);
        for (int r = 0; r < n_; ++r) {
            if (!at(r, kHasDst)) continue;
            const Slice2 d = slice2(params_[i].name, tp_layout(args_, at(r, kDstTp), at(r, kDstRank)), params_[i].full);
            const int64_t real_rows = d.real.r1 - d.row_off;
            if (r == me_ && real_rows < d.rows)  // padding rows of a vocabulary slice exist on this rank only
                plan.padding.push_back({static_cast<int64_t>(i), real_rows * d.cols, (d.rows - real_rows) * d.cols});
            for (size_t k = 0; k < classes.size(); ++k) {
                const Rect need = intersect(d.real, classes[k].real);
                if (need.empty()) continue;
                for (const Segment& s : cover(i, r, static_cast<int>(k), class_of, classes[k], need))
                    emit(i, s, r, classes[k], d, need, plan.transfers);
            }
        }
    }

    // Who sends destination rank `r` each needed element of class `k`: the rank itself where it
    // holds them, else the least-loaded holder (ties: the first after r). Adjacent runs from one
    // holder merged.
    std::vector<Segment> cover(size_t i, int r, int k, const std::vector<int>& class_of, const Slice2& c,
                               const Rect& need) {
        const int64_t numel = c.rows * c.cols;
        std::vector<int> holders;
        std::vector<int64_t> cuts{0, numel};
        for (int a = 0; a < n_; ++a) {
            if (!at(a, kHasSrc) || class_of[static_cast<size_t>(at(a, kSrcRank))] != k) continue;
            if (held_begin(a, i) >= held_end(a, i)) continue;
            holders.push_back(a);
            cuts.push_back(std::clamp<int64_t>(held_begin(a, i), 0, numel));
            cuts.push_back(std::clamp<int64_t>(held_end(a, i), 0, numel));
        }
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        std::vector<Segment> out;
        for (size_t j = 0; j + 1 < cuts.size(); ++j) {
            const int64_t x = cuts[j], y = cuts[j + 1];
            const int64_t elements = needed_elements(x, y, c, need);
            if (elements == 0) continue;
            int best = -1;
            for (int a : holders) {
                if (held_begin(a, i) > x || held_end(a, i) < y) continue;
                if (a == r) {
                    best = a;
                    break;
                }
                const auto key = [&](int q) { return std::pair{load_[static_cast<size_t>(q)], (q - r + n_) % n_}; };
                if (best < 0 || key(a) < key(best)) best = a;
            }
            RLPT_CHECK_KIND(InternalError, best >= 0,
                            "held reshard: no rank of the exchange holds elements [{}, {}) of '{}' (tp rank class {}): "
                            "the exchange must span every rank of the source",
                            x, y, params_[i].name, k);
            if (best != r) load_[static_cast<size_t>(best)] += elements * params_[i].element_size;
            if (!out.empty() && out.back().holder == best && out.back().y == x) {
                out.back().y = y;
            } else {
                out.push_back({best, x, y, held_begin(best, i)});
            }
        }
        return out;
    }

    // The transfers of one segment: its rectangles within `need`, cut into messages of at most
    // one bucket (whole rows; a row wider than that alone).
    void emit(size_t i, const Segment& s, int r, const Slice2& c, const Slice2& d, const Rect& need,
              std::vector<PlannedTransfer>& out) const {
        const int64_t es = params_[i].element_size;
        for (const Rect& l : rows_of_range(s.x, s.y, c.cols)) {
            const Rect q =
                intersect(Rect{l.r0 + c.row_off, l.r1 + c.row_off, l.c0 + c.col_off, l.c1 + c.col_off}, need);
            if (q.empty()) continue;
            const int64_t w = q.c1 - q.c0;
            const int64_t step_rows = std::max<int64_t>(1, max_bytes_ / (w * es));
            for (int64_t r0 = q.r0; r0 < q.r1; r0 += step_rows) {
                const int64_t h = std::min(step_rows, q.r1 - r0);
                PlannedTransfer t;
                t.src = s.holder;
                t.dst = r;
                t.bytes = h * w * es;
                t.src_contiguous = h == 1 || w == c.cols;
                t.dst_contiguous = h == 1 || w == d.cols;
                t.src_shared = at(s.holder, kSrcShared) != 0;
                t.dst_shared = at(r, kDstShared) != 0;
                const auto p = static_cast<int64_t>(i);
                if (s.holder == me_)
                    t.from = {p, (r0 - c.row_off) * c.cols + (q.c0 - c.col_off) - s.begin, h, w, c.cols};
                if (r == me_) t.to = {p, (r0 - d.row_off) * d.cols + (q.c0 - d.col_off), h, w, d.cols};
                out.push_back(t);
            }
        }
    }

    const ModelArgs& args_;
    const std::vector<int64_t>& info_;
    size_t stride_;
    int n_, me_;
    int64_t max_bytes_;
    const std::vector<Param>& params_;
    int64_t src_tp_ = -1;
    std::vector<int64_t> load_;  // bytes each rank was given to send so far
};

torch::Tensor region(const torch::Tensor& base, const RegionRef& r) {
    return base.as_strided({r.h, r.w}, {r.ld, 1}, base.storage_offset() + r.at);
}

// The plan's transfers bound to the tensors' current storage on this rank's ends.
std::vector<RegionTransfer> bound_transfers(const std::vector<PlannedTransfer>& planned, const HeldSource* src,
                                            const std::vector<Param>& params, int me) {
    std::vector<RegionTransfer> out;
    out.reserve(planned.size());
    for (const PlannedTransfer& p : planned) {
        if (p.dst == me && params[static_cast<size_t>(p.to.param)].aliased) {
            // Its bytes are where they belong already; nobody else may write the source's memory.
            RLPT_CHECK_KIND(InternalError, p.src == me,
                            "held reshard: rank {} would receive part of '{}' from rank {}, but that tensor is "
                            "its own held slice",
                            me, params[static_cast<size_t>(p.to.param)].name, p.src);
            continue;
        }
        RegionTransfer t;
        t.src = p.src;
        t.dst = p.dst;
        t.bytes = p.bytes;
        t.src_contiguous = p.src_contiguous;
        t.dst_contiguous = p.dst_contiguous;
        t.src_shared = p.src_shared;
        t.dst_shared = p.dst_shared;
        if (p.src == me) t.src_region = region(src->held[static_cast<size_t>(p.from.param)].data, p.from);
        if (p.dst == me) t.dst_region = region(params[static_cast<size_t>(p.to.param)].dst, p.to);
        out.push_back(std::move(t));
    }
    return out;
}

// Whether `t` (undefined or empty: trivially) lies in a live shared weight arena of this process.
bool in_arena(const torch::Tensor& t) {
    const auto bytes = t.defined() ? static_cast<size_t>(t.numel()) * t.element_size() : 0;
    return bytes == 0 || comm::arena_of(t.data_ptr(), bytes).id != 0;
}

// Every rank's head and held ranges (collective, with the deadline); InternalError on every
// rank when one of them cannot take part or they disagree.
std::vector<int64_t> gather_info(const comm::Communicator& comm, const std::vector<int64_t>& mine,
                                 const std::string& problem, const comm::Deadline& deadline) {
    const int n = comm.size();
    const auto lengths = comm.allgather_i64(static_cast<int64_t>(mine.size()), deadline);
    for (int r = 0; r < n; ++r)
        RLPT_CHECK_KIND(InternalError, lengths[static_cast<size_t>(r)] == lengths[0],
                        "held reshard: rank {} has {} parameters, rank 0 {}", r,
                        (lengths[static_cast<size_t>(r)] - kHeadSize) / 2, (lengths[0] - kHeadSize) / 2);
    std::vector<int64_t> all(mine.size() * static_cast<size_t>(n));
    comm.allgather(mine.data(), all.data(), static_cast<int64_t>(mine.size() * sizeof(int64_t)), deadline);
    const auto at = [&](int r, size_t k) { return all[static_cast<size_t>(r) * mine.size() + k]; };
    for (int r = 0; r < n; ++r) {
        RLPT_CHECK_KIND(InternalError, at(r, kOk) != 0, "held reshard: rank {} cannot take part{}", r,
                        r == comm.rank() ? ": " + problem : " (see its error)");
        RLPT_CHECK_KIND(InternalError, at(r, kHasSrc) || at(r, kHasDst),
                        "held reshard: rank {} is neither a source nor a destination", r);
        RLPT_CHECK_KIND(InternalError, at(r, kSignature) == at(0, kSignature),
                        "held reshard: rank {} has other parameter names, dtypes or shapes than rank 0", r);
    }
    return all;
}

}  // namespace

HeldReshard::HeldReshard(const ModelArgs& args, RegionExchange& exchange) : args_(args), exchange_(exchange) {}

HeldReshardStats HeldReshard::run(const HeldSource* src, torch::nn::Module* dst, const TpLayout& dst_layout,
                                  const ScratchMemory& scratch) {
    // The storage this call gives the destination holds no complete copy if the call fails: it is
    // freed then, which also ends any borrowing of held or lent memory.
    std::vector<torch::Tensor> given;
    if (dst != nullptr)
        for (const auto& p : dst->parameters(/*recurse=*/true))
            if (p.storage().nbytes() == 0) given.push_back(p);
    try {
        return fill(src, dst, dst_layout, scratch);
    } catch (...) {
        for (const auto& t : given) free_storage(t);
        throw;
    }
}

HeldReshardStats HeldReshard::fill(const HeldSource* src, torch::nn::Module* dst, const TpLayout& dst_layout,
                                   const ScratchMemory& scratch) {
    const auto t0 = std::chrono::steady_clock::now();
    torch::NoGradGuard no_grad;
    HeldReshardStats stats;
    const comm::Communicator& comm = exchange_.comm();
    const auto deadline = comm::Deadline::after_seconds(exchange_.options().timeout_s);
    std::vector<torch::ScalarType> dtypes;
    std::string problem;
    const std::vector<Param> params =
        local_params(src, dst, dst_layout, scratch, args_, dtypes, problem, stats.scratch_bytes);
    std::vector<int64_t> mine(kHeadSize, 0);
    mine[kOk] = problem.empty();
    mine[kHasSrc] = src != nullptr;
    mine[kSrcTp] = src ? src->tp : 0;
    mine[kSrcRank] = src ? src->tp_rank : 0;
    mine[kHasDst] = dst != nullptr;
    mine[kDstTp] = dst ? dst_layout.tp : 0;
    mine[kDstRank] = dst ? dst_layout.rank : 0;
    mine[kSignature] = signature(params, dtypes);
    mine[kSrcShared] = src != nullptr && std::all_of(src->held.begin(), src->held.end(),
                                                     [](const HeldSlice& h) { return in_arena(h.data); });
    mine[kDstShared] =
        dst != nullptr && std::all_of(params.begin(), params.end(), [](const Param& p) { return in_arena(p.dst); });
    for (size_t i = 0; i < params.size(); ++i) {
        const bool held = src != nullptr && i < src->held.size();
        mine.push_back(held ? src->held[i].begin : 0);
        mine.push_back(held ? src->held[i].end : 0);
    }
    auto info = gather_info(comm, mine, problem, deadline);
    if (!plan_ || plan_->info != info) {
        const int64_t max_bytes = std::min(exchange_.options().bucket_bytes, comm::kMaxMessageBytes);
        plan_ = std::make_shared<Plan>(Planner(args_, info, comm.size(), comm.rank(), max_bytes, params).build());
        stats.planned = true;
    }
    for (const Param& p : params) {
        if (p.dst.defined()) stats.dst_bytes += p.dst.numel() * p.element_size;
        if (p.aliased) stats.aliased_bytes += p.dst.numel() * p.element_size;
    }
    for (const PaddingRange& z : plan_->padding)
        params[static_cast<size_t>(z.param)].dst.view({-1}).narrow(0, z.at, z.count).zero_();
    exchange_.run(bound_transfers(plan_->transfers, src, params, comm.rank()));
    const auto& x = exchange_.last_stats();
    stats.received_bytes = x.bytes_received;
    stats.sent_bytes = x.bytes_sent;
    stats.copied_bytes = dst ? x.bytes_received + x.bytes_local : 0;
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

}  // namespace rlpt::weights
