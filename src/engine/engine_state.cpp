// TrainEngine::save_state / load_state (sharded, engine state format 2), ShardedState, and
// gather_parameter (names listed in train_engine.h).
//
// File contents under <prefix>:
//   engine/layout                 text: "rlpt-train-engine-state 2", zero_stage, dp_size, dp_rank,
//                                 [tensor_parallel <size> rank <rank>], shard_group_size,
//                                 [replica_of <k>], one "group" line per flat group, one
//                                 "tensor" line per trainable parameter
//   shards/<g>/param              [held] the group's elements [held_begin, held_end), param dtype
//   shards/<g>/exp_avg, exp_avg_sq, master (bf16 groups)   [held] float32
//   engine/global_step, schedule_step, applied_updates, rng_state
// Group g's held range in the file of DP rank k: ZeRO-0 [0, numel); ZeRO-1/2/3
// [k·shard, (k+1)·shard) clipped to [0, numel), for k < shard_group_size (the layout line: 1 at
// ZeRO-0, the DP size under plain ZeRO-1/2/3, the shard group's size S under hybrid shard).
// DP ranks k >= shard_group_size hold a replica of DP rank k mod shard_group_size's slices
// (ZeRO-0: every rank the full state; hybrid shard: every replica group the first group's
// shards), so their files carry no shards/ at all, only the layout (with "replica_of k") and
// their own counters and RNG: the files of DP ranks 0 .. shard_group_size-1 hold the state once.
// Files of an rlpt before that (every rank wrote its shards, no replica_of line) read the same way.
#include <map>
#include <functional>
#include <optional>
#include <sstream>

#include "engine/engine_impl.h"
#include "rlpt/ckpt/checkpoint_dir.h"
#include "rlpt/ckpt/h5_store.h"
#include <fmt/ranges.h>

#include "rlpt/core/error.h"
#include "rlpt/engine/train_engine.h"

namespace rlpt::engine {

using detail::Group;
using Kind = SavedState::Kind;

namespace {

constexpr const char* kLayoutMagic = "rlpt-train-engine-state";
constexpr int kStateFormat = 2;
constexpr int kGatherTag = 7311;

std::string normalized_prefix(const std::string& prefix) {
    if (prefix.empty() || prefix.back() == '/') return prefix;
    return prefix + "/";
}

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::kParam: return "param";
        case Kind::kExpAvg: return "exp_avg";
        case Kind::kExpAvgSq: return "exp_avg_sq";
        case Kind::kMaster: return "master";
    }
    return "?";
}

std::string dtype_word(torch::ScalarType dt) { return dt == torch::kFloat32 ? "float32" : "bfloat16"; }

torch::ScalarType parse_dtype(const std::string& w, const std::string& where) {
    if (w == "float32") return torch::kFloat32;
    if (w == "bfloat16") return torch::kBFloat16;
    RLPT_THROW(IoError, "{}: unknown dtype '{}' in the engine layout", where, w);
}

// [begin, end) of group g this rank writes and reads (its own range, clipped to numel).
std::pair<int64_t, int64_t> held_range(const detail::EngineState& st, const Group& g) {
    if (st.opts.zero_stage == 0) return {0, g.numel};
    const int64_t b = std::min(g.own_begin, g.numel);
    return {b, std::min(g.own_end, g.numel)};
}

// The shard_group_size of the layout line: the files of DP ranks [0, it) hold the state once.
int saved_group_size(const detail::EngineState& st) { return st.opts.zero_stage >= 1 ? st.shard_size : 1; }

// The DP rank whose file holds the parameter and optimizer slices this rank holds a replica
// of (ZeRO-0: rank 0, whose full copy every rank holds; hybrid shard: the rank at this rank's
// position in the first shard group), or -1 when this rank's file holds them itself.
int replica_of(const detail::EngineState& st) {
    const int size = saved_group_size(st);
    if (st.dp_rank < size) return -1;
    RLPT_ASSERT(st.opts.zero_stage == 0 || st.dp_rank % size == st.shard_rank);
    return st.dp_rank % size;
}

std::string tp_text(int size, int rank) { return size > 1 ? fmt::format("{} rank {}", size, rank) : ""; }

std::string layout_text(const detail::EngineState& st) {
    std::string out = fmt::format("{} {}\nzero_stage {}\ndp_size {}\ndp_rank {}\n", kLayoutMagic, kStateFormat,
                                  st.opts.zero_stage, st.dp_size, st.dp_rank);
    if (st.tp != nullptr) out += fmt::format("tensor_parallel {} rank {}\n", st.tp_size, st.tp_rank);
    // Shard k of every group is in the file of DP rank k (k < shard_group_size). Hybrid shard
    // (shards inside groups of S consecutive DP ranks, replicated across groups) records S here:
    // the first group's files then hold every shard once, and the other groups' write none.
    out += fmt::format("shard_group_size {}\n", saved_group_size(st));
    if (const int k = replica_of(st); k >= 0) out += fmt::format("replica_of {}\n", k);
    for (size_t gi = 0; gi < st.groups.size(); ++gi) {
        const auto& g = st.groups[gi];
        out += fmt::format("group {} {} numel {} padded {} shard {}\n", gi, dtype_word(g.dtype), g.numel, g.padded,
                           g.shard);
    }
    for (const auto& s : st.slots)
        out += fmt::format("tensor {} {} group {} offset {} shape {}\n", s.name, dtype_word(s.param.scalar_type()),
                           s.group, s.offset, fmt::join(s.shape, ","));
    return out;
}

// A parsed format-2 layout.
struct ParsedLayout {
    SavedLayout head;
    int shard_group_size = 1;
    int replica_of = -1;  // the file holds no shards/: DP rank replica_of's file holds them
    struct G {
        torch::ScalarType dtype = torch::kFloat32;
        int64_t numel = 0, padded = 0, shard = 0;
    };
    std::vector<G> groups;
    struct T {
        SavedState::Tensor meta;
        size_t group = 0;
        int64_t offset = 0, numel = 0;
    };
    std::map<std::string, T> tensors;
    std::map<std::string, SavedState::Tensor> metas;
};

ParsedLayout parse_layout(const std::string& text, const std::string& where) {
    ParsedLayout p;
    std::istringstream in(text);
    std::string line;
    bool magic = false, shard_group_line = false;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string key;
        ls >> key;
        std::string w1, w2, w3, w4, w5, w6, w7, w8;
        if (key == kLayoutMagic) {
            ls >> p.head.format;
            magic = true;
        } else if (key == "zero_stage") {
            ls >> p.head.zero_stage;
        } else if (key == "dp_size") {
            ls >> p.head.dp_size;
        } else if (key == "dp_rank") {
            ls >> p.head.dp_rank;
        } else if (key == "shard_group_size") {
            ls >> p.shard_group_size;
            shard_group_line = true;
        } else if (key == "replica_of") {
            ls >> p.replica_of;
        } else if (key == "tensor_parallel") {
            ls >> p.head.tp_size >> w1 >> p.head.tp_rank;
        } else if (key == "group" && p.head.format == kStateFormat) {
            size_t gi = 0;
            ParsedLayout::G g;
            ls >> gi >> w1 >> w2 >> g.numel >> w3 >> g.padded >> w4 >> g.shard;
            RLPT_CHECK_KIND(IoError, !ls.fail() && gi == p.groups.size(), "{}: malformed engine layout line '{}'",
                            where, line);
            g.dtype = parse_dtype(w1, where);
            p.groups.push_back(g);
        } else if (key == "tensor" && p.head.format == kStateFormat) {
            std::string name, dt, shape;
            ParsedLayout::T t;
            ls >> name >> dt >> w1 >> t.group >> w2 >> t.offset >> w3;
            std::getline(ls, shape);
            RLPT_CHECK_KIND(IoError, !ls.bad() && t.group < p.groups.size(), "{}: malformed engine layout line '{}'",
                            where, line);
            t.meta.dtype = parse_dtype(dt, where);
            t.numel = 1;
            std::istringstream ss(shape);
            for (std::string d; std::getline(ss, d, ',');) {
                if (d.find_first_not_of(' ') == std::string::npos) continue;
                t.meta.shape.push_back(std::stoll(d));
                t.numel *= t.meta.shape.back();
            }
            p.metas[name] = t.meta;
            p.tensors[name] = std::move(t);
        }
    }
    RLPT_CHECK_KIND(IoError, magic, "{}: the engine layout is not a train-engine layout", where);
    RLPT_CHECK_KIND(IoError, p.head.format == kStateFormat,
                    "{} holds engine state format {} (an earlier rlpt: full tensors in every rank's file); this rlpt "
                    "reads format {} (each rank's shards): resume it with the rlpt that wrote it",
                    where, p.head.format, kStateFormat);
    // Files from before hybrid shard have no shard_group_size line: ZeRO-1/2/3 then sharded over
    // every DP rank.
    if (!shard_group_line) p.shard_group_size = p.head.zero_stage >= 1 ? p.head.dp_size : 1;
    return p;
}

}  // namespace

// ---- ShardedState ----------------------------------------------------------------------------

struct ShardedState::Impl {
    std::vector<std::string> paths;
    size_t own = 0;
    std::string prefix;
    const ckpt::H5Reader* external = nullptr;  // the one-file form
    std::vector<std::unique_ptr<ckpt::H5Reader>> open;
    std::optional<ParsedLayout> layout;

    const ckpt::H5Reader& file(size_t k, const std::string& why) {
        if (external != nullptr) {
            RLPT_CHECK_KIND(IoError, k == own,
                            "{}: loading needs {} from the file of DP rank {} of this checkpoint (written over {} DP "
                            "ranks), and only this rank's file was given",
                            external->path(), why, k, parsed().head.dp_size);
            return *external;
        }
        RLPT_CHECK_KIND(IoError, k < paths.size(), "checkpoint file of DP rank {} needed for {}: the checkpoint has {}",
                        k, why, paths.size());
        if (open.size() < paths.size()) open.resize(paths.size());
        if (!open[k]) {
            try {
                open[k] = std::make_unique<ckpt::H5Reader>(paths[k]);
            } catch (const Error& e) {
                rethrow_with_context(fmt::format("checkpoint file {} (needed for {})", paths[k], why), e);
            }
        }
        return *open[k];
    }
    const ParsedLayout& parsed() {
        if (!layout) {
            const ckpt::H5Reader& r = external != nullptr ? *external : file(own, "this rank's step counters");
            const std::string name = prefix + "engine/layout";
            RLPT_CHECK_KIND(IoError, r.contains(name), "checkpoint '{}' has no '{}'", r.path(), name);
            layout = parse_layout(r.read_blob(name), fmt::format("checkpoint '{}' ('{}')", r.path(), name));
            if (external != nullptr) own = static_cast<size_t>(layout->head.dp_rank);
        }
        return *layout;
    }
};

ShardedState::ShardedState(std::vector<std::string> dp_paths, size_t own, std::string prefix)
    : impl_(std::make_unique<Impl>()) {
    impl_->paths = std::move(dp_paths);
    impl_->own = own;
    impl_->prefix = normalized_prefix(prefix);
}

ShardedState::ShardedState(const ckpt::H5Reader& file, std::string prefix) : impl_(std::make_unique<Impl>()) {
    impl_->external = &file;
    impl_->prefix = normalized_prefix(prefix);
}

ShardedState::~ShardedState() = default;

std::string ShardedState::where() const {
    if (impl_->external != nullptr) return impl_->external->path();
    if (impl_->paths.size() == 1) return impl_->paths[0];
    return fmt::format("{} (and the {} other DP rank(s)' files)", impl_->paths[impl_->own], impl_->paths.size() - 1);
}

const SavedLayout& ShardedState::layout() { return impl_->parsed().head; }

std::string ShardedState::written_by() {
    const auto& h = layout();
    return fmt::format("ZeRO-{} over {} DP rank(s), tensor parallelism {}", h.zero_stage, h.dp_size, h.tp_size);
}

std::string ShardedState::tensor_parallel() {
    const auto& h = layout();
    return tp_text(h.tp_size, h.tp_rank);
}

const std::map<std::string, SavedState::Tensor>& ShardedState::tensors() { return impl_->parsed().metas; }

std::string ShardedState::prefix() const { return impl_->prefix; }

const ckpt::H5Reader& ShardedState::own() {
    impl_->parsed();
    return impl_->file(impl_->own, "this rank's step counters");
}

torch::Tensor ShardedState::read(Kind kind, const std::string& name, int64_t begin, int64_t end) {
    const ParsedLayout& p = impl_->parsed();
    auto it = p.tensors.find(name);
    RLPT_CHECK_KIND(IoError, it != p.tensors.end(), "checkpoint {} has no tensor '{}'", where(), name);
    const auto& t = it->second;
    const auto& g = p.groups[t.group];
    RLPT_CHECK_KIND(IoError, 0 <= begin && begin <= end && end <= t.numel, "elements [{}, {}) of '{}' ({} elements)",
                    begin, end, name, t.numel);
    const auto dtype = kind == Kind::kParam ? t.meta.dtype : torch::kFloat32;
    auto out = torch::empty({end - begin}, torch::TensorOptions().dtype(dtype));
    const int64_t lo = t.offset + begin, hi = t.offset + end;
    const std::string dataset = fmt::format("{}shards/{}/{}", impl_->prefix, t.group, kind_name(kind));
    const auto why = [&] { return fmt::format("elements [{}, {}) of {} of '{}'", begin, end, kind_name(kind), name); };
    if (p.head.zero_stage == 0) {
        // Every DP rank held everything: this rank's own file, unless it wrote no copy (a
        // replica's), then DP rank 0's.
        const size_t k = p.replica_of < 0 ? impl_->own : 0;
        if (hi > lo) out.copy_(impl_->file(k, why()).read_tensor_range(dataset, lo, hi - lo));
        return out;
    }
    for (int64_t k = lo / g.shard; hi > lo && k * g.shard < hi; ++k) {
        RLPT_CHECK_KIND(IoError, k < p.shard_group_size, "checkpoint {}: {} lies past shard {} of {}", where(), why(),
                        k, p.shard_group_size);
        const int64_t a = std::max(lo, k * g.shard), b = std::min(hi, (k + 1) * g.shard);
        const ckpt::H5Reader& f = impl_->file(static_cast<size_t>(k), why());
        out.narrow(0, a - lo, b - a).copy_(f.read_tensor_range(dataset, a - k * g.shard, b - a));
    }
    return out;
}

SavedLayout saved_layout(const ckpt::H5Reader& r, const std::string& prefix) {
    ShardedState s(r, prefix);
    return s.layout();
}

// ---- TrainEngine -----------------------------------------------------------------------------

int TrainEngine::tp_size() const { return impl_->tp_size; }
int TrainEngine::tp_rank() const { return impl_->tp_rank; }
size_t TrainEngine::num_parameter_tensors() const { return impl_->slots.size(); }

void TrainEngine::save_state(ckpt::H5Writer& w, const std::string& prefix_in) const {
    auto& st = *impl_;
    RLPT_CHECK(!st.frozen(), "TrainEngine: save_state() on a frozen engine (it holds no training state)");
    const std::string prefix = normalized_prefix(prefix_in);
    torch::NoGradGuard no_grad;
    std::exception_ptr err;
    try {
        // A replica's slices are in the file of DP rank replica_of(st): written there only.
        for (size_t gi = 0; gi < st.groups.size() && replica_of(st) < 0; ++gi) {
            const auto& g = st.groups[gi];
            const auto [b, e] = held_range(st, g);
            const int64_t n = e - b;
            const std::string base = fmt::format("{}shards/{}/", prefix, gi);
            const torch::Tensor param =
                st.shards_params() ? g.param_shard.narrow(0, 0, n) : g.flat_param.narrow(0, b, n);
            w.write_tensor(base + "param", param);
            w.write_tensor(base + "exp_avg", g.exp_avg.narrow(0, 0, n));
            w.write_tensor(base + "exp_avg_sq", g.exp_avg_sq.narrow(0, 0, n));
            if (!g.fp32()) w.write_tensor(base + "master", g.master.narrow(0, 0, n));
        }
        w.write_tensor(prefix + "engine/global_step", torch::scalar_tensor(st.global_step, torch::kInt64));
        w.write_tensor(prefix + "engine/schedule_step", torch::scalar_tensor(st.schedule_step, torch::kInt64));
        w.write_tensor(prefix + "engine/applied_updates", torch::scalar_tensor(st.applied_updates, torch::kInt64));
        w.write_tensor(prefix + "engine/rng_state", st.generator.get_state());
        w.write_blob(prefix + "engine/layout", layout_text(st));
    } catch (...) {
        err = std::current_exception();
    }
    st.agree<IoError>(err, "TrainEngine::save_state");
}

ckpt::FileDigest TrainEngine::save_state_file(const std::string& path, const std::string& prefix,
                                              const std::function<void(ckpt::H5Writer&)>& extra) const {
    const auto& st = *impl_;
    std::optional<ckpt::H5Writer> w;
    std::exception_ptr err;
    try {
        w.emplace(path);
    } catch (...) {
        err = std::current_exception();
    }
    st.agree<IoError>(err, "creating the checkpoint files");
    save_state(*w, prefix);
    ckpt::FileDigest digest;
    err = nullptr;
    try {
        if (extra) extra(*w);
        digest = w->commit();
    } catch (...) {
        err = std::current_exception();
    }
    st.agree<IoError>(err, "writing the checkpoint files");
    return digest;
}

void TrainEngine::load_state(const ckpt::H5Reader& r, const std::string& prefix) {
    ShardedState saved(r, prefix);
    load_state(saved);
}

void TrainEngine::load_state(SavedState& saved) {
    auto& st = *impl_;
    RLPT_CHECK(!st.frozen(), "TrainEngine: load_state() on a frozen engine (it holds no training state)");
    // Per group: this rank's range [lo, hi) of the parameters and each optimizer kind.
    struct Part {
        int64_t lo = 0, hi = 0;
        torch::Tensor param, exp_avg, exp_avg_sq, master;
    };
    std::vector<Part> parts(st.groups.size());
    int64_t global_step = 0, schedule_step = 0, applied_updates = 0;
    torch::Tensor rng;
    std::exception_ptr err;
    try {
        // Read and check everything first: nothing changes unless all of it is there.
        const std::string mine_tp = tp_text(st.tp_size, st.tp_rank);
        const std::string saved_tp = saved.tensor_parallel();
        RLPT_CHECK_KIND(IoError, saved_tp == mine_tp,
                        "checkpoint '{}' was written with tensor parallelism {} and this engine runs {}: this role "
                        "does not reshard to another model_parallel_size (resume with the layout it was written with)",
                        saved.where(), saved_tp.empty() ? "1 (none)" : saved_tp,
                        mine_tp.empty() ? "1 (none)" : mine_tp);
        const std::string by = fmt::format(" (saved with {}; this engine: ZeRO-{} over {} DP rank(s), rank {})",
                                           saved.written_by(), st.opts.zero_stage, st.dp_size, st.dp_rank);
        const auto& tensors = saved.tensors();
        for (const auto& s : st.slots) {
            auto it = tensors.find(s.name);
            RLPT_CHECK_KIND(IoError, it != tensors.end(), "checkpoint '{}' has no tensor '{}'{}", saved.where(), s.name,
                            by);
            RLPT_CHECK_KIND(IoError, it->second.dtype == s.param.scalar_type() && it->second.shape == s.shape,
                            "checkpoint '{}': tensor '{}' is {} {}, the engine expects {} {}{}", saved.where(), s.name,
                            c10::toString(it->second.dtype), torch::IntArrayRef(it->second.shape),
                            c10::toString(s.param.scalar_type()), torch::IntArrayRef(s.shape), by);
        }
        for (const auto& [name, meta] : tensors) {
            bool known = false;
            for (const auto& s : st.slots) known = known || s.name == name;
            RLPT_CHECK_KIND(IoError, known, "checkpoint '{}': tensor '{}' matches no trainable parameter of the model",
                            saved.where(), name);
        }
        const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
        for (size_t gi = 0; gi < st.groups.size(); ++gi) {
            const auto& g = st.groups[gi];
            Part& p = parts[gi];
            std::tie(p.lo, p.hi) = held_range(st, g);
            const int64_t n = p.hi - p.lo;
            p.param = torch::zeros({n}, torch::TensorOptions().dtype(g.dtype));
            p.exp_avg = torch::zeros({n}, f32);
            p.exp_avg_sq = torch::zeros({n}, f32);
            if (!g.fp32()) p.master = torch::zeros({n}, f32);
        }
        for (const auto& s : st.slots) {
            Part& p = parts[s.group];
            const int64_t a = std::max(p.lo, s.offset), b = std::min(p.hi, s.offset + s.numel);
            if (a >= b) continue;
            const auto put = [&](torch::Tensor& dst, Kind kind) {
                dst.narrow(0, a - p.lo, b - a).copy_(saved.read(kind, s.name, a - s.offset, b - s.offset));
            };
            put(p.param, Kind::kParam);
            put(p.exp_avg, Kind::kExpAvg);
            put(p.exp_avg_sq, Kind::kExpAvgSq);
            if (p.master.defined()) put(p.master, Kind::kMaster);
        }
        const ckpt::H5Reader& own = saved.own();
        const std::string prefix = saved.prefix();
        const auto scalar = [&](const std::string& name) {
            const std::string full = prefix + "engine/" + name;
            RLPT_CHECK_KIND(IoError, own.contains(full), "checkpoint '{}' has no tensor '{}'", own.path(), full);
            const auto t = own.read_tensor(full);
            RLPT_CHECK_KIND(IoError, t.scalar_type() == torch::kInt64 && t.dim() == 0,
                            "checkpoint '{}': '{}' is not an int64 scalar", own.path(), full);
            return t.item<int64_t>();
        };
        global_step = scalar("global_step");
        schedule_step = scalar("schedule_step");
        applied_updates = scalar("applied_updates");
        const std::string rng_name = prefix + "engine/rng_state";
        RLPT_CHECK_KIND(IoError, own.contains(rng_name), "checkpoint '{}' has no tensor '{}'", own.path(), rng_name);
        rng = own.read_tensor(rng_name);
        RLPT_CHECK_KIND(IoError, rng.scalar_type() == torch::kUInt8 && rng.dim() == 1,
                        "checkpoint '{}': '{}' is not a generator state", own.path(), rng_name);
        RLPT_CHECK_KIND(IoError,
                        global_step >= 0 && schedule_step >= 0 && applied_updates >= 0 &&
                            applied_updates <= global_step,
                        "checkpoint '{}': inconsistent step counters under '{}engine/'", own.path(), prefix);
    } catch (...) {
        err = std::current_exception();
    }
    st.agree<IoError>(err, "TrainEngine::load_state");

    torch::NoGradGuard no_grad;
    for (size_t gi = 0; gi < st.groups.size(); ++gi) {
        auto& g = st.groups[gi];
        const Part& p = parts[gi];
        const int64_t n = p.hi - p.lo;
        // Optimizer state: this rank's range (the padding past numel stays zero, as in training).
        for (auto* t : {&g.exp_avg, &g.exp_avg_sq, &g.master}) {
            if (t->defined()) t->zero_();
        }
        g.exp_avg.narrow(0, 0, n).copy_(p.exp_avg);
        g.exp_avg_sq.narrow(0, 0, n).copy_(p.exp_avg_sq);
        if (!g.fp32()) g.master.narrow(0, 0, n).copy_(p.master);
        if (st.shards_params()) {
            g.param_shard.zero_();
            g.param_shard.narrow(0, 0, n).copy_(p.param);
        } else if (st.opts.zero_stage == 0) {
            g.flat_param.narrow(0, 0, n).copy_(p.param);
        } else {
            // ZeRO-1/2: this rank's slice, then every rank's (the parameters are replicated).
            g.flat_param.narrow(0, g.own_begin, g.shard).zero_();
            g.flat_param.narrow(0, g.own_begin, n).copy_(p.param);
            st.shard_tx->allgather_shards(g.flat_param, g.shard);
        }
    }
    detail::invalidate_gathered(st);
    st.global_step = global_step;
    st.schedule_step = schedule_step;
    st.applied_updates = applied_updates;
    st.generator.set_state(rng);
    for (auto& s : st.slots) s.param.unsafeGetTensorImpl()->bump_version();
}

torch::Tensor TrainEngine::gather_parameter(size_t index, int root) {
    auto& st = *impl_;
    RLPT_CHECK(index < st.slots.size(), "gather_parameter: index {} of {} parameters", index, st.slots.size());
    const auto& s = st.slots[index];
    if (!st.shards_params()) return s.param;
    const Group& g = st.groups[s.group];
    torch::NoGradGuard no_grad;
    detail::finish_gathers(st);  // no prefetch may be in flight under the point-to-point messages
    if (st.shard_size == 1) return g.param_shard.narrow(0, s.offset, s.numel).view(s.shape);
    const std::string what = fmt::format("gathering parameter '{}' to DP rank {}", s.name, root);
    // Shard position k of the group holds [k·shard, (k+1)·shard); this tensor is [offset, offset +
    // numel). Only root's shard group (consecutive DP ranks; hybrid shard) takes part.
    const auto part = [&](int k) {
        return std::make_pair(std::max(s.offset, k * g.shard), std::min(s.offset + s.numel, (k + 1) * g.shard));
    };
    const int first = root / st.shard_size * st.shard_size;  // DP rank of root's group's position 0
    const bool in_root_group = st.dp_rank / st.shard_size == root / st.shard_size;
    const int64_t es = static_cast<int64_t>(c10::elementSize(g.dtype));
    std::vector<MPI_Request> reqs;
    torch::Tensor out, mine;
    const auto [a, b] = part(st.shard_rank);
    if (in_root_group && a < b) mine = g.param_shard.narrow(0, a - g.own_begin, b - a).to(torch::kCPU).contiguous();
    if (st.dp_rank == root) {
        out = torch::empty({s.numel}, torch::TensorOptions().dtype(g.dtype));
        for (int k = 0; k < st.shard_size; ++k) {
            const auto [lo, hi] = part(k);
            if (lo >= hi) continue;
            auto dst = out.narrow(0, lo - s.offset, hi - lo);
            if (first + k == root) {
                dst.copy_(mine);
            } else {
                comm::irecv_bytes(dst.data_ptr(), (hi - lo) * es, first + k, kGatherTag, st.dp->get(), reqs);
            }
        }
    } else if (in_root_group && a < b) {
        comm::isend_bytes(mine.data_ptr(), (b - a) * es, root, kGatherTag, st.dp->get(), reqs);
    }
    comm::wait_all(reqs, comm::Deadline::never(), what);
    // Assembled on the host (the slices travel as MPI messages); returned on the parameters' device,
    // where a tensor-parallel export all-gathers it next.
    return st.dp_rank == root ? out.view(s.shape).to(st.device) : torch::Tensor();
}

}  // namespace rlpt::engine
