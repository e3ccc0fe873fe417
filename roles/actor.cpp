// The actor: the policy model, its training engine, and what moves its weights around.
#include "rlpt/roles/actor.h"

#include <fmt/ranges.h>

#include "model_setup.h"
#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/value_loss.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/core/log.h"
#include "rlpt/core/rng_streams.h"
#include "role_common.h"
#include "train_common.h"

namespace rlpt::roles {
namespace {

using protocol::RoleWorker;
using protocol::WorkerContext;

class ActorWorker : public RoleWorker {
  public:
    ActorSettings settings;                        // from kInit
    std::shared_ptr<detail::SharedPolicy> policy;  // also published to colocated roles
    std::unique_ptr<engine::TrainEngine> engine;
    detail::PolicySync sync;
};

ActorWorker& self_of(RoleWorker& w) { return static_cast<ActorWorker&>(w); }

// The routing of one micro-batch's forward of a mixture-of-experts policy (null for a dense one):
// replays `replay_column`'s routes when the batch has it, records the router's own top-k (for
// actor/router_mismatch_frac against the rollout's routes) and, for the load-balancing loss, the
// choices and probabilities. Installed on the policy's backbone until destroyed.
class MicroRouting {
  public:
    MicroRouting(model::CausalLM& policy, const Batch& mb, const engine::SequenceBatch& seq,
                 const std::string& replay_column, bool record_for_loss)
        : backbone_(policy.backbone()), moe_(policy.args().num_moe_layers() > 0) {
        if (!moe_) return;
        if (mb.has("routed_experts")) rollout_routes_ = detail::sequence_routes(mb, "routed_experts", seq);
        if (!replay_column.empty()) {
            RLPT_CHECK(mb.has(replay_column),
                       "actor.router_replay: the batch has no '{}' column to replay (the rollout records its routes "
                       "with rollout.generator sampler)",
                       replay_column);
            routing_.replay =
                replay_column == "routed_experts" ? rollout_routes_ : detail::sequence_routes(mb, replay_column, seq);
        }
        routing_.record_choices = true;
        routing_.record_preferred = rollout_routes_.defined();
        routing_.record_probs = record_for_loss;
        backbone_.set_routing(&routing_);
    }
    ~MicroRouting() {
        if (moe_) backbone_.set_routing(nullptr);
    }
    MicroRouting(const MicroRouting&) = delete;
    MicroRouting& operator=(const MicroRouting&) = delete;
    bool moe() const { return moe_; }
    const model::MoeRouting& routing() const { return routing_; }
    // The rollout's routes of the micro-batch ([rows·T, L, k]; undefined without routed_experts).
    const torch::Tensor& rollout_routes() const { return rollout_routes_; }

  private:
    model::Backbone& backbone_;
    bool moe_;
    model::MoeRouting routing_;
    torch::Tensor rollout_routes_;
};

// The column a forward replays under actor.router_replay.mode ("" for none): R3 the rollout's
// routes in both passes, R2 the old-log-prob pass's routes in the update.
std::string replay_column(const ActorSettings& s, bool update) {
    if (s.router_replay == "R3") return "routed_experts";
    if (s.router_replay == "R2" && update) return "old_routed_experts";
    return "";
}

// Routes [rows·T, L, k] of a trimmed micro-batch back to the batch's [rows, P+R, L, k] columns
// (-1 outside), int16 like the rollout's.
torch::Tensor batch_routes(const torch::Tensor& routes, const engine::SequenceBatch& seq, int64_t total_columns) {
    const int64_t rows = seq.input_ids.size(0), t = seq.input_ids.size(1);
    auto out = torch::full({rows, total_columns, routes.size(1), routes.size(2)}, -1, torch::kInt16);
    out.slice(1, seq.first_column, seq.first_column + t).copy_(routes.view({rows, t, routes.size(1), routes.size(2)}));
    return out;
}

ActorWorker& ready(RoleWorker& w) {
    ActorWorker& a = self_of(w);
    RLPT_CHECK_KIND(InternalError, a.engine != nullptr, "actor used before kInit");
    return a;
}

Batch init(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::InitWith<ActorSettings>& args) {
    ActorWorker& a = self_of(w);
    a.settings = args.settings;
    const ActorSettings& s = a.settings;
    auto device = protocol::handler_device();
    a.policy = std::make_shared<detail::SharedPolicy>();
    a.policy->model = detail::build_policy(s.model, device, args.run.vocab_size, detail::tensor_parallel(ctx, device));
    const model::ModelArgs& margs = a.policy->model->args();
    RLPT_CHECK_KIND(ConfigError,
                    margs.num_moe_layers() > 0 || (s.router_replay == "disabled" && s.router_aux_loss_coef == 0),
                    "actor.router_replay.mode {} / actor.router_aux_loss_coef {} need a mixture-of-experts model; "
                    "{} is a dense {}",
                    s.router_replay, s.router_aux_loss_coef, s.model.path.empty() ? "the built-in model" : s.model.path,
                    margs.architecture());
    auto opts = detail::optim_options(s.optim, args.run.total_steps);
    opts.shard_group_size =
        comm::zero_shard_group_size(ctx.topology->placement(), "actor", s.optim.fsdp_size, s.optim_key + ".fsdp_size");
    a.engine =
        std::make_unique<engine::TrainEngine>(a.policy->model, ctx.comms->dp, opts, streams::actor_engine_seed(s.seed),
                                              detail::engine_tp_info(ctx, *a.policy->model,
                                                                     a.policy->model->tp_layout()));
    a.policy->held = [engine = a.engine.get()] { return engine->held_parameters(); };
    a.policy->lend_scratch = [engine = a.engine.get()] { return engine->lend_gradient_memory(); };
    a.policy->comm = &ctx.comms->role;
    ctx.shared->put(detail::kSharedPolicy, a.policy);
    int64_t params = 0;
    for (const auto& p : a.policy->model->parameters()) params += p.numel();
    if (ctx.comms->role_rank == 0) {
        RLPT_LOG_INFO("actor: {} parameters on this rank ({}), {} on {}, dp={} tp={}{}", params,
                      s.model.path.empty() ? "built-in" : s.model.path, s.model.dtype, device.str(), ctx.dp_size(),
                      a.policy->model->tp_layout().tp,
                      a.engine->shard_group_size() < ctx.dp_size()
                          ? fmt::format(", ZeRO-{} hybrid shard: shard group {} of {} DP ranks", opts.zero_stage,
                                        a.engine->shard_group_size(), ctx.dp_size())
                          : "");
    }
    return Batch(0);
}

Batch compute_log_prob(RoleWorker& w, WorkerContext&, const Batch& in, const ActorLogProbArgs& args) {
    ActorWorker& a = ready(w);
    torch::NoGradGuard no_grad;
    const bool entropy = a.settings.log_prob_entropy;
    std::vector<detail::ForwardColumn> columns{{"old_log_probs"}};
    if (entropy) columns.push_back({"entropy"});
    if (args.sum_pi_squared) columns.push_back({"sum_pi_squared"});
    // Mixture-of-experts policies: the micro-batches' routes, in row order, kept as
    // old_routed_experts for R2.
    const std::string replay = replay_column(a.settings, /*update=*/false);
    std::vector<torch::Tensor> routes;
    const int64_t micro = a.settings.log_prob_micro_batch_size_per_rank;
    Batch out =
        detail::forward_micro_batches(in, micro, columns, [&](const Batch& mb, const engine::SequenceBatch& seq) {
            MicroRouting routing(*a.policy->model, mb, seq, replay, /*record_for_loss=*/false);
            auto lp = engine::compute_log_probs(*a.policy->model, seq, args.temperature, entropy, args.sum_pi_squared);
            routes.push_back(routing.moe()
                                 ? batch_routes(routing.routing().chosen_stacked(), seq, in.at("input_ids").size(1))
                                 : torch::Tensor());
            std::vector<torch::Tensor> outs{lp.log_probs};
            if (entropy) outs.push_back(lp.entropy);
            if (args.sum_pi_squared) outs.push_back(lp.sum_pi_squared);
            return outs;
        });
    a.engine->release_parameters();  // ZeRO-3: the root unit gathered by the forwards
    if (a.settings.router_replay == "R2") {
        const auto& m = a.policy->model->args();
        out.set("old_routed_experts", routes.empty() ? torch::zeros({0, in.at("input_ids").size(1), m.num_moe_layers(),
                                                                     m.num_experts_per_tok},
                                                                    torch::kInt16)
                                                     : torch::cat(routes, 0));
    }
    return out;
}

Batch update(RoleWorker& w, WorkerContext& ctx, const Batch& in, const ActorUpdateArgs& args) {
    ActorWorker& a = ready(w);
    const ActorSettings& s = a.settings;
    const comm::Communicator& dp = ctx.comms->dp;
    algo::ActorLossConfig lc = s.loss;  // its global_batch_info is set per mini-batch
    const bool with_entropy = lc.entropy_coeff != 0;
    const double aux_coef = s.router_aux_loss_coef;

    detail::PpoLoop loop = detail::make_ppo_loop("actor", args, s.ppo, "actor/loss");
    loop.skipped_steps_metric = true;
    Batch metrics(0);
    detail::ppo_update_loop(
        *a.engine, dp, ctx.dp_size(), in, loop, metrics,
        [&](const Batch& mb, const algo::GlobalBatchInfo& info, int64_t micro) {
            lc.policy.global_batch_info = info;
            int64_t r = 0;
            auto seq = detail::trimmed_sequences(mb, &r);
            MicroRouting routing(*a.policy->model, mb, seq, replay_column(s, /*update=*/true), aux_coef > 0);
            auto lp = engine::compute_log_probs(*a.policy->model, seq, args.temperature, with_entropy);
            algo::ActorLossInputs li;
            li.policy.log_prob = lp.log_probs;
            li.policy.old_log_prob = detail::first_columns(mb.at("old_log_probs"), r);
            li.policy.advantages = detail::first_columns(mb.at("advantages"), r);
            li.policy.response_mask = detail::first_columns(mb.at("response_mask"), r);
            // Losses that draw (clip_cov) get a generator keyed by run seed, optimizer step (restored
            // on resume), DP rank and micro-batch: the same draws after a resume, none from the global RNG.
            li.policy.generator = at::detail::createCPUGenerator(
                detail::stream_seed({static_cast<uint64_t>(s.seed), static_cast<uint64_t>(a.engine->global_step()),
                                     static_cast<uint64_t>(dp.rank()), static_cast<uint64_t>(micro)}));
            if (with_entropy) li.entropy = lp.entropy;
            if (lc.use_kl_loss) li.ref_log_prob = detail::first_columns(mb.at("ref_log_prob"), r);
            if (mb.has("rollout_is_weights"))  // algorithm.rollout_correction.rollout_is
                li.policy.rollout_is_weights = detail::first_columns(mb.at("rollout_is_weights"), r);
            auto out = algo::compute_actor_loss(li, lc);
            if (routing.moe()) {
                const auto& m = a.policy->model->args();
                const auto tokens = seq.attention_mask.reshape({-1});
                if (routing.rollout_routes().defined()) {  // the router's own choice against the rollout's
                    const auto mm =
                        model::route_mismatch(routing.rollout_routes(), routing.routing().preferred_stacked(), tokens);
                    if (mm.counted > 0) metrics.add_metric("actor/router_mismatch_frac", mm.fraction());
                }
                if (aux_coef > 0) {
                    // transformers' load-balancing loss over this micro-batch's real tokens, weighted
                    // like the policy loss's rows: its micro-batches and DP ranks average to the
                    // mini-batch's (the gradients are averaged over DP).
                    const auto aux = model::load_balancing_loss(routing.routing(), tokens, m.num_experts);
                    const double share = static_cast<double>(seq.input_ids.size(0)) * info.dp_size /
                                         std::max(1.0, args.global_mini_batch_rows);
                    out.loss = out.loss + aux * (aux_coef * share);
                    metrics.add_metric("actor/router_aux_loss", aux.item<double>());
                }
            }
            out.loss.backward();
            for (const auto& [k, v] : out.metrics) {
                if (k != "actor/pg_loss" && k != "actor/entropy_loss" && k != "actor/kl_loss") metrics.add_metric(k, v);
            }
            // Global shares: summed over micro-batches, averaged over ranks and mini-batches.
            for (const char* k : {"actor/pg_loss", "actor/entropy_loss", "actor/kl_loss"}) {
                auto it = out.metrics.find(k);
                if (it != out.metrics.end()) metrics.add_metric(std::string(k) + "#mb", it->second, Reduce::kSum);
            }
            return out.loss.item<double>();
        });
    // Turn the per-micro-batch sums into one value per rank and mini-batch (then mean).
    const double n_steps = static_cast<double>(args.num_mini_batches * s.ppo.epochs);
    for (const char* k : {"actor/pg_loss", "actor/entropy_loss", "actor/kl_loss"}) {
        auto it = metrics.metrics().find(std::string(k) + "#mb");
        if (it == metrics.metrics().end()) continue;
        double total = it->second.value();
        metrics.metrics().erase(it);
        metrics.add_metric(k, total / n_steps);
    }
    a.policy->version = static_cast<uint64_t>(a.engine->global_step());
    return metrics;
}

Batch sft_step(RoleWorker& w, WorkerContext& ctx, const Batch& in, const SftStepArgs& args) {
    ActorWorker& a = ready(w);
    const double global_tokens = args.global_tokens;
    RLPT_CHECK(global_tokens > 0, "sft step: the global batch has no loss tokens");
    const int64_t micro = a.settings.sft_micro_batch_size_per_rank;
    a.engine->zero_grad();
    double loss = 0;
    for (const Batch& mb : in.split(std::max<int64_t>(1, micro))) {
        auto nll = engine::sft_token_nll_sum(*a.policy->model, mb.at("input_ids"), mb.at("attention_mask"),
                                             mb.at("position_ids"), mb.at("loss_mask"));
        // A share of the global token mean, times dp_size: the engine averages over ranks.
        auto l = nll * (static_cast<double>(ctx.dp_size()) / global_tokens);
        l.backward();
        loss += l.item<double>();
    }
    auto st = a.engine->step();
    Batch out(0);
    out.add_metric("sft/loss", loss);
    out.add_metric("sft/grad_norm", st.grad_norm);
    out.add_metric("sft/lr", st.lr);
    a.policy->version = static_cast<uint64_t>(a.engine->global_step());
    return out;
}

Batch send_weights(RoleWorker& w, WorkerContext& ctx, const Batch& in) {
    ActorWorker& a = ready(w);
    uint64_t version = static_cast<uint64_t>(in.meta_int("version", static_cast<int64_t>(a.policy->version)));
    // ZeRO-3: every actor rank sends from its shards (nothing gathered). Other stages: the first
    // block sends its whole slices.
    detail::sync_policy_weights(a.sync, a.settings.weight_sync, ctx, *a.policy->model, version, a.policy->held);
    return Batch(0);
}

Batch save(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::DirArgs& args) {
    ActorWorker& a = ready(w);
    const auto version = static_cast<int64_t>(a.policy->version);
    return detail::save_engine_checkpoint(*a.engine, args.dir, "actor", ctx.comms->role_rank,
                                          [&](ckpt::H5Writer& writer) {
                                              writer.set_int_attr("actor/weight_version", version);
                                          });
}

Batch load(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::DirArgs& args) {
    ActorWorker& a = ready(w);
    const std::string& dir = args.dir;
    const detail::ResliceTarget reslice = detail::reslice_target(*a.policy->model);
    detail::load_engine_checkpoint(
        *a.engine, dir, "actor", ctx.comms->role_rank, ctx.comms->role,
        [&](const ckpt::H5Reader& reader) {
            a.policy->version = static_cast<uint64_t>(reader.int_attr("actor/weight_version"));
        },
        &reslice);
    return Batch(0);
}

Batch export_hf(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::DirArgs& args) {
    ActorWorker& a = ready(w);
    // Streamed: one full tensor at a time. Under ZeRO-3 each tensor's slices go to DP rank 0
    // only (TrainEngine::gather_parameter); with tp > 1 the first DP block then gathers it over
    // the block and its rank 0 writes it. No rank holds more than one full tensor beyond its shards.
    const std::string& dir = args.dir;
    engine::TrainEngine& eng = *a.engine;
    std::exception_ptr err;
    if (ctx.comms->dp_rank == 0) {
        try {
            model::save_pretrained(*a.policy->model, dir, model::kDefaultMaxShardBytes,
                                   [&](size_t i) { return eng.gather_parameter(i, 0); });
        } catch (...) {
            err = std::current_exception();
        }
    } else {
        for (size_t i = 0; i < eng.num_parameter_tensors(); ++i) eng.gather_parameter(i, 0);
    }
    if (ctx.comms->role.allreduce_min_i64(err ? 0 : 1) == 0) {
        if (err) std::rethrow_exception(err);
        throw IoError(fmt::format("exporting the actor to {} failed on another actor rank", dir));
    }
    return Batch(0);
}

std::unique_ptr<RoleWorker> make_actor(WorkerContext&) { return std::make_unique<ActorWorker>(); }

}  // namespace

const protocol::RoleSpec& actor_spec() {
    static const protocol::RoleSpec spec = [] {
        using protocol::method;
        using protocol::tensors;
        const auto sequences = tensors("input_ids", "attention_mask", "position_ids", "responses");
        protocol::RoleSpec s;
        s.name = "actor";
        s.method_count = static_cast<uint16_t>(ActorMethod::kCount);
        s.factory = make_actor;
        s.methods = {
            detail::ping_spec(),
            method<ActorMethod::kInit, init>("init").receives_settings(),
            method<ActorMethod::kComputeLogProb, compute_log_prob>("compute_log_prob")
                .split_over_dp()
                .takes(sequences)
                .concat_outputs(tensors("old_log_probs")),
            method<ActorMethod::kUpdate, update>("update")
                .split_over_dp()
                .unpadded()
                .takes(sequences)
                .takes(tensors("response_mask", "old_log_probs", "advantages"))
                .concat_outputs({}),
            method<ActorMethod::kSftStep, sft_step>("sft_step")
                .split_over_dp()
                .unpadded()
                .takes(tensors("input_ids", "attention_mask", "position_ids", "loss_mask"))
                .concat_outputs({}),
            method(ActorMethod::kSendWeights, "send_weights", send_weights),
            method<ActorMethod::kSave, save>("save").every_output({protocol::string_field("file")}),
            method<ActorMethod::kLoad, load>("load"),
            method<ActorMethod::kExport, export_hf>("export"),
        };
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
