#include "train_common.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "rlpt/ckpt/checkpoint_dir.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/core/log.h"

#include "rlpt/algo/seqlen_balancing.h"
#include "model_setup.h"

namespace rlpt::roles::detail {

engine::SequenceBatch trimmed_sequences(const Batch& b, int64_t* kept_r) {
    const torch::Tensor& ids = b.at("input_ids");
    const torch::Tensor& mask = b.at("attention_mask");
    const int64_t R = b.at("responses").size(1);
    const int64_t T = ids.size(1), P = T - R;
    RLPT_CHECK(P >= 1, "sequences need at least one prompt column (T={}, R={})", T, R);
    // Longest response actually present, and the first prompt column any row uses.
    int64_t r_used = R;
    if (b.has("response_mask") && R > 0) {
        auto any = b.at("response_mask").sum(0).gt(0).nonzero();
        r_used = any.numel() ? any.max().item<int64_t>() + 1 : 0;
    }
    r_used = std::max<int64_t>(r_used, 1);
    r_used = std::min(r_used, R);
    auto used_cols = mask.slice(1, 0, P).sum(0).gt(0).nonzero();
    int64_t p0 = used_cols.numel() ? used_cols.min().item<int64_t>() : P - 1;
    p0 = std::min(p0, P - 1);
    engine::SequenceBatch s;
    s.input_ids = ids.slice(1, p0, P + r_used);
    s.attention_mask = mask.slice(1, p0, P + r_used);
    s.position_ids = b.at("position_ids").slice(1, p0, P + r_used);
    s.response_length = r_used;
    s.first_column = p0;
    if (kept_r) *kept_r = r_used;
    return s;
}

torch::Tensor first_columns(const torch::Tensor& t, int64_t r) { return t.slice(1, 0, r); }

torch::Tensor sequence_routes(const Batch& b, const std::string& column, const engine::SequenceBatch& seq) {
    const auto& routes = b.at(column);
    const int64_t t = seq.input_ids.size(1);
    RLPT_CHECK(routes.dim() == 4 && routes.size(1) >= seq.first_column + t, "column '{}': routes {} for {} columns",
               column, routes.sizes(), seq.first_column + t);
    const auto s = routes.slice(1, seq.first_column, seq.first_column + t);
    return s.reshape({s.size(0) * t, s.size(2), s.size(3)});
}

torch::Tensor pad_response_columns(const torch::Tensor& t, int64_t R) {
    if (t.size(1) == R) return t;
    return torch::constant_pad_nd(t, {0, R - t.size(1)}, 0);
}

std::vector<std::vector<int64_t>> micro_batches(const Batch& mini, int64_t micro_size, bool dynamic, int64_t max_tokens,
                                                const comm::Communicator& dp) {
    const int64_t n = mini.size();
    std::vector<std::vector<int64_t>> out;
    if (!dynamic) {
        for (int64_t b = 0; b < n; b += micro_size) {
            std::vector<int64_t> idx;
            for (int64_t i = b; i < std::min(n, b + micro_size); ++i) idx.push_back(i);
            out.push_back(std::move(idx));
        }
        return out;
    }
    // Read on the host (the batch may be on the GPU).
    auto lens_t = mini.at("attention_mask").sum(1).to(torch::kCPU, torch::kInt64).contiguous();
    std::vector<int64_t> lens(lens_t.data_ptr<int64_t>(), lens_t.data_ptr<int64_t>() + n);
    int64_t local = algo::local_num_micro_batches(lens, max_tokens);
    algo::MicroBatchOptions opts;
    opts.max_token_len = max_tokens;
    opts.min_num_micro_batches = dp.allreduce_max_i64(local);
    return algo::rearrange_micro_batches(lens, opts);
}

Batch forward_micro_batches(const Batch& in, int64_t micro_size, const std::vector<ForwardColumn>& columns,
                            const MicroForward& forward) {
    const int64_t R = in.at("responses").size(1);
    std::vector<std::vector<torch::Tensor>> parts(columns.size());
    for (const Batch& mb : in.split(std::max<int64_t>(1, micro_size))) {
        auto outs = forward(mb, trimmed_sequences(mb, nullptr));
        RLPT_CHECK_KIND(InternalError, outs.size() == columns.size(), "a micro-batch forward returned {} of {} columns",
                        outs.size(), columns.size());
        for (size_t i = 0; i < columns.size(); ++i) {
            auto t = outs[i].to(torch::kCPU);
            parts[i].push_back(columns[i].per_token ? pad_response_columns(t, R) : t);
        }
    }
    Batch out(in.size());
    for (size_t i = 0; i < columns.size(); ++i) {
        const auto empty = columns[i].per_token ? torch::zeros({0, R}) : torch::zeros({0});
        out.set(columns[i].name, in.size() ? torch::cat(parts[i], 0) : empty);
    }
    return out;
}

void ppo_update_loop(engine::TrainEngine& engine, const comm::Communicator& dp, int64_t dp_size, const Batch& in,
                     const PpoLoop& loop, Batch& metrics, const MicroStep& micro_step) {
    const int64_t M = loop.num_mini_batches;
    RLPT_CHECK(M >= 1 && in.size() % M == 0, "{} update: {} local rows do not form {} mini-batches", loop.role,
               in.size(), M);
    const int64_t R = in.at("responses").size(1);
    const int64_t rows = in.size() / M;
    for (int64_t epoch = 0; epoch < loop.epochs; ++epoch) {
        for (int64_t j = 0; j < M; ++j) {
            Batch mini = in.slice(j * rows, (j + 1) * rows);
            algo::GlobalBatchInfo info;
            info.dp_size = dp_size;
            info.batch_num_tokens = dp.allreduce_sum(mini.at("response_mask").sum().item<double>());
            info.global_batch_size = loop.global_mini_batch_rows;
            info.loss_scale_factor = loop.loss_scale_factor.value_or(static_cast<double>(R));
            engine.zero_grad();
            double loss_sum = 0;
            int64_t micro = 0;
            for (const auto& idx :
                 micro_batches(mini, loop.micro_batch_size, loop.use_dynamic_bsz, loop.max_token_len, dp)) {
                loss_sum += micro_step(mini.index(idx), info, micro++);
            }
            auto st = engine.step(/*advance_schedule=*/false);
            metrics.add_metric(loop.loss_metric, loss_sum);
            metrics.add_metric(loop.role + "/grad_norm", st.grad_norm);
            metrics.add_metric(loop.role + "/lr", st.lr);
            if (loop.skipped_steps_metric)
                metrics.add_metric(loop.role + "/skipped_steps", st.skipped ? 1.0 : 0.0, Reduce::kSum);
        }
    }
    engine.advance_schedule();  // once per training step, as verl's lr scheduler
}

engine::OptimOptions optim_options(const OptimConfig& o, int64_t total_steps) {
    engine::OptimOptions e;
    e.lr = o.lr;
    e.beta1 = o.beta1;
    e.beta2 = o.beta2;
    e.eps = o.eps;
    e.weight_decay = o.weight_decay;
    e.total_steps = std::max<int64_t>(total_steps, 1);
    e.warmup_steps = o.warmup_steps >= 0 ? o.warmup_steps
                                         : static_cast<int64_t>(o.warmup_ratio * static_cast<double>(e.total_steps));
    e.scheduler = o.scheduler;
    e.min_lr_ratio = o.min_lr_ratio;
    e.num_cycles = o.num_cycles;
    e.clip_grad = o.clip_grad;
    e.zero_stage = o.zero_stage;
    e.grad_bucket_bytes = static_cast<int64_t>(o.grad_bucket_mb * 1024 * 1024);
    return e;
}

uint64_t stream_seed(std::initializer_list<uint64_t> keys) {
    auto mix = [](uint64_t z) {
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    };
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (uint64_t k : keys) h = mix(h ^ mix(k + 0x9E3779B97F4A7C15ULL));
    return h;
}

Batch save_engine_checkpoint(const engine::TrainEngine& engine, const std::string& dir, const std::string& role,
                             int role_rank, const std::function<void(ckpt::H5Writer&)>& extra) {
    const std::string file = fmt::format("{}_rank{}.h5", role, role_rank);
    const auto digest = engine.save_state_file((std::filesystem::path(dir) / file).string(), role + "/", extra);
    Batch out(1);
    out.set_strings("dir", {dir});
    out.set_strings("file", {file});
    out.set_ints("bytes", {static_cast<int64_t>(digest.size)});
    out.set_ints("crc32", {static_cast<int64_t>(digest.crc32)});
    return out;
}

void load_engine_checkpoint(engine::TrainEngine& engine, const std::string& dir, const std::string& role, int role_rank,
                            const comm::Communicator& role_comm,
                            const std::function<void(const ckpt::H5Reader&)>& extra, const ResliceTarget* reslice) {
    const auto file = [&](int k) {
        return (std::filesystem::path(dir) / fmt::format("{}_rank{}.h5", role, k)).string();
    };
    const std::string prefix = role + "/";
    std::unique_ptr<engine::SavedState> saved;
    bool resliced = false;
    std::exception_ptr err;
    try {
        RLPT_CHECK_KIND(IoError, std::filesystem::exists(file(0)), "checkpoint file {} is missing", file(0));
        const engine::SavedLayout lay = engine::saved_layout(ckpt::H5Reader(file(0)), prefix);
        const int tp_now = engine.tp_size(), block = role_rank / tp_now;
        const auto files_of = [&](int t) {
            std::vector<std::string> paths;
            for (int d = 0; d < lay.dp_size; ++d) paths.push_back(file(d * lay.tp_size + t));
            return std::make_unique<engine::ShardedState>(std::move(paths), block < lay.dp_size ? block : 0, prefix);
        };
        if (lay.tp_size == tp_now) {
            saved = files_of(engine.tp_rank());
        } else {
            RLPT_CHECK_KIND(
                IoError, reslice != nullptr,
                "checkpoint {} was written at tensor parallelism {} and this {} runs {}: the {} resumes only "
                "at the tensor parallelism it was written with",
                dir, lay.tp_size, role, tp_now, role);
            std::vector<std::unique_ptr<engine::ShardedState>> old;
            for (int t = 0; t < lay.tp_size; ++t) old.push_back(files_of(t));
            saved = resliced_checkpoint(std::move(old), static_cast<size_t>(engine.tp_rank() % lay.tp_size), *reslice);
            resliced = true;
        }
    } catch (...) {
        err = std::current_exception();
    }
    // Every rank of the role opens the checkpoint or none does (then nobody enters the engine's collectives).
    if (role_comm.allreduce_min_i64(err ? 0 : 1) == 0) {
        if (err) std::rethrow_exception(err);
        throw IoError(fmt::format("opening checkpoint {} failed on another {} rank", dir, role));
    }
    engine.load_state(*saved);
    if (extra) extra(saved->own());
    if (role_rank == 0 && resliced)
        RLPT_LOG_INFO("{}: resharded checkpoint {} into tensor parallelism {}", role, dir, engine.tp_size());
}

}  // namespace rlpt::roles::detail
