// TrainEngine::save_state / load_state: parameters, optimizer moments (+ fp32 masters), step
// counters and the RNG, in the ckpt H5 store (names listed in train_engine.h).
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

namespace {

constexpr const char* kLayoutMagic = "rlpt-train-engine-state 1";

std::string normalized_prefix(const std::string& prefix) {
    if (prefix.empty() || prefix.back() == '/') return prefix;
    return prefix + "/";
}

// Ranges of the optimizer state this rank holds, per group: what load_state must find again.
std::string state_layout(const detail::EngineState& st) {
    std::string out = fmt::format("{}\nzero_stage {}\ndp_size {}\ndp_rank {}\n", kLayoutMagic, st.opts.zero_stage,
                                  st.dp_size, st.dp_rank);
    for (const auto& g : st.groups)
        out += fmt::format("group {} numel {} padded {} own {} {}\n", detail::group_name(g), g.numel, g.padded,
                           g.own_begin, g.own_end);
    out += st.layout;
    return out;
}

// ZeRO-2/3 checkpoints hold the optimizer state in ZeRO-0's layout: per dtype one flat vector,
// the parameters of that dtype in named_parameters() order, no padding.
struct Canonical {
    std::vector<torch::ScalarType> dtypes;  // in order of first appearance
    std::map<torch::ScalarType, int64_t> numel;
    std::vector<int64_t> offset;            // per slot, in its dtype's vector
};
Canonical canonical_layout(const detail::EngineState& st) {
    Canonical c;
    for (const auto& s : st.slots) {
        const auto dt = s.param.scalar_type();
        if (c.numel.count(dt) == 0) {
            c.dtypes.push_back(dt);
            c.numel[dt] = 0;
        }
        c.offset.push_back(c.numel[dt]);
        c.numel[dt] += s.numel;
    }
    return c;
}
std::string dtype_group_name(torch::ScalarType dt) { return dt == torch::kFloat32 ? "float32" : "bfloat16"; }
std::string canonical_group_line(int64_t n) { return fmt::format("numel {} padded {} own 0 {}", n, n, n); }

// This rank's part of slot i ([lo, hi) in its group's coordinates, possibly empty).
std::pair<int64_t, int64_t> owned_part(const detail::EngineState& st, size_t i) {
    const auto& s = st.slots[i];
    const auto& g = st.groups[s.group];
    return {std::max(s.offset, g.own_begin), std::min(s.offset + s.numel, g.own_end)};
}

// The full optimizer state of a ZeRO-2/3 engine in the canonical layout (collective on dp:
// every group's slices all-gathered). Per dtype: exp_avg, exp_avg_sq, master (bf16 only).
std::map<torch::ScalarType, std::vector<torch::Tensor>> gather_optimizer_state(detail::EngineState& st,
                                                                                const Canonical& c) {
    std::map<torch::ScalarType, std::vector<torch::Tensor>> out;
    auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(st.device);
    for (auto dt : c.dtypes)
        for (int k = 0; k < (dt == torch::kFloat32 ? 2 : 3); ++k) out[dt].push_back(torch::zeros({c.numel.at(dt)}, f32));
    for (size_t gi = 0; gi < st.groups.size(); ++gi) {
        auto& g = st.groups[gi];
        const std::vector<torch::Tensor> parts = {g.exp_avg, g.exp_avg_sq, g.master};
        for (size_t k = 0; k < out[g.dtype].size(); ++k) {
            auto full = torch::zeros({g.padded}, f32);
            full.narrow(0, g.own_begin, g.shard).copy_(parts[k]);
            st.shard_tx->allgather_shards(full, g.shard);
            for (size_t i = 0; i < st.slots.size(); ++i) {
                const auto& s = st.slots[i];
                if (s.group == gi) out[g.dtype][k].narrow(0, c.offset[i], s.numel).copy_(full.narrow(0, s.offset, s.numel));
            }
        }
    }
    return out;
}

// "key value" lines of a saved layout (first word -> rest of the line; group lines keyed by name).
std::map<std::string, std::string> parse_layout(const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string key, name;
        ls >> key;
        if (key == "group") {
            ls >> name;
            key += " " + name;
        }
        std::string rest;
        std::getline(ls, rest);
        if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
        out[key] = rest;
    }
    return out;
}

torch::Tensor read_checked(const ckpt::H5Reader& r, const std::string& name, torch::ScalarType dtype,
                           torch::IntArrayRef shape, const std::string& hint = {}) {
    RLPT_CHECK_KIND(IoError, r.contains(name), "checkpoint '{}' has no tensor '{}'{}", r.path(), name, hint);
    const auto meta = r.tensor_meta(name);
    RLPT_CHECK_KIND(IoError, meta.dtype == dtype && torch::IntArrayRef(meta.sizes) == shape,
                    "checkpoint '{}': tensor '{}' is {} {}, the engine expects {} {}{}", r.path(), name,
                    c10::toString(meta.dtype), torch::IntArrayRef(meta.sizes), c10::toString(dtype), shape, hint);
    return r.read_tensor(name);
}

int64_t read_scalar(const ckpt::H5Reader& r, const std::string& name) {
    return read_checked(r, name, torch::kInt64, {}).item<int64_t>();
}

}  // namespace

void TrainEngine::save_state(ckpt::H5Writer& w, const std::string& prefix_in) const {
    auto& st = *impl_;
    RLPT_CHECK(!st.frozen(), "TrainEngine: save_state() on a frozen engine (it holds no training state)");
    const std::string prefix = normalized_prefix(prefix_in);
    torch::NoGradGuard no_grad;
    // The collectives (ZeRO-3 gathers, ZeRO-2/3 optimizer state) run on every rank whatever
    // happens to its writes; the first local error is reported at the end.
    std::exception_ptr err;
    const auto guarded = [&](const std::function<void()>& f) {
        if (err) return;
        try {
            f();
        } catch (...) {
            err = std::current_exception();
        }
    };
    detail::for_each_full(st, [&](const std::string& name, const torch::Tensor& p) {
        guarded([&] { w.write_tensor(prefix + "params/" + name, p.detach()); });
    });
    std::string layout = state_layout(st);
    if (st.shards_grads()) {
        const Canonical c = canonical_layout(st);
        const auto full = gather_optimizer_state(st, c);
        layout = fmt::format("{}\nzero_stage {}\ndp_size {}\ndp_rank {}\n", kLayoutMagic, st.opts.zero_stage,
                             st.dp_size, st.dp_rank);
        for (auto dt : c.dtypes) {
            layout += fmt::format("group {} {}\n", dtype_group_name(dt), canonical_group_line(c.numel.at(dt)));
            const std::string base = prefix + "optimizer/" + dtype_group_name(dt) + "/";
            guarded([&] {
                w.write_tensor(base + "exp_avg", full.at(dt)[0]);
                w.write_tensor(base + "exp_avg_sq", full.at(dt)[1]);
                if (dt != torch::kFloat32) w.write_tensor(base + "master", full.at(dt)[2]);
            });
        }
        layout += st.layout;
    } else {
        guarded([&] {
            for (const auto& g : st.groups) {
                const std::string base = prefix + "optimizer/" + detail::group_name(g) + "/";
                w.write_tensor(base + "exp_avg", g.exp_avg);
                w.write_tensor(base + "exp_avg_sq", g.exp_avg_sq);
                if (g.master.defined()) w.write_tensor(base + "master", g.master);
            }
        });
    }
    guarded([&] {
        w.write_tensor(prefix + "engine/global_step", torch::scalar_tensor(st.global_step, torch::kInt64));
        w.write_tensor(prefix + "engine/schedule_step", torch::scalar_tensor(st.schedule_step, torch::kInt64));
        w.write_tensor(prefix + "engine/applied_updates", torch::scalar_tensor(st.applied_updates, torch::kInt64));
        w.write_tensor(prefix + "engine/rng_state", st.generator.get_state());
        w.write_blob(prefix + "engine/layout", layout);
    });
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

void TrainEngine::load_state(ckpt::H5Reader& r, const std::string& prefix_in) {
    auto& st = *impl_;
    RLPT_CHECK(!st.frozen(), "TrainEngine: load_state() on a frozen engine (it holds no training state)");
    const std::string prefix = normalized_prefix(prefix_in);
    struct Loaded {
        std::vector<torch::Tensor> params;
        std::vector<torch::Tensor> exp_avg, exp_avg_sq, master;
        int64_t global_step = 0, schedule_step = 0, applied_updates = 0;
        torch::Tensor rng;
    } in;
    std::exception_ptr err;
    bool canonical = false;
    try {
        // Read and check everything first: nothing changes unless all of it is there.
        // The tensor-parallel layout first: a slice of another size would otherwise be reported as
        // a mis-shaped tensor.
        const std::string layout_name = prefix + "engine/layout";
        std::map<std::string, std::string> saved;
        if (r.contains(layout_name)) saved = parse_layout(r.read_blob(layout_name));
        const std::string mine_tp = st.tp ? fmt::format("{} rank {}", st.tp_size, st.tp_rank) : "";
        RLPT_CHECK_KIND(IoError, saved["tensor_parallel"] == mine_tp,
                        "checkpoint '{}' was written with tensor parallelism {} and this engine runs {}: loading a "
                        "checkpoint into another model_parallel_size is not supported (resume with the layout it was "
                        "written with)",
                        r.path(), saved["tensor_parallel"].empty() ? "1 (none)" : saved["tensor_parallel"],
                        mine_tp.empty() ? "1 (none)" : mine_tp);
        for (const auto& s : st.slots)
            in.params.push_back(read_checked(r, prefix + "params/" + s.name, s.param.scalar_type(), s.shape));
        for (const auto& name : r.list(prefix + "params")) {
            const std::string pname = name.substr(prefix.size() + 7);
            bool known = false;
            for (const auto& s : st.slots) known = known || s.name == pname;
            RLPT_CHECK_KIND(IoError, known, "checkpoint '{}': tensor '{}' matches no trainable parameter of the model",
                            r.path(), name);
        }
        RLPT_CHECK_KIND(IoError, r.contains(layout_name), "checkpoint '{}' has no '{}'", r.path(), layout_name);
        RLPT_CHECK_KIND(IoError, saved["rlpt-train-engine-state"] == "1",
                        "checkpoint '{}': '{}' is not a train-engine layout", r.path(), layout_name);
        const std::string saved_by = fmt::format(" (saved with ZeRO-{} over {} DP rank(s) by rank {}; this engine: "
                                                 "ZeRO-{} over {} rank(s), rank {})",
                                                 saved["zero_stage"], saved["dp_size"], saved["dp_rank"],
                                                 st.opts.zero_stage, st.dp_size, st.dp_rank);
        // ZeRO-0/2/3 files hold the full optimizer state (ZeRO-0's per-dtype groups are the
        // canonical vectors); ZeRO-2/3 engines, and a ZeRO-1 engine given such a file (another DP
        // size or stage: elastic resume), take their slices of it. A ZeRO-1 file holds one rank's
        // ranges and loads only into the same ZeRO-1 layout.
        canonical = st.shards_grads() || (st.opts.zero_stage == 1 && saved["zero_stage"] != "1");
        if (canonical) {
            const Canonical c = canonical_layout(st);
            for (auto dt : c.dtypes) {
                const std::string base = prefix + "optimizer/" + dtype_group_name(dt) + "/";
                const std::string mine = canonical_group_line(c.numel.at(dt));
                RLPT_CHECK_KIND(IoError, saved["group " + dtype_group_name(dt)] == mine,
                                "checkpoint '{}': tensor '{}' covers another range of the {} parameters ('{}'; "
                                "ZeRO-2/3 load full optimizer state as ZeRO-0/2/3 write it: '{}'){}",
                                r.path(), base + "exp_avg", dtype_group_name(dt), saved["group " + dtype_group_name(dt)],
                                mine, saved_by);
                const int64_t n = c.numel.at(dt);
                in.exp_avg.push_back(read_checked(r, base + "exp_avg", torch::kFloat32, {n}, saved_by));
                in.exp_avg_sq.push_back(read_checked(r, base + "exp_avg_sq", torch::kFloat32, {n}, saved_by));
                in.master.push_back(dt == torch::kFloat32
                                        ? torch::Tensor()
                                        : read_checked(r, base + "master", torch::kFloat32, {n}, saved_by));
            }
        }
        for (const auto& g : st.groups) {
            if (canonical) break;
            const std::string base = prefix + "optimizer/" + detail::group_name(g) + "/";
            const std::string mine = fmt::format("numel {} padded {} own {} {}", g.numel, g.padded, g.own_begin,
                                                 g.own_end);
            RLPT_CHECK_KIND(IoError, saved["group " + detail::group_name(g)] == mine,
                            "checkpoint '{}': tensor '{}' covers another range of the {} parameters ('{}' vs this "
                            "engine's '{}'){}",
                            r.path(), base + "exp_avg", detail::group_name(g),
                            saved["group " + detail::group_name(g)], mine, saved_by);
            const int64_t own = g.own_end - g.own_begin;
            in.exp_avg.push_back(read_checked(r, base + "exp_avg", torch::kFloat32, {own}, saved_by));
            in.exp_avg_sq.push_back(read_checked(r, base + "exp_avg_sq", torch::kFloat32, {own}, saved_by));
            in.master.push_back(g.fp32() ? torch::Tensor()
                                         : read_checked(r, base + "master", torch::kFloat32, {own}, saved_by));
        }
        in.global_step = read_scalar(r, prefix + "engine/global_step");
        in.schedule_step = read_scalar(r, prefix + "engine/schedule_step");
        in.applied_updates = read_scalar(r, prefix + "engine/applied_updates");
        const std::string rng_name = prefix + "engine/rng_state";
        RLPT_CHECK_KIND(IoError, r.contains(rng_name), "checkpoint '{}' has no tensor '{}'", r.path(), rng_name);
        in.rng = r.read_tensor(rng_name);
        RLPT_CHECK_KIND(IoError, in.rng.scalar_type() == torch::kUInt8 && in.rng.dim() == 1,
                        "checkpoint '{}': '{}' is not a generator state", r.path(), rng_name);
        RLPT_CHECK_KIND(IoError, in.global_step >= 0 && in.schedule_step >= 0 && in.applied_updates >= 0 &&
                                     in.applied_updates <= in.global_step,
                        "checkpoint '{}': inconsistent step counters under '{}engine/'", r.path(), prefix);
    } catch (...) {
        err = std::current_exception();
    }
    st.agree<IoError>(err, "TrainEngine::load_state");

    torch::NoGradGuard no_grad;
    if (canonical) {
        // Take this rank's slices of the full state.
        const Canonical c = canonical_layout(st);
        std::map<torch::ScalarType, size_t> index;
        for (size_t k = 0; k < c.dtypes.size(); ++k) index[c.dtypes[k]] = k;
        for (size_t i = 0; i < st.slots.size(); ++i) {
            const auto& s = st.slots[i];
            auto& g = st.groups[s.group];
            if (st.shards_params()) {
                const auto [lo, hi] = owned_part(st, i);
                if (lo < hi)
                    g.param_shard.narrow(0, lo - g.own_begin, hi - lo)
                        .copy_(in.params[i].flatten().narrow(0, lo - s.offset, hi - lo));
            } else {
                s.param.copy_(in.params[i]);
            }
            const size_t k = index.at(g.dtype);
            const auto [lo, hi] = owned_part(st, i);
            if (lo >= hi) continue;
            const int64_t from = c.offset[i] + (lo - s.offset), n = hi - lo, to = lo - g.own_begin;
            g.exp_avg.narrow(0, to, n).copy_(in.exp_avg[k].narrow(0, from, n));
            g.exp_avg_sq.narrow(0, to, n).copy_(in.exp_avg_sq[k].narrow(0, from, n));
            if (!g.fp32()) g.master.narrow(0, to, n).copy_(in.master[k].narrow(0, from, n));
        }
        detail::invalidate_gathered(st);
    } else {
        for (size_t i = 0; i < st.slots.size(); ++i) st.slots[i].param.copy_(in.params[i]);
        for (size_t gi = 0; gi < st.groups.size(); ++gi) {
            auto& g = st.groups[gi];
            g.exp_avg.copy_(in.exp_avg[gi]);
            g.exp_avg_sq.copy_(in.exp_avg_sq[gi]);
            if (!g.fp32()) g.master.copy_(in.master[gi]);
        }
    }
    st.global_step = in.global_step;
    st.schedule_step = in.schedule_step;
    st.applied_updates = in.applied_updates;
    st.generator.set_state(in.rng);
    for (auto& s : st.slots) s.param.unsafeGetTensorImpl()->bump_version();
}

}  // namespace rlpt::engine
