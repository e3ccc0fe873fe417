#include "update_inputs.h"

#include <string>
#include <vector>

#include "rlpt/algo/seqlen_balancing.h"
#include "rlpt/core/error.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"

namespace rlpt::app {

Batch seq_columns(const Batch& b) { return b.select({"input_ids", "attention_mask", "position_ids", "responses"}); }

Batch arrange_for_update(const Batch& b, int64_t dp, int64_t num_mini, bool balance) {
    const int64_t rows = b.size() / num_mini, per = rows / dp;
    RLPT_CHECK(rows * num_mini == b.size() && per * dp == rows, "{} rows do not form {} mini-batches over {} ranks",
               b.size(), num_mini, dp);
    auto lens_t = b.at("attention_mask").sum(1).to(torch::kInt64).contiguous();
    std::vector<std::vector<std::vector<int64_t>>> parts(static_cast<size_t>(num_mini));
    for (int64_t j = 0; j < num_mini; ++j) {
        std::vector<int64_t> lens(lens_t.data_ptr<int64_t>() + j * rows, lens_t.data_ptr<int64_t>() + (j + 1) * rows);
        algo::Partitions p;
        if (balance && dp > 1) {
            p = algo::get_seqlen_balanced_partitions(algo::calculate_workloads(lens), dp, true);
        } else {
            for (int64_t k = 0; k < dp; ++k) {
                std::vector<int64_t> part;
                for (int64_t i = k * per; i < (k + 1) * per; ++i) part.push_back(i);
                p.push_back(part);
            }
        }
        for (auto& part : p)
            for (auto& i : part) i += j * rows;
        parts[static_cast<size_t>(j)] = std::move(p);
    }
    std::vector<int64_t> order;
    for (int64_t k = 0; k < dp; ++k)
        for (int64_t j = 0; j < num_mini; ++j)
            for (int64_t i : parts[static_cast<size_t>(j)][static_cast<size_t>(k)]) order.push_back(i);
    return b.index(order);
}

UpdateSettings update_settings(const Config& c, const RunPlan& plan, const protocol::Controller& ctl) {
    UpdateSettings s;
    s.prompts_per_step = c.data.train_batch_size;
    s.n = c.rollout.n;
    s.actor_mini_batch = c.actor.ppo_mini_batch_size;
    s.critic_mini_batch = c.critic.ppo_mini_batch_size.value_or(c.actor.ppo_mini_batch_size);
    s.actor_kl_loss = c.actor.use_kl_loss;
    s.balance_batch = c.trainer.balance_batch;
    s.temperature = c.rollout.temperature;
    s.actor_dp = ctl.dp_size("actor");
    if (plan.has("critic")) s.critic_dp = ctl.dp_size("critic");
    return s;
}

Batch UpdateInputs::critic(const Batch& batch) const {
    const int64_t tb = s_.prompts_per_step, cmb = s_.critic_mini_batch;
    Batch in = arrange_for_update(batch.select({"input_ids", "attention_mask", "position_ids", "responses",
                                                "response_mask", "values", "returns"}),
                                  s_.critic_dp, tb / cmb, s_.balance_batch);
    protocol::encode_args(roles::CriticUpdateArgs{tb / cmb, static_cast<double>(cmb * s_.n)}, in);
    return in;
}

Batch UpdateInputs::actor(const Batch& batch) const {
    const int64_t tb = s_.prompts_per_step, mb = s_.actor_mini_batch;
    std::vector<std::string> cols{"input_ids",     "attention_mask", "position_ids", "responses",
                                  "response_mask", "old_log_probs",  "advantages"};
    if (s_.actor_kl_loss) cols.push_back("ref_log_prob");
    if (batch.has("rollout_is_weights")) cols.push_back("rollout_is_weights");
    for (const char* routes : {"routed_experts", "old_routed_experts"})  // mixture-of-experts policies
        if (batch.has(routes)) cols.push_back(routes);
    Batch in = arrange_for_update(batch.select(cols), s_.actor_dp, tb / mb, s_.balance_batch);
    protocol::encode_args(roles::ActorUpdateArgs{s_.temperature, tb / mb, static_cast<double>(mb * s_.n)}, in);
    return in;
}

}  // namespace rlpt::app
