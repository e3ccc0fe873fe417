#include "rlpt/app/role_settings.h"

#include "rlpt/algo/agg_loss.h"
#include "rlpt/app/registry.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"
#include "rlpt/roles/reference.h"
#include "rlpt/roles/reward_model.h"
#include "rlpt/roles/rollout.h"
#include "rlpt/rollout/stop_strings.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::app {
namespace {

bool sft_mode(const Config& c) { return c.trainer.mode == "sft"; }

// The actor's optimizer: actor.optim, or sft.optim in SFT mode.
const OptimConfig& actor_optim(const Config& c) { return sft_mode(c) ? c.sft.optim : c.actor.optim; }

roles::ModelSettings model_settings(const Config& c) {
    return {c.model.path, c.model.dtype, c.model.head_precision, c.model.builtin};
}

roles::WeightSyncSettings weight_sync_settings(const Config& c) {
    return {c.rollout.weight_sync.backend, c.rollout.weight_sync.bucket_mb, c.trainer.call_timeout_s,
            actor_optim(c).zero_stage};
}

roles::ActorSettings actor_settings(const Config& c) {
    const ActorConfig& a = c.actor;
    roles::ActorSettings s;
    s.model = model_settings(c);
    s.optim = actor_optim(c);
    s.optim_key = sft_mode(c) ? "sft.optim" : "actor.optim";
    s.ppo = {a.ppo_epochs, a.ppo_micro_batch_size_per_rank, a.use_dynamic_bsz, a.ppo_max_token_len_per_rank,
             a.loss_scale_factor};
    s.loss.loss_mode = a.loss_mode;
    s.loss.policy = a.policy_loss;
    s.loss.policy.loss_agg_mode = algo::parse_agg_mode(a.loss_agg_mode);
    s.loss.entropy_coeff = a.entropy_coeff;
    s.loss.use_kl_loss = a.use_kl_loss;
    s.loss.kl_loss_coef = a.kl_loss_coef;
    s.loss.kl_loss_type = a.kl_loss_type;
    s.log_prob_entropy = a.calculate_entropy || a.entropy_coeff != 0;
    s.log_prob_micro_batch_size_per_rank = a.log_prob_micro_batch_size_per_rank;
    s.sft_micro_batch_size_per_rank = c.sft.micro_batch_size_per_rank;
    s.seed = c.trainer.seed;
    s.weight_sync = weight_sync_settings(c);
    s.router_aux_loss_coef = a.router_aux_loss_coef;
    s.router_replay = a.router_replay_mode;
    return s;
}

// The keys the critic shares with the actor come from actor.* (as verl's critic inherits them).
roles::CriticSettings critic_settings(const Config& c) {
    const ActorConfig& a = c.actor;
    roles::CriticSettings s;
    s.policy = model_settings(c);
    s.model_path = c.critic.model_path;
    s.optim = c.critic.optim;
    s.ppo = {c.critic.ppo_epochs.value_or(a.ppo_epochs), c.critic.ppo_micro_batch_size_per_rank, a.use_dynamic_bsz,
             a.ppo_max_token_len_per_rank, a.loss_scale_factor};
    s.loss_agg_mode = algo::parse_agg_mode(a.loss_agg_mode);
    s.cliprange_value = c.critic.cliprange_value;
    s.forward_micro_batch_size_per_rank = c.critic.forward_micro_batch_size_per_rank;
    s.seed = c.trainer.seed;
    return s;
}

roles::ReferenceSettings reference_settings(const Config& c) {
    return {model_settings(c), c.ref.log_prob_micro_batch_size_per_rank, reference_zero_stage(c),
            c.actor.optim.fsdp_size};
}

roles::RewardModelSettings reward_model_settings(const Config& c) {
    RLPT_CHECK_KIND(ConfigError, !c.reward_model.model_path.empty(),
                    "reward_model.enable=true needs reward_model.model_path (a value-head Hugging Face model)");
    return {c.reward_model.model_path, c.model.dtype, c.reward_model.micro_batch_size_per_rank};
}

roles::RolloutSettings rollout_settings(const Config& c) {
    const RolloutConfig& r = c.rollout;
    roles::RolloutSettings s;
    s.model = model_settings(c);
    s.dtype = r.dtype;
    s.generator = r.generator;
    s.max_num_seqs = r.max_num_seqs;
    s.max_num_batched_tokens = r.max_num_batched_tokens;
    s.generators.beam_search = {r.beam_search.beam_width, r.beam_search.length_penalty};
    for (const auto& st : r.stages) {
        rollout::StageSpec spec;
        spec.generator = st.generator;
        spec.max_tokens = st.max_tokens;
        spec.stop = st.stop;
        spec.share_across_samples = st.share_across_samples;
        s.generators.stages.push_back(std::move(spec));
    }
    s.generators.multi_turn = r.multi_turn;
    s.generators.chat_template = c.model.chat_template;
    s.generators.enable_thinking = c.model.apply_chat_template_kwargs.enable_thinking;
    s.weight_sync = weight_sync_settings(c);
    return s;
}

// One row per role with settings.
template <auto Resolve>
Batch encoded(const Config& c) {
    return protocol::settings_batch(Resolve(c));
}
const std::map<std::string, Batch (*)(const Config&)> kResolvers{
    {"actor", encoded<actor_settings>},         {"critic", encoded<critic_settings>},
    {"reference", encoded<reference_settings>}, {"reward_model", encoded<reward_model_settings>},
    {"rollout", encoded<rollout_settings>},
};

}  // namespace

protocol::ProtocolSettings protocol_settings(const Config& c) {
    return {c.trainer.call_timeout_s, c.trainer.stall_warn_s};
}

std::map<std::string, Batch> resolve_role_settings(const Config& c, const std::vector<std::string>& roles) {
    std::map<std::string, Batch> out;
    for (const auto& role : roles) {
        auto it = kResolvers.find(role);
        if (it != kResolvers.end()) out[role] = it->second(c);
    }
    return out;
}

void give_role_settings(protocol::Controller& ctl, const Config& c) {
    std::vector<std::string> placed;
    for (const auto& spec : role_registry())
        if (ctl.has_role(spec.name)) placed.push_back(spec.name);
    for (auto& [role, settings] : resolve_role_settings(c, placed)) ctl.set_role_settings(role, std::move(settings));
}

Batch rollout_init_batch(const protocol::InitArgs& args, const Config& c, const tokenizer::Tokenizer& tok) {
    auto texts = rollout::token_texts(tok);
    Batch b(static_cast<int64_t>(texts.size()));
    b.set_strings("token_text", std::move(texts));
    roles::RolloutInitArgs appends;
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

int64_t reference_zero_stage(const Config& c) {
    if (c.ref.zero_stage >= 0) return c.ref.zero_stage;
    return c.actor.optim.zero_stage == 3 ? 3 : 0;
}

void check_zero_shard_groups(const Config& c, const comm::Placement& p) {
    comm::zero_shard_group_size(p, "actor", actor_optim(c).fsdp_size,
                                sft_mode(c) ? "sft.optim.fsdp_size" : "actor.optim.fsdp_size");
    comm::zero_shard_group_size(p, "critic", c.critic.optim.fsdp_size, "critic.optim.fsdp_size");
    if (reference_zero_stage(c) == 3)
        comm::zero_shard_group_size(p, "reference", c.actor.optim.fsdp_size,
                                    "actor.optim.fsdp_size (for the reference)");
}

}  // namespace rlpt::app
