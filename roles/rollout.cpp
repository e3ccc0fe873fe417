// The rollout: batched generation with the policy's current weights.
#include "rlpt/roles/rollout.h"

#include <chrono>
#include <optional>
#include <sstream>

#include "model_setup.h"
#include "rlpt/comm/shared_tensor.h"
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

class RolloutWorker : public RoleWorker {
  public:
    RolloutSettings settings;                       // from kInit
    torch::Dtype dtype = torch::kFloat32;           // of generation: settings.dtype resolved
    std::optional<weights::ServedWeights> weights;  // the policy generation reads, from kInit on
    const GeneratorEntry* generator = nullptr;      // rollout.generator
    rollout::TokenTexts token_texts;                // from kInit: what stop strings are matched on
    std::unique_ptr<tokenizer::Tokenizer> tok;      // for generators that read and write text (tool_agent)
    rollout::GeneratorContext gen;                  // the generator's context: its arguments, its state
    detail::PolicySync sync;                        // an own copy's weight sync, built at its first receive
};

RolloutWorker& ready(RoleWorker& w) {
    auto& r = static_cast<RolloutWorker&>(w);
    RLPT_CHECK_KIND(InternalError, r.weights.has_value(), "rollout used before kInit");
    return r;
}

Batch init(RoleWorker& w, WorkerContext& ctx, const Batch& in, const RolloutInit& a) {
    auto& r = static_cast<RolloutWorker&>(w);
    r.settings = a.init.settings;
    const RolloutSettings& s = r.settings;
    r.generator = &find_generator(s.generator);
    r.dtype = model::dtype_from_name(s.dtype == "auto" ? s.model.dtype : s.dtype);
    if (s.dtype == "bfloat16" && ctx.comms->role_rank == 0 && !kernels::cpu_has_avx512_bf16() &&
        protocol::handler_device().is_cpu())
        RLPT_LOG_WARN("rollout.dtype=bfloat16: this CPU lacks AVX512_BF16, so bfloat16 weights only halve the "
                      "bytes of few-row decode steps (widened in registers); prefill and large batches run "
                      "slower than float32 here");
    r.token_texts = in.strings("token_text");
    r.gen.args = s.generators;
    const RolloutInitArgs& appends = a.appends;
    auto& stages = r.gen.args.stages;
    RLPT_CHECK_KIND(InternalError, appends.append_lengths.size() == stages.size(),
                    "rollout.init: {} stage appends for {} stages", appends.append_lengths.size(), stages.size());
    for (size_t i = 0, at = 0; i < stages.size(); at += static_cast<size_t>(appends.append_lengths[i]), ++i)
        stages[i].append_ids.assign(appends.append_ids.begin() + static_cast<int64_t>(at),
                                    appends.append_ids.begin() + static_cast<int64_t>(at) + appends.append_lengths[i]);
    const protocol::InitArgs& args = a.init.run;
    r.gen.max_num_batched_tokens = s.max_num_batched_tokens;
    if (r.generator->runs_tools) {  // reads and writes text with the run's tokenizer
        if (!args.tokenizer_charset.empty()) {
            std::vector<std::string> words;  // '\n'-separated (InitArgs::tokenizer_words)
            std::istringstream lines(args.tokenizer_words);
            for (std::string w; std::getline(lines, w, '\n');) words.push_back(w);
            r.tok = std::make_unique<tokenizer::CharTokenizer>(args.tokenizer_charset, std::move(words));
        } else if (!s.model.path.empty()) r.tok = tokenizer::load_tokenizer(s.model.path);
        r.gen.tokenizer = r.tok.get();
    }
    if (auto shared = ctx.shared->get<detail::SharedPolicy>(detail::kSharedPolicy)) {
        if (shared->model->tp_layout().tp == ctx.layout->mp_size) {
            r.weights = weights::ServedWeights::of_actor(shared);  // same tensors, no copy, no sync
            return Batch(0);
        }
        // The hybrid engine: our own layout, no storage until a generation needs it.
        const auto device = protocol::handler_device();
        const WeightSyncSettings& sync = s.weight_sync;
        r.weights =
            weights::ServedWeights::resharded(shared,
                                              std::make_shared<model::CausalLM>(shared->model->args(),
                                                                                shared->model->dtype(), device,
                                                                                detail::tensor_parallel(ctx, device)),
                                              sync.backend, detail::weight_sync_options(sync));
        return Batch(0);
    }
    const auto device = protocol::handler_device();
    auto own = detail::build_policy(s.model, device, args.vocab_size, detail::tensor_parallel(ctx, device));
    // Our own copy, filled by the weight sync: in a shared arena, so a same-host actor rank writes
    // it with memcpy through a mapping (rlpt/comm/shared_arena.h). Before anything caches addresses.
    if (device.is_cpu()) {
        auto params = detail::parameter_list(*own);
        comm::share_tensors(params, "rlpt-rollout-params");
    }
    r.weights = weights::ServedWeights::own_copy(std::move(own));
    return Batch(0);
}

Batch generate(RoleWorker& w, WorkerContext& ctx, const Batch& in, const GenerateArgs& args) {
    RolloutWorker& r = ready(w);
    const auto t0 = std::chrono::steady_clock::now();
    // Colocated with a ZeRO-3 actor: the full weights for the whole generation (its number of
    // decode steps differs per rank, so no per-layer gathers), freed when it returns.
    const auto full = model::hold_full_parameters(r.weights->model());
    const auto window = r.weights->window(ctx.comms->role_rank == 0);
    // The prompts are read as token lists: the row takes its input on the host.
    const torch::Tensor ids = in.at("prompt_ids").contiguous();
    const torch::Tensor mask = in.at("prompt_mask").to(torch::kBool).contiguous();
    const int64_t B = in.size(), P = ids.size(1);
    rollout::SamplingParams sp;
    sp.temperature = args.temperature;
    sp.top_p = args.top_p;
    sp.top_k = args.top_k;
    sp.greedy = args.greedy;
    sp.max_new_tokens = args.max_new_tokens;
    sp.eos_id = args.eos_id;
    sp.pad_id = args.pad_id;
    sp.stop_token_ids = args.stop_ids;
    sp.stop = args.stop;
    sp.include_stop_str_in_output = args.include_stop_str_in_output;
    // Mixture-of-experts policies: every shard returns routed_experts (the generators that do not
    // record routes leave -1 everywhere; router replay R3 is refused with them at start-up).
    const auto& margs = r.weights->model().args();
    const bool moe = margs.num_moe_layers() > 0;
    sp.record_routes = moe;
    const bool with_text = !sp.stop.empty() || !r.gen.args.stages.empty();
    if (with_text) sp.token_texts = &r.token_texts;
    RLPT_CHECK(args.n >= 1, "rollout.generate: n must be >= 1, got {}", args.n);
    std::vector<int64_t> sample_rank;
    std::vector<uint64_t> group_seeds;
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
        sample_rank.push_back(rank);
        group_seeds.push_back(rollout::sample_seed(seed, step, sample - rank));
    }
    Batch out(B);
    const int64_t R = sp.max_new_tokens;
    if (B == 0) {
        for (const char* k : {"prompts"}) out.set(k, torch::zeros({0, P}, torch::kInt64));
        for (const char* k : {"responses", "response_mask"}) out.set(k, torch::zeros({0, R}, torch::kInt64));
        out.set("rollout_log_probs", torch::zeros({0, R}));
        for (const char* k : {"input_ids", "attention_mask", "position_ids"})
            out.set(k, torch::zeros({0, P + R}, torch::kInt64));
        if (moe)
            out.set("routed_experts",
                    torch::zeros({0, P + R, margs.num_moe_layers(), margs.num_experts_per_tok}, torch::kInt16));
        out.set_ints("finish_reason", {});
        out.set_ints("weight_version", {});
        if (with_text) out.set_strings("response_text", {});
        return out;
    }
    r.gen.sample_index = index;
    r.gen.sample_rank = std::move(sample_rank);
    r.gen.group_seeds = std::move(group_seeds);
    for (auto [field, dest] : {std::pair{"data_source", &r.gen.data_source},
                               std::pair{"ground_truth", &r.gen.ground_truth}, std::pair{"extra", &r.gen.extra}})
        *dest = in.has_strings(field) ? in.strings(field) : std::vector<std::string>{};
    auto g = r.generator->fn(r.weights->for_generation(r.dtype), prompts, seeds, sp, r.settings.max_num_seqs, r.gen);
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
    if (moe) {
        // [B, P+R, moe layers, k] int16 (experts < 32768), -1 where nothing was routed.
        auto routes =
            g.routed_experts.defined()
                ? g.routed_experts
                : torch::full({B, gp + gr, margs.num_moe_layers(), margs.num_experts_per_tok}, -1, torch::kInt64);
        out.set("routed_experts", torch::constant_pad_nd(routes.to(torch::kInt16), {0, 0, 0, 0, P - gp, R - gr}, -1));
    }
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
        detail::sync_policy_weights(r.sync, r.settings.weight_sync, ctx, m, version);
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
            method<RolloutMethod::kInit, init>("init").receives_settings().takes(
                {protocol::string_field("token_text")}),
            method<RolloutMethod::kGenerate, generate>("generate")
                .split_over_dp()
                .takes_host_input()
                .takes(tensors("prompt_ids", "prompt_mask"))
                .takes({protocol::int_field("sample_index")})
                .takes({{"data_source", protocol::FieldKind::kString, true},
                        {"ground_truth", protocol::FieldKind::kString, true},
                        {"extra", protocol::FieldKind::kString, true}})
                .concat_outputs(tensors("responses", "response_mask", "input_ids", "attention_mask", "position_ids",
                                        "rollout_log_probs")),
            method(RolloutMethod::kReceiveWeights, "receive_weights", receive_weights),
        };
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
