// The rollout: batched generation with the policy's current weights.
#include "rlpt/roles/rollout.h"

#include <chrono>
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
    std::shared_ptr<detail::SharedPolicy> policy;  // the actor's (colocated) or our own copy
    const GeneratorEntry* generator = nullptr;     // rollout.generator
    rollout::GeneratorArgs generator_args;         // rollout.beam_search, rollout.stages (appends encoded)
    rollout::TokenTexts token_texts;               // from kInit: what stop strings are matched on
    std::unique_ptr<tokenizer::Tokenizer> tok;     // for generators that read and write text (tool_agent)
    rollout::GeneratorContext gen;                 // the generator's context (its state lives here)
    bool own_copy = false;
    detail::PolicySync sync;
    // rollout.dtype other than the policy's: the copy generation runs with, and the weights it
    // was made from (policy version, count of receive_weights calls).
    std::shared_ptr<model::CausalLM> cast;
    std::pair<uint64_t, uint64_t> cast_from{0, 0};
    uint64_t syncs = 0;
    // The hybrid engine (colocated with an actor of another tensor-parallel size): the actor,
    // resharded into `policy` (our layout, storage released between generations) before each
    // generation.
    std::shared_ptr<detail::SharedPolicy> actor;
    std::unique_ptr<weights::RegionExchange> exchange;  // over the actor's ranks, made at the first window
    std::unique_ptr<weights::HeldReshard> resharder;    // its transfer list kept across windows
    bool logged_reshard = false;
};

// The hybrid engine's generation window: the rollout-layout copy filled from the actor on
// construction (collective on the actor's role communicator), its storage freed on exit.
class ReshardedWindow {
  public:
    ReshardedWindow(RolloutWorker& r, const WorkerContext& ctx) : r_(r) {
        if (!r.actor) return;
        model::CausalLM& m = *r.policy->model;
        if (!r.exchange) {
            const WeightSyncSettings sync = weight_sync_settings(*ctx.config);
            r.exchange = weights::make_region_exchange(sync.backend, *r.actor->comm, detail::weight_sync_options(sync));
            r.resharder = std::make_unique<weights::HeldReshard>(m.args(), *r.exchange);
        }
        const auto& src_layout = r.actor->model->tp_layout();
        const weights::HeldSource src{r.actor->held(), src_layout.tp, src_layout.rank};
        // What this rank holds whole of a rollout tensor is that memory (HeldReshard::run); the
        // rest lives in the actor's gradient buffers, unused until its next zero_grad(), which
        // the window's end makes possible again by releasing the copy: warm memory, nothing
        // allocated on top of the training state while it fits.
        const auto st = r.resharder->run(&src, &m, m.tp_layout(),
                                         r.actor->lend_scratch ? r.actor->lend_scratch() : engine::ScratchMemory{});
        r.policy->version = r.actor->version;
        active_ = true;
        if (ctx.comms->role_rank == 0 && !r.logged_reshard) {
            RLPT_LOG_INFO(
                "rollout: hybrid engine resharded the actor (tp {}) into the rollout layout (tp {}): {:.3f} MB "
                "of rollout parameters on this rank ({:.3f} MB of them the actor's own memory, {:.3f} MB "
                "in its gradient buffers), {:.3f} MB received from other ranks, {:.3f} s; freed after each "
                "generation",
                src.tp, m.tp_layout().tp, st.dst_bytes / 1e6, st.aliased_bytes / 1e6, st.scratch_bytes / 1e6,
                st.received_bytes / 1e6, st.seconds);
            r.logged_reshard = true;
        }
    }
    ~ReshardedWindow() {
        if (active_) weights::release_parameter_storage(*r_.policy->model);
    }
    ReshardedWindow(const ReshardedWindow&) = delete;
    ReshardedWindow& operator=(const ReshardedWindow&) = delete;

  private:
    RolloutWorker& r_;
    bool active_ = false;
};

torch::Dtype rollout_dtype(const Config& c) {
    return model::dtype_from_name(c.rollout.dtype == "auto" ? c.model.dtype : c.rollout.dtype);
}

// The model generation runs with: the policy itself when rollout.dtype is its dtype, else the
// copy in rollout.dtype, its values refreshed from the policy when the weights changed since.
model::CausalLM& generation_model(RolloutWorker& r, const Config& c) {
    model::CausalLM& policy = *r.policy->model;
    const torch::Dtype want = rollout_dtype(c);
    if (policy.dtype() == want) return policy;
    const std::pair<uint64_t, uint64_t> now{r.policy->version, r.syncs};
    if (r.cast == nullptr) {
        r.cast = model::clone_causal_lm(policy, want, policy.device());
        RLPT_LOG_INFO("rollout: generating with {} weights (rollout.dtype), a copy of the {} policy",
                      model::dtype_name(want), model::dtype_name(policy.dtype()));
    } else if (r.cast_from != now) {
        auto from = policy.named_parameters(/*recurse=*/true);
        torch::NoGradGuard no_grad;
        for (auto& p : r.cast->named_parameters(/*recurse=*/true)) p.value().copy_(from[p.key()]);
    }
    r.cast_from = now;
    return *r.cast;
}

RolloutWorker& ready(RoleWorker& w) {
    auto& r = static_cast<RolloutWorker&>(w);
    RLPT_CHECK_KIND(InternalError, r.policy != nullptr, "rollout used before kInit");
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
            r.policy = shared;  // colocated with the actor: same tensors, no copy, no sync
            return Batch(0);
        }
        // The hybrid engine: our own layout, no storage until a generation needs it.
        const auto device = protocol::handler_device();
        r.actor = shared;
        r.policy = std::make_shared<detail::SharedPolicy>();
        r.policy->model = std::make_shared<model::CausalLM>(shared->model->args(), shared->model->dtype(), device,
                                                            detail::tensor_parallel(ctx, device));
        weights::release_parameter_storage(*r.policy->model);
        return Batch(0);
    }
    r.policy = std::make_shared<detail::SharedPolicy>();
    const auto device = protocol::handler_device();
    r.policy->model =
        detail::build_policy(model_settings(c), device, args.vocab_size, detail::tensor_parallel(ctx, device));
    r.own_copy = true;
    // Our own copy, filled by the weight sync: in a shared arena, so a same-host actor rank writes
    // it with memcpy through a mapping (rlpt/comm/shared_arena.h). Before anything caches addresses.
    if (device.is_cpu()) {
        auto params = detail::parameter_list(*r.policy->model);
        comm::share_tensors(params, "rlpt-rollout-params");
    }
    return Batch(0);
}

Batch generate(RoleWorker& w, WorkerContext& ctx, const Batch& in) {
    RolloutWorker& r = ready(w);
    const auto t0 = std::chrono::steady_clock::now();
    // Colocated with a ZeRO-3 actor: the full weights for the whole generation (its number of
    // decode steps differs per rank, so no per-layer gathers), freed when it returns.
    const auto full = model::hold_full_parameters(*r.policy->model);
    const ReshardedWindow resharded(r, ctx);
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
    auto g =
        r.generator->fn(generation_model(r, *ctx.config), prompts, seeds, sp, ctx.config->rollout.max_num_seqs, r.gen);
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
    std::vector<int64_t> reasons, versions(static_cast<size_t>(B), static_cast<int64_t>(r.policy->version));
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
    if (!r.own_copy) return Batch(0);  // colocated: the actor's tensors are ours
    uint64_t version = r.policy->version;
    detail::sync_policy_weights(r.sync, weight_sync_settings(*ctx.config), ctx, *r.policy->model, version);
    r.policy->version = version;
    ++r.syncs;
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
