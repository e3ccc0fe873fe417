// Range and cross-field checks. Every failure names the key and where it was set; all failures
// are reported together (one line each), so one run of `rlpt check` shows every problem.
// Keys that pick an entry of a table (algorithm.adv_estimator, actor.policy_loss.loss_mode,
// placement.groups.*.roles, rollout.generator, rollout.multi_turn.builtin_tools,
// reward.scorer/scorers) are checked against the tables themselves by app::table_name_problems
// (src/app/check.cpp), and what the generator's row asks of the config by app::generator_problems,
// which `rlpt check` and the launch run next: the tables live above this torch-free library, and
// a copy of their names here would drift.
#include <algorithm>
#include <cmath>
#include <set>

#include "rlpt/algo/rollout_correction_spec.h"
#include "rlpt/config/config.h"
#include "rlpt/core/error.h"

namespace rlpt {
namespace {

class Checker {
  public:
    explicit Checker(const Config& c) : c_(c) {}

    template <typename... Args>
    void require(bool ok, const std::string& key, fmt::format_string<Args...> f, Args&&... args) const {
        if (ok) return;
        problems_.push_back(
            fmt::format("{}: {}: {}", origin_of(c_, key), key, fmt::format(f, std::forward<Args>(args)...)));
    }

    // Throws one ConfigError listing every problem found, one per line.
    void finish() const {
        if (problems_.empty()) return;
        std::string all;
        for (const auto& p : problems_) all += (all.empty() ? "" : "\n") + p;
        throw ConfigError(all);
    }

    void one_of(const std::string& value, const std::string& key, std::initializer_list<const char*> choices) const {
        one_of_range(value, key, choices);
    }

    template <typename Range>
    void one_of_range(const std::string& value, const std::string& key, const Range& choices) const {
        std::string list;
        for (const char* ch : choices) {
            if (value == ch) return;
            list += (list.empty() ? "" : ", ") + std::string(ch);
        }
        require(false, key, "'{}' is not one of: {}", value, list);
    }

    void stop_strings(const std::vector<std::string>& stop, const std::string& key) const {
        for (size_t i = 0; i < stop.size(); ++i)
            require(!stop[i].empty(), key, "entry {} is empty (it would end every response at once)", i);
    }

    // rollout.generator with its typed arguments: rollout.beam_search and rollout.stages.
    void rollout_program(const Config& c) const {
        const auto& r = c.rollout;
        positive(r.beam_search.beam_width, "rollout.beam_search.beam_width");
        require(std::isfinite(r.beam_search.length_penalty), "rollout.beam_search.length_penalty",
                "must be finite (got {})", r.beam_search.length_penalty);
        bool beams = r.generator == "beam_search";
        int64_t total = 0;
        for (size_t i = 0; i < r.stages.size(); ++i) {
            const auto& s = r.stages[i];
            const std::string key = fmt::format("rollout.stages[{}]", i);
            one_of(s.generator, key + ".generator", {"sampler", "beam_search"});
            positive(s.max_tokens, key + ".max_tokens");
            stop_strings(s.stop, key + ".stop");
            require(s.stop.empty() || s.generator != "beam_search", key + ".stop",
                    "stop strings are not supported on a beam_search stage (vLLM's beam search has none either)");
            beams = beams || s.generator == "beam_search";
            total += s.max_tokens;
        }
        if (r.generator == "multi_stage") {
            require(!r.stages.empty(), "rollout.stages", "generator multi_stage needs at least one stage");
            require(r.stop.empty(), "rollout.stop",
                    "is not used by generator multi_stage: give each stage its stop strings (rollout.stages[i].stop)");
            require(total <= c.data.max_response_length, "rollout.stages",
                    "the stages' max_tokens add up to {}, over data.max_response_length={}", total,
                    c.data.max_response_length);
        } else {
            require(r.stages.empty(), "rollout.stages",
                    "is set but rollout.generator is '{}' (stages need multi_stage)", r.generator);
        }
        if (r.generator == "beam_search")
            require(r.stop.empty(), "rollout.stop", "stop strings are not supported by beam_search (vLLM's has none)");
        if (beams) {
            for (const auto& [n, key] : {std::make_pair(r.n, "rollout.n"), std::make_pair(r.val.n, "rollout.val.n")})
                require(n <= r.beam_search.beam_width, key,
                        "{} samples per prompt with beam search of width rollout.beam_search.beam_width={}: a prompt's "
                        "samples are its best beams, so n must be <= beam_width",
                        n, r.beam_search.beam_width);
        }
    }

    void positive(int64_t v, const std::string& key) const { require(v > 0, key, "must be > 0 (got {})", v); }
    void non_negative(double v, const std::string& key) const { require(v >= 0, key, "must be >= 0 (got {})", v); }

    void optim(const OptimConfig& o, const std::string& p) const {
        require(o.lr >= 0, p + ".lr", "must be >= 0 (got {})", o.lr);
        require(o.beta1 >= 0 && o.beta1 < 1, p + ".beta1", "must be in [0, 1) (got {})", o.beta1);
        require(o.beta2 >= 0 && o.beta2 < 1, p + ".beta2", "must be in [0, 1) (got {})", o.beta2);
        require(o.eps > 0, p + ".eps", "must be > 0 (got {})", o.eps);
        non_negative(o.weight_decay, p + ".weight_decay");
        require(o.warmup_steps >= -1, p + ".warmup_steps", "must be -1 (use warmup_ratio) or >= 0 (got {})",
                o.warmup_steps);
        require(o.warmup_ratio >= 0 && o.warmup_ratio <= 1, p + ".warmup_ratio", "must be in [0, 1] (got {})",
                o.warmup_ratio);
        one_of(o.scheduler, p + ".scheduler", {"constant", "cosine"});
        require(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1, p + ".min_lr_ratio", "must be in [0, 1] (got {})",
                o.min_lr_ratio);
        require(o.num_cycles > 0, p + ".num_cycles", "must be > 0 (got {})", o.num_cycles);
        require(o.zero_stage >= 0 && o.zero_stage <= 3, p + ".zero_stage", "must be 0, 1, 2 or 3 (got {})",
                o.zero_stage);
        require(o.fsdp_size >= -1, p + ".fsdp_size",
                "must be -1 (all DP ranks), 0 (the DP ranks on a node) or a group size >= 1 (got {})", o.fsdp_size);
        require(o.fsdp_size == -1 || o.zero_stage >= 1, p + ".fsdp_size",
                "shards ZeRO state, but {}.zero_stage is 0 (set zero_stage 1-3, or fsdp_size -1)", p);
        require(o.grad_bucket_mb > 0, p + ".grad_bucket_mb", "must be > 0 (got {})", o.grad_bucket_mb);
    }

    // Runs a parser that throws ValueError; its message (minus a leading "<key>: ") becomes a problem.
    template <typename Fn>
    void parses(const std::string& key, Fn&& fn) const {
        try {
            fn();
        } catch (const ValueError& e) {
            std::string msg = e.message();
            if (msg.rfind(key + ": ", 0) == 0) msg = msg.substr(key.size() + 2);
            require(false, key, "{}", msg);
        }
    }

    void sampling(double temperature, double top_p, int64_t top_k, const std::string& p) const {
        non_negative(temperature, p + ".temperature");
        require(top_p > 0 && top_p <= 1, p + ".top_p", "must be in (0, 1] (got {})", top_p);
        require(top_k == -1 || top_k > 0, p + ".top_k", "must be -1 (off) or > 0 (got {})", top_k);
    }

  private:
    const Config& c_;
    mutable std::vector<std::string> problems_;
};

}  // namespace

void validate(const Config& c) {
    Checker k(c);
    const auto& t = c.trainer;
    k.one_of(t.mode, "trainer.mode", {"rl", "sft"});
    k.require(!t.experiment_name.empty() && t.experiment_name.find('/') == std::string::npos, "trainer.experiment_name",
              "must be a non-empty name without '/' (got '{}')", t.experiment_name);
    k.require(!t.output_dir.empty(), "trainer.output_dir", "must not be empty");
    k.positive(t.total_epochs, "trainer.total_epochs");
    if (t.total_training_steps) k.positive(*t.total_training_steps, "trainer.total_training_steps");
    k.require(t.export_hf_freq == -1 || t.export_hf_freq > 0, "trainer.export_hf_freq",
              "must be -1 (never) or > 0 (got {})", t.export_hf_freq);
    k.require(t.save_freq == -1 || t.save_freq > 0, "trainer.save_freq", "must be -1 (never) or > 0 (got {})",
              t.save_freq);
    k.require(t.test_freq == -1 || t.test_freq > 0, "trainer.test_freq", "must be -1 (never) or > 0 (got {})",
              t.test_freq);
    k.require(!t.resume.empty(), "trainer.resume", "must be auto, disable or a checkpoint directory");
    k.positive(t.max_checkpoints, "trainer.max_checkpoints");
    k.require(t.critic_warmup >= 0, "trainer.critic_warmup", "must be >= 0 (got {})", t.critic_warmup);
    k.one_of(t.log_level, "trainer.log_level", {"trace", "debug", "info", "warn", "error", "off"});
    k.one_of(t.device_collectives, "trainer.device_collectives", {"auto", "nccl", "mpi"});
    k.require(t.threads_per_rank >= 0, "trainer.threads_per_rank", "must be >= 0 (got {})", t.threads_per_rank);
    k.require(t.call_timeout_s > 0, "trainer.call_timeout_s", "must be > 0 (got {})", t.call_timeout_s);
    k.require(t.stall_warn_s > 0, "trainer.stall_warn_s", "must be > 0 (got {})", t.stall_warn_s);
    for (const auto& l : t.logger) k.one_of(l, "trainer.logger", {"console", "jsonl", "tensorboard"});

    // Placement: names and shapes here; whether it fits the world size is checked by
    // compute_placement() on every rank.
    std::set<std::string> seen;
    k.require(!c.placement.groups.empty(), "placement.groups", "must list at least one group of roles");
    for (size_t g = 0; g < c.placement.groups.size(); ++g) {
        const auto& grp = c.placement.groups[g];
        std::string p = fmt::format("placement.groups.{}", g);
        k.require(!grp.roles.empty(), p + ".roles", "must name at least one role");
        for (const auto& r : grp.roles) {
            k.require(seen.insert(r).second, p + ".roles", "role '{}' appears in more than one group", r);
        }
        bool auto_ranks = grp.ranks == "auto";
        bool count = !grp.ranks.empty() && grp.ranks.find_first_not_of("0123456789") == std::string::npos;
        k.require(auto_ranks || (count && std::stoll(grp.ranks) > 0), p + ".ranks",
                  "must be a positive rank count or 'auto' (got '{}')", grp.ranks);
        k.positive(grp.model_parallel_size, p + ".model_parallel_size");
    }

    const auto& m = c.model;
    k.one_of(m.dtype, "model.dtype", {"float32", "bfloat16"});
    k.one_of(m.head_precision, "model.head_precision", {"fp32", "tf32", "bf16"});
    k.one_of(m.device, "model.device", {"auto", "cpu", "cuda"});
    k.one_of(m.chat_template, "model.chat_template", {"none", "qwen2", "llama3", "qwen3"});
    k.require(m.apply_chat_template_kwargs.enable_thinking || m.chat_template == "qwen3",
              "model.apply_chat_template_kwargs.enable_thinking",
              "false needs model.chat_template qwen3 (the {} template has no thinking switch)", m.chat_template);
    const auto& b = m.builtin;
    k.positive(b.hidden_size, "model.builtin.hidden_size");
    k.positive(b.num_layers, "model.builtin.num_layers");
    k.positive(b.num_heads, "model.builtin.num_heads");
    k.positive(b.num_kv_heads, "model.builtin.num_kv_heads");
    if (b.num_heads > 0 && b.num_kv_heads > 0) {  // (problems are collected: guard the divisions)
        k.require(b.hidden_size % b.num_heads == 0, "model.builtin.hidden_size",
                  "must be divisible by num_heads {} (got {})", b.num_heads, b.hidden_size);
        k.require(b.num_heads % b.num_kv_heads == 0, "model.builtin.num_kv_heads", "must divide num_heads {} (got {})",
                  b.num_heads, b.num_kv_heads);
        k.require((b.hidden_size / b.num_heads) % 2 == 0, "model.builtin.hidden_size",
                  "head size hidden_size/num_heads must be even for rotary embeddings (got {})",
                  b.hidden_size / b.num_heads);
    }
    k.positive(b.intermediate_size, "model.builtin.intermediate_size");
    k.positive(b.max_position, "model.builtin.max_position");
    k.require(b.rope_theta > 0, "model.builtin.rope_theta", "must be > 0 (got {})", b.rope_theta);

    const auto& d = c.data;
    k.positive(d.train_batch_size, "data.train_batch_size");
    k.require(d.val_batch_size == -1 || d.val_batch_size > 0, "data.val_batch_size",
              "must be -1 (all at once) or > 0 (got {})", d.val_batch_size);
    k.positive(d.max_prompt_length, "data.max_prompt_length");
    k.positive(d.max_response_length, "data.max_response_length");
    k.one_of(d.truncation, "data.truncation", {"error", "left", "right"});
    k.one_of(d.answer_extract, "data.answer_extract", {"", "gsm8k"});
    if (d.train_files.empty()) {
        k.one_of(d.builtin.task, "data.builtin.task", {"arithmetic", "arithmetic_tools"});
        k.require(d.builtin.tool_demo_rate >= 0 && d.builtin.tool_demo_rate <= 1, "data.builtin.tool_demo_rate",
                  "must be in [0, 1] (got {})", d.builtin.tool_demo_rate);
        k.require(d.builtin.task != "arithmetic_tools" ||
                      (!d.builtin.reversed_answer && d.builtin.demo_carry_error_rate == 0),
                  "data.builtin.task",
                  "arithmetic_tools answers in plain order as the calculator does: it takes neither "
                  "reversed_answer nor demo_carry_error_rate");
        k.positive(d.builtin.num_train, "data.builtin.num_train");
        k.positive(d.builtin.num_val, "data.builtin.num_val");
        k.require(d.builtin.min_digits >= 1 && d.builtin.min_digits <= d.builtin.max_digits &&
                      d.builtin.max_digits <= 9,
                  "data.builtin.max_digits", "need 1 <= min_digits <= max_digits <= 9 (got {}..{})",
                  d.builtin.min_digits, d.builtin.max_digits);
        k.require(d.builtin.num_operands >= 2 && d.builtin.num_operands * d.builtin.max_digits <= 18,
                  "data.builtin.num_operands", "need >= 2 operands and num_operands*max_digits <= 18 (got {})",
                  d.builtin.num_operands);
        k.require(!d.builtin.ops.empty() && d.builtin.ops.find_first_not_of("+-*") == std::string::npos,
                  "data.builtin.ops", "must be a non-empty combination of + - * (got '{}')", d.builtin.ops);
    }

    const auto& a = c.actor;
    k.optim(a.optim, "actor.optim");
    k.positive(a.ppo_mini_batch_size, "actor.ppo_mini_batch_size");
    k.positive(a.ppo_micro_batch_size_per_rank, "actor.ppo_micro_batch_size_per_rank");
    k.positive(a.ppo_max_token_len_per_rank, "actor.ppo_max_token_len_per_rank");
    k.positive(a.ppo_epochs, "actor.ppo_epochs");
    const auto& l = a.policy_loss;
    k.require(l.clip_ratio > 0, "actor.clip_ratio", "must be > 0 (got {})", l.clip_ratio);
    if (l.clip_ratio_low)
        k.require(*l.clip_ratio_low >= 0, "actor.clip_ratio_low", "must be >= 0 (got {})", *l.clip_ratio_low);
    if (l.clip_ratio_high)
        k.require(*l.clip_ratio_high >= 0, "actor.clip_ratio_high", "must be >= 0 (got {})", *l.clip_ratio_high);
    k.require(l.clip_ratio_c > 1, "actor.clip_ratio_c", "dual-clip constant must be > 1 (got {})", l.clip_ratio_c);
    if (a.loss_mode == "dro") {
        k.require(l.dro_beta.has_value() && *l.dro_beta > 0, "actor.policy_loss.dro_beta",
                  "loss_mode dro needs dro_beta > 0 (the weight of its quadratic penalty; verl has no default){}",
                  l.dro_beta ? fmt::format(", got {}", *l.dro_beta) : std::string());
    }
    k.require(!a.shuffle, "actor.shuffle",
              "true is not supported: the actor takes its mini-batches in batch order (the data loader already "
              "shuffles prompts with data.shuffle)");
    k.one_of(a.loss_agg_mode, "actor.loss_agg_mode",
             {"token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"});
    if (a.loss_scale_factor) k.require(*a.loss_scale_factor > 0, "actor.loss_scale_factor", "must be > 0");
    k.one_of(a.kl_loss_type, "actor.kl_loss_type",
             {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+",
              "k3+"});
    k.positive(a.log_prob_micro_batch_size_per_rank, "actor.log_prob_micro_batch_size_per_rank");
    k.require(std::isfinite(a.router_aux_loss_coef) && a.router_aux_loss_coef >= 0, "actor.router_aux_loss_coef",
              "must be a finite number >= 0 (got {})", a.router_aux_loss_coef);
    k.one_of(a.router_replay_mode, "actor.router_replay.mode", {"disabled", "R2", "R3"});
    // R3 replays the routes the rollout recorded: the engine's sampler generations record them.
    k.require(a.router_replay_mode != "R3" || c.rollout.generator == "sampler", "actor.router_replay.mode",
              "R3 needs the rollout's routes, which rollout.generator sampler records ('{}' does not)",
              c.rollout.generator);

    const auto& r = c.rollout;
    k.positive(r.n, "rollout.n");
    k.sampling(r.temperature, r.top_p, r.top_k, "rollout");
    k.require(!r.do_sample || r.temperature > 0, "rollout.temperature",
              "must be > 0 when do_sample is true (got {}); use do_sample=false for greedy", r.temperature);
    k.positive(r.max_num_seqs, "rollout.max_num_seqs");
    if (r.max_num_batched_tokens) {
        const int64_t need = c.data.max_prompt_length + c.data.max_response_length - 1;
        k.require(*r.max_num_batched_tokens >= need, "rollout.max_num_batched_tokens",
                  "must hold one sequence: >= data.max_prompt_length + data.max_response_length - 1 = {} KV "
                  "positions (got {})",
                  need, *r.max_num_batched_tokens);
    }
    k.stop_strings(r.stop, "rollout.stop");
    k.rollout_program(c);
    k.require(r.tensor_model_parallel_size >= 0, "rollout.tensor_model_parallel_size",
              "must be >= 0 (0: the placement group's model_parallel_size; got {})", r.tensor_model_parallel_size);
    k.one_of(r.dtype, "rollout.dtype", {"auto", "float32", "bfloat16"});
    k.sampling(r.val.temperature, r.val.top_p, r.val.top_k, "rollout.val");
    k.positive(r.val.n, "rollout.val.n");
    k.one_of(r.weight_sync.backend, "rollout.weight_sync.backend", {"auto", "mpi", "nccl"});
    k.require(r.weight_sync.bucket_mb > 0, "rollout.weight_sync.bucket_mb", "must be > 0 (got {})",
              r.weight_sync.bucket_mb);

    const auto& mt = r.multi_turn;
    k.require(mt.max_assistant_turns >= 0, "rollout.multi_turn.max_assistant_turns",
              "must be >= 0 (0: no limit; got {})", mt.max_assistant_turns);
    k.require(mt.max_user_turns >= 0, "rollout.multi_turn.max_user_turns", "must be >= 0 (0: no limit; got {})",
              mt.max_user_turns);
    k.positive(mt.max_parallel_calls, "rollout.multi_turn.max_parallel_calls");
    k.positive(mt.max_tool_response_length, "rollout.multi_turn.max_tool_response_length");
    k.one_of(mt.tool_response_truncate_side, "rollout.multi_turn.tool_response_truncate_side",
             {"left", "middle", "right"});
    k.one_of(mt.format, "rollout.multi_turn.format", {"hermes"});
    for (const auto& s : mt.mcp_servers) k.require(!s.empty(), "rollout.multi_turn.mcp_servers", "an empty command");
    k.require(mt.tool_timeout_s > 0, "rollout.multi_turn.tool_timeout_s", "must be > 0 (got {})", mt.tool_timeout_s);
    k.require(mt.server_start_timeout_s > 0, "rollout.multi_turn.server_start_timeout_s", "must be > 0 (got {})",
              mt.server_start_timeout_s);
    k.positive(mt.env_workers, "rollout.multi_turn.env_workers");
    k.require(mt.env_timeout_s > 0, "rollout.multi_turn.env_timeout_s", "must be > 0 (got {})", mt.env_timeout_s);

    k.positive(c.ref.log_prob_micro_batch_size_per_rank, "ref.log_prob_micro_batch_size_per_rank");
    k.require(c.ref.zero_stage == -1 || c.ref.zero_stage == 0 || c.ref.zero_stage == 3, "ref.zero_stage",
              "must be -1 (follow actor.optim.zero_stage), 0 (a full copy per rank) or 3 (sharded), got {}",
              c.ref.zero_stage);
    k.one_of(c.critic.enable, "critic.enable", {"auto", "true", "false"});
    k.optim(c.critic.optim, "critic.optim");
    k.require(c.critic.cliprange_value > 0, "critic.cliprange_value", "must be > 0 (got {})", c.critic.cliprange_value);
    if (c.critic.ppo_mini_batch_size) k.positive(*c.critic.ppo_mini_batch_size, "critic.ppo_mini_batch_size");
    if (c.critic.ppo_epochs) k.positive(*c.critic.ppo_epochs, "critic.ppo_epochs");
    k.positive(c.critic.ppo_micro_batch_size_per_rank, "critic.ppo_micro_batch_size_per_rank");
    k.positive(c.critic.forward_micro_batch_size_per_rank, "critic.forward_micro_batch_size_per_rank");
    k.positive(c.reward_model.micro_batch_size_per_rank, "reward_model.micro_batch_size_per_rank");

    const auto& al = c.algorithm;
    k.require(al.advantage.gamma >= 0 && al.advantage.gamma <= 1, "algorithm.gamma", "must be in [0, 1] (got {})",
              al.advantage.gamma);
    k.require(al.advantage.lam >= 0 && al.advantage.lam <= 1, "algorithm.lam", "must be in [0, 1] (got {})",
              al.advantage.lam);
    k.one_of(al.kl_penalty, "algorithm.kl_penalty",
             {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+",
              "k3+"});
    k.one_of(al.kl_ctrl.type, "algorithm.kl_ctrl.type", {"fixed", "adaptive"});
    k.non_negative(al.kl_ctrl.kl_coef, "algorithm.kl_ctrl.kl_coef");
    k.require(al.kl_ctrl.horizon > 0, "algorithm.kl_ctrl.horizon", "must be > 0 (got {})", al.kl_ctrl.horizon);
    k.require(al.kl_ctrl.target_kl > 0, "algorithm.kl_ctrl.target_kl", "must be > 0 (got {})", al.kl_ctrl.target_kl);
    k.one_of(al.filter_groups.metric, "algorithm.filter_groups.metric",
             {"acc", "score", "seq_reward", "seq_final_reward"});
    k.require(al.filter_groups.metric != "seq_final_reward" || !al.use_kl_in_reward, "algorithm.filter_groups.metric",
              "seq_final_reward with algorithm.use_kl_in_reward=true is not supported (the KL penalty needs the "
              "old and reference log-probs, computed after filtering); use seq_reward");
    if (al.adv_estimator == "gdpo") {
        k.require(!al.gdpo_reward_keys.empty(), "algorithm.gdpo_reward_keys",
                  "gdpo needs the reward components to normalise separately (e.g. [score, acc])");
    }
    const auto& gdpo_weights = al.advantage.gdpo_weights;
    k.require(gdpo_weights.empty() || gdpo_weights.size() == al.gdpo_reward_keys.size(),
              "algorithm.gdpo_reward_weights", "needs one weight per gdpo_reward_keys entry ({}), got {}",
              al.gdpo_reward_keys.size(), gdpo_weights.size());
    k.require(al.filter_groups.max_num_gen_batches >= 0, "algorithm.filter_groups.max_num_gen_batches",
              "must be >= 0 (got {})", al.filter_groups.max_num_gen_batches);
    if (al.adv_estimator == "grpo" || al.adv_estimator == "rloo" || al.adv_estimator == "grpo_passk") {
        k.require(r.n > 1 || al.adv_estimator == "grpo", "rollout.n",
                  "{} needs more than one sample per prompt (got {})", al.adv_estimator, r.n);
    }

    const auto& rc = al.rollout_correction;
    const std::string rcp = "algorithm.rollout_correction.";
    if (rc.rollout_is) k.one_of(*rc.rollout_is, rcp + "rollout_is", {"token", "sequence"});
    k.parses(rcp + "rollout_is_threshold", [&] { algo::parse_rollout_is_threshold(rc.rollout_is_threshold); });
    if (rc.rollout_rs) {
        k.parses(rcp + "rollout_rs",
                 [&] { algo::parse_rollout_rs(*rc.rollout_rs, rc.rollout_rs_threshold.value_or("")); });
    }
    k.require(rc.loss_type == "ppo_clip", rcp + "loss_type",
              "'{}' is not supported: rlpt implements bypass mode with ppo_clip only (verl's reinforce loss is not "
              "implemented)",
              rc.loss_type);
    const bool corrects = rc.rollout_is.has_value() || rc.rollout_rs.has_value();
    k.require(!corrects || r.calculate_log_probs, rcp + (rc.rollout_is ? "rollout_is" : "rollout_rs"),
              "needs the rollout's log-probs, but rollout.calculate_log_probs is false");
    if (rc.bypass_mode) {
        k.require(r.calculate_log_probs, rcp + "bypass_mode",
                  "true uses the rollout's log-probs as old log-probs: rollout.calculate_log_probs must be true");
        k.require(!corrects, rcp + "bypass_mode",
                  "true with rollout_is/rollout_rs is not supported (verl applies them per micro-batch inside the "
                  "actor; rlpt's bypass mode is plain PPO against the rollout's log-probs)");
        k.require(al.adv_estimator != "optimal_token_baseline" && al.adv_estimator != "tir_optimal_token_baseline",
                  rcp + "bypass_mode", "true skips the actor's log-prob pass, which {} needs (sum_pi_squared)",
                  al.adv_estimator);
    }
    k.require(t.max_staleness >= 0, "trainer.max_staleness", "must be >= 0 (got {})", t.max_staleness);
    if (t.max_staleness > 0 && t.mode == "rl") {  // (the SFT trainer generates only to evaluate)
        // The rollout generates the next batch while the actor, reference and critic work: they
        // must not share its ranks (a colocated layout has no idle rollout ranks to overlap).
        for (size_t g = 0; g < c.placement.groups.size(); ++g) {
            const auto& roles = c.placement.groups[g].roles;
            if (std::find(roles.begin(), roles.end(), "rollout") == roles.end()) continue;
            for (const char* other : {"actor", "reference", "critic"}) {
                k.require(std::find(roles.begin(), roles.end(), other) == roles.end(), "trainer.max_staleness",
                          "{} (asynchronous RL) needs the rollout on ranks of its own, but placement.groups.{} puts "
                          "it with the {}; give it its own group, e.g. placement.groups=[{{roles: [actor, reference], "
                          "ranks: 2}}, {{roles: [rollout], ranks: 2}}], or use max_staleness=0",
                          t.max_staleness, g, other);
            }
        }
    }

    const auto& rw = c.reward;
    k.require(rw.command_timeout_s > 0, "reward.command_timeout_s", "must be > 0 (got {})", rw.command_timeout_s);
    if (c.reward.overlong_buffer.enable) {
        k.require(c.reward.overlong_buffer.len > 0 && c.reward.overlong_buffer.len <= d.max_response_length,
                  "reward.overlong_buffer.len", "must be in (0, data.max_response_length={}] (got {})",
                  d.max_response_length, c.reward.overlong_buffer.len);
    }

    const auto& s = c.sft;
    k.positive(s.total_steps, "sft.total_steps");
    k.positive(s.batch_size, "sft.batch_size");
    k.positive(s.micro_batch_size_per_rank, "sft.micro_batch_size_per_rank");
    k.optim(s.optim, "sft.optim");
    k.require(s.eval_every >= 0, "sft.eval_every", "must be >= 0 (got {})", s.eval_every);
    k.finish();
}

}  // namespace rlpt
