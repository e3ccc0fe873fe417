// The rollout: batched generation with the policy's current weights.
#include "rlpt/roles/rollout.h"

#include <chrono>
#include <optional>
#include <sstream>

#include "model_setup.h"
#include "rlpt/comm/shared_tensor.h"
#include "rlpt/config/config.h"
#include "rlpt/core/log.h"
#include "rlpt/kernels/cpu_features.h"
#include "rlpt/roles/generator_table.h"
#include "rlpt/rollout/stop_strings.h"
#include "rlpt/tokenizer/tokenizer.h"
#include "rlpt/tokenizer/char_tokenizer.h"
#include "rlpt/weights/served_weights.h"
#include "role_common.h"

namespace rlpt::roles {
namespace {

using protocol::RoleWorker;
using protocol::WorkerContext;

// The shared helpers' settings, from the run's config (WorkerContext::config), as the run plan
// resolves the actor's (app/role_settings.cpp), until the rollout's come with its kInit (issue 33,
// part B).
ModelSettings model_settings(const Config& c) {
    return {c.model.path, c.model.dtype, c.model.head_precision, c.model.builtin};
}
WeightSyncSettings weight_sync_settings(const Config& c) {
    const OptimConfig& actor = c.trainer.mode == "sft" ? c.sft.optim : c.actor.optim;
    return {c.rollout.weight_sync.backend, c.rollout.weight_sync.bucket_mb, c.trainer.call_timeout_s, actor.zero_stage};
}

class RolloutWorker : public RoleWorker {
  public:
    std::optional<weights::ServedWeights> weights;  // the policy generation reads, from kInit on
    const GeneratorEntry* generator = nullptr;      // rollout.generator
    rollout::GeneratorArgs generator_args;          // rollout.beam_search, rollout.stages (appends encoded)
    rollout::TokenTexts token_texts;                // from kInit: what stop strings are matched on
    std::unique_ptr<tokenizer::Tokenizer> tok;      // for generators that read and write text (tool_agent)
    rollout::GeneratorContext gen;                  // the generator's context (its state lives here)
    detail::PolicySync sync;                        // an own copy's weight sync, built at its first receive
};

torch::Dtype rollout_dtype(const Config& c) {
    return model::dtype_from_name(c.rollout.dtype == "auto" ? c.model.dtype : c.rollout.dtype);
}

RolloutWorker& ready(RoleWorker& w) {
    auto& r = static_cast<RolloutWorker&>(w);
    RLPT_CHECK_KIND(InternalError, r.weights.has_value(), "rollout used before kInit");
    return r;
}

Batch init(RoleWorker& w, WorkerContext& ctx, const Batch& in) {
    auto& r = static_cast<RolloutWorker&>(w);
    r.generator = &find_generator(ctx.config->rollout.generator);
    if (ctx.config->rollout.dtype == "bfloat16" && ctx.comms->role_rank == 0 && !kernels::cpu_has_avx512_bf16() &&
        protocol::handler_device().is_cpu())
        RLPT_LOG_WARN("rollout.dtype=bfloat16: this CPU lacks AVX512_BF16, so bfloat16 weights only halve the "
                      "bytes of few-row decode steps (widened in registers); prefill and large batches run "
                      "slower than float32 here");
    r.token_texts = in.strings("token_text");
    r.generator_args = generator_args(ctx.config->rollout);
    const auto appends = protocol::decode_args<RolloutInitArgs>(in, "rollout.init");
    auto& stages = r.generator_args.stages;
    RLPT_CHECK_KIND(InternalError, appends.append_lengths.size() == stages.size(),
                    "rollout.init: {} stage appends for {} stages", appends.append_lengths.size(), stages.size());
    for (size_t i = 0, at = 0; i < stages.size(); at += static_cast<size_t>(appends.append_lengths[i]), ++i)
        stages[i].append_ids.assign(appends.append_ids.begin() + static_cast<int64_t>(at),
                                    appends.append_ids.begin() + static_cast<int64_t>(at) + appends.append_lengths[i]);
    const auto args = protocol::decode_args<protocol::InitArgs>(in, "rollout.init");
    r.gen.config = ctx.config;
    if (ctx.config->rollout.generator == "tool_agent") {  // reads and writes text with the run's tokenizer
        if (!args.tokenizer_charset.empty()) {
            std::vector<std::string> words;  // '\n'-separated (InitArgs::tokenizer_words)
            std::istringstream lines(args.tokenizer_words);
            for (std::string w; std::getline(lines, w, '\n');) words.push_back(w);
            r.tok = std::make_unique<tokenizer::CharTokenizer>(args.tokenizer_charset, std::move(words));
        } else if (!ctx.config->model.path.empty()) r.tok = tokenizer::load_tokenizer(ctx.config->model.path);
        r.gen.tokenizer = r.tok.get();
    }
    const Config& c = *ctx.config;
    if (auto shared = ctx.shared->get<detail::SharedPolicy>(detail::kSharedPolicy)) {
        if (shared->model->tp_layout().tp == ctx.layout->mp_size) {
            r.weights = weights::ServedWeights::of_actor(shared);  // same tensors, no copy, no sync
            return Batch(0);
        }
        // The hybrid engine: our own layout, no storage until a generation needs it.
        const auto device = protocol::handler_device();
        const WeightSyncSettings sync = weight_sync_settings(c);
        r.weights =
            weights::ServedWeights::resharded(shared,
                                              std::make_shared<model::CausalLM>(shared->model->args(),
                                                                                shared->model->dtype(), device,
                                                                                detail::tensor_parallel(ctx, device)),
                                              sync.backend, detail::weight_sync_options(sync));
        return Batch(0);
    }
    const auto device = protocol::handler_device();
    auto own = detail::build_policy(model_settings(c), device, args.vocab_size, detail::tensor_parallel(ctx, device));
    // Our own copy, filled by the weight sync: in a shared arena, so a same-host actor rank writes
    // it with memcpy through a mapping (rlpt/comm/shared_arena.h). Before anything caches addresses.
    if (device.is_cpu()) {
        auto params = detail::parameter_list(*own);
        comm::share_tensors(params, "rlpt-rollout-params");
    }
    r.weights = weights::ServedWeights::own_copy(std::move(own));
    return Batch(0);
}

Batch generate(RoleWorker& w, WorkerContext& ctx, const Batch& in) {
    RolloutWorker& r = ready(w);
    const auto t0 = std::chrono::steady_clock::now();
    // Colocated with a ZeRO-3 actor: the full weights for the whole generation (its number of
    // decode steps differs per rank, so no per-layer gathers), freed when it returns.
    const auto full = model::hold_full_parameters(r.weights->model());
    const auto window = r.weights->window(ctx.comms->role_rank == 0);
    // The prompts are read as token lists on the host (the batch may arrive on the GPU).
    const torch::Tensor ids = in.at("prompt_ids").to(torch::kCPU).contiguous();
    const torch::Tensor mask = in.at("prompt_mask").to(torch::kCPU, torch::kBool).contiguous();
    const int64_t B = in.size(), P = ids.size(1);
    const auto args = protocol::decode_args<GenerateArgs>(in, "rollout.generate");
    rollout::SamplingParams sp;
    sp.temperature = args.temperature;
    sp.top_p = args.top_p;
    sp.top_k = args.top_k;
    sp.greedy = args.greedy;
    sp.max_new_tokens = args.max_new_tokens;
    sp.eos_id = args.eos_id;
    sp.pad_id = args.pad_id;
    sp.stop_token_ids = args.stop_ids;
    const auto& rc = ctx.config->rollout;
    sp.stop = rc.stop;
    sp.include_stop_str_in_output = rc.include_stop_str_in_output;
    const bool with_text = !sp.stop.empty() || !r.generator_args.stages.empty();
    if (with_text) sp.token_texts = &r.token_texts;
    RLPT_CHECK(args.n >= 1, "rollout.generate: n must be >= 1, got {}", args.n);
    rollout::GeneratorArgs gen_args = r.generator_args;
    const uint64_t seed = static_cast<uint64_t>(args.seed);
    const int64_t step = args.stream;

    std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(B));
    std::vector<uint64_t> seeds(static_cast<size_t>(B));
    const auto& index = in.ints("sample_index");
    for (int64_t i = 0; i < B; ++i) {
        auto row = ids[i].masked_select(mask[i]);
        prompts[static_cast<size_t>(i)].assign(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
        const int64_t sample = index[static_cast<size_t>(i)], rank = sample % args.n;
        seeds[static_cast<size_t>(i)] = rollout::sample_seed(seed, step, sample);
        gen_args.sample_rank.push_back(rank);
        gen_args.group_seeds.push_back(rollout::sample_seed(seed, step, sample - rank));
    }
    Batch out(B);
    const int64_t R = sp.max_new_tokens;
    if (B == 0) {
        for (const char* k : {"prompts"}) out.set(k, torch::zeros({0, P}, torch::kInt64));
        for (const char* k : {"responses", "response_mask"}) out.set(k, torch::zeros({0, R}, torch::kInt64));
        out.set("rollout_log_probs", torch::zeros({0, R}));
        for (const char* k : {"input_ids", "attention_mask", "position_ids"})
            out.set(k, torch::zeros({0, P + R}, torch::kInt64));
        out.set_ints("finish_reason", {});
        out.set_ints("weight_version", {});
        if (with_text) out.set_strings("response_text", {});
        return out;
    }
    r.gen.args = std::move(gen_args);
    r.gen.sample_index = index;
    for (auto [field, dest] : {std::pair{"data_source", &r.gen.data_source},
                               std::pair{"ground_truth", &r.gen.ground_truth}, std::pair{"extra", &r.gen.extra}})
        *dest = in.has_strings(field) ? in.strings(field) : std::vector<std::string>{};
    auto g = r.generator->fn(r.weights->for_generation(rollout_dtype(*ctx.config)), prompts, seeds, sp,
                             ctx.config->rollout.max_num_seqs, r.gen);
    for (const auto& [name, values] : r.gen.sample_values) out.set(name, torch::tensor(values, torch::kFloat64));
    // Pad to the call's fixed widths (P of the input, R = max_new_tokens) so shards concatenate.
    const int64_t gp = g.prompts.size(1), gr = g.responses.size(1);
    auto padl = [&](const torch::Tensor& t, int64_t value) { return torch::constant_pad_nd(t, {P - gp, 0}, value); };
    auto padr = [&](const torch::Tensor& t, double value) { return torch::constant_pad_nd(t, {0, R - gr}, value); };
    out.set("prompts", padl(g.prompts, sp.pad_id));
    out.set("responses", padr(g.responses, static_cast<double>(sp.pad_id)));
    out.set("response_mask", padr(g.response_mask, 0));
    out.set("rollout_log_probs", padr(g.rollout_log_probs, 0));
    auto pad_seq = [&](const torch::Tensor& t, int64_t value) {
        return torch::constant_pad_nd(torch::constant_pad_nd(t, {P - gp, 0}, value), {0, R - gr}, value);
    };
    out.set("input_ids", pad_seq(g.input_ids, sp.pad_id));
    auto attn = pad_seq(g.attention_mask, 0);
    out.set("attention_mask", attn);
    out.set("position_ids", (attn.cumsum(1) - 1).clamp_min(0));
    std::vector<int64_t> reasons, versions(static_cast<size_t>(B), static_cast<int64_t>(r.weights->version()));
    for (auto fr : g.finish_reasons) reasons.push_back(static_cast<int64_t>(fr));
    out.set_ints("finish_reason", reasons);
    out.set_ints("weight_version", versions);
    if (with_text) out.set_strings("response_text", std::move(g.texts));
    // This rank's generation time: the trainer's rollout idle fraction (max over the ranks).
    out.add_metric("rollout/generate_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   Reduce::kMax);
    return out;
}

Batch receive_weights(RoleWorker& w, WorkerContext& ctx, const Batch&) {
    RolloutWorker& r = ready(w);
    r.weights->receive([&](model::CausalLM& m, uint64_t& version) {
        detail::sync_policy_weights(r.sync, weight_sync_settings(*ctx.config), ctx, m, version);
    });
    return Batch(0);
}

std::unique_ptr<RoleWorker> make_rollout(WorkerContext&) { return std::make_unique<RolloutWorker>(); }

}  // namespace

const protocol::RoleSpec& rollout_spec() {
    static const protocol::RoleSpec spec = [] {
        using protocol::method;
        using protocol::tensors;
        protocol::RoleSpec s;
        s.name = "rollout";
        s.method_count = static_cast<uint16_t>(RolloutMethod::kCount);
        s.factory = make_rollout;
        s.methods = {
            detail::ping_spec(),
            method(RolloutMethod::kInit, "init", init)
                .takes(protocol::args_schema<protocol::InitArgs>())
                .takes(protocol::args_schema<RolloutInitArgs>())
                .takes({protocol::string_field("token_text")}),
            method(RolloutMethod::kGenerate, "generate", generate)
                .split_over_dp()
                .takes(tensors("prompt_ids", "prompt_mask"))
                .takes({protocol::int_field("sample_index")})
                .takes({{"data_source", protocol::FieldKind::kString, true},
                        {"ground_truth", protocol::FieldKind::kString, true},
                        {"extra", protocol::FieldKind::kString, true}})
                .takes(protocol::args_schema<GenerateArgs>())
                .concat_outputs(tensors("responses", "response_mask", "input_ids", "attention_mask", "position_ids",
                                        "rollout_log_probs")),
            method(RolloutMethod::kReceiveWeights, "receive_weights", receive_weights),
        };
        return s;
    }();
    return spec;
}

Batch rollout_init_batch(const protocol::InitArgs& args, const Config& c, const tokenizer::Tokenizer& tok) {
    auto texts = rollout::token_texts(tok);
    Batch b(static_cast<int64_t>(texts.size()));
    b.set_strings("token_text", std::move(texts));
    RolloutInitArgs appends;
    int64_t total = 0;
    for (const auto& s : c.rollout.stages) {
        const auto ids = tok.encode(s.append, /*allow_special=*/true);
        appends.append_ids.insert(appends.append_ids.end(), ids.begin(), ids.end());
        appends.append_lengths.push_back(static_cast<int64_t>(ids.size()));
        total += s.max_tokens + static_cast<int64_t>(ids.size());
    }
    RLPT_CHECK_KIND(ConfigError, total <= c.data.max_response_length,
                    "rollout.stages: the stages' max_tokens plus their appended tokens add up to {}, over "
                    "data.max_response_length={}",
                    total, c.data.max_response_length);
    return protocol::with_args(protocol::with_args(std::move(b), args), appends);
}

}  // namespace rlpt::roles
