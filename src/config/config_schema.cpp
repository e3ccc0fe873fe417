// The config schema: every key, in one place. Adding a key = a struct field with its default
// in include/rlpt/config/config.h + one line here (+ a range check in config_validate.cpp).
#include "config/config_schema.h"

namespace rlpt::config_detail {
namespace {

void visit_optim(Visitor& v, OptimConfig& c) {
    v.value("lr", c.lr);
    v.value("beta1", c.beta1);
    v.value("beta2", c.beta2);
    v.value("eps", c.eps);
    v.value("weight_decay", c.weight_decay);
    v.value("warmup_steps", c.warmup_steps);
    v.value("warmup_ratio", c.warmup_ratio);
    v.value("scheduler", c.scheduler);
    v.value("min_lr_ratio", c.min_lr_ratio);
    v.value("num_cycles", c.num_cycles);
    v.value("clip_grad", c.clip_grad);
    v.value("zero_stage", c.zero_stage);
    v.value("fsdp_size", c.fsdp_size);
    v.value("grad_bucket_mb", c.grad_bucket_mb);
}

void visit_sampling(Visitor& v, SamplingConfig& c) {
    v.value("temperature", c.temperature);
    v.value("top_p", c.top_p);
    v.value("top_k", c.top_k);
    v.value("do_sample", c.do_sample);
    v.value("n", c.n);
}

void visit_trainer(Visitor& v, TrainerConfig& c) {
    v.value("mode", c.mode);
    v.value("project_name", c.project_name);
    v.value("experiment_name", c.experiment_name);
    v.value("output_dir", c.output_dir);
    v.value("total_epochs", c.total_epochs);
    v.value("total_training_steps", c.total_training_steps);
    v.value("save_freq", c.save_freq);
    v.value("test_freq", c.test_freq);
    v.value("val_before_train", c.val_before_train);
    v.value("resume", c.resume);
    v.value("max_checkpoints", c.max_checkpoints);
    v.value("critic_warmup", c.critic_warmup);
    v.value("balance_batch", c.balance_batch);
    v.value("seed", c.seed);
    v.value("log_level", c.log_level);
    v.value("threads_per_rank", c.threads_per_rank);
    v.value("call_timeout_s", c.call_timeout_s);
    v.value("stall_warn_s", c.stall_warn_s);
    v.value("logger", c.logger);
    v.value("export_hf", c.export_hf);
    v.value("export_hf_freq", c.export_hf_freq);
    v.value("max_staleness", c.max_staleness);
}

void visit_placement(Visitor& v, PlacementConfig& c) {
    v.value("controller_hosts_roles", c.controller_hosts_roles);
    visit_list(v, "groups", c.groups, [](Visitor& g, RoleGroupConfig& r) {
        g.value("roles", r.roles);
        g.value("ranks", r.ranks);
        g.value("model_parallel_size", r.model_parallel_size);
    });
}

void visit_model(Visitor& v, ModelConfig& c) {
    v.value("path", c.path);
    v.value("dtype", c.dtype);
    v.value("device", c.device);
    v.value("chat_template", c.chat_template);
    v.section("builtin", [&](Visitor& b) {
        auto& m = c.builtin;
        b.value("hidden_size", m.hidden_size);
        b.value("num_layers", m.num_layers);
        b.value("num_heads", m.num_heads);
        b.value("num_kv_heads", m.num_kv_heads);
        b.value("intermediate_size", m.intermediate_size);
        b.value("max_position", m.max_position);
        b.value("rope_theta", m.rope_theta);
        b.value("tie_embeddings", m.tie_embeddings);
        b.value("init_seed", m.init_seed);
    });
}

void visit_data(Visitor& v, DataConfig& c) {
    v.value("train_files", c.train_files);
    v.value("val_files", c.val_files);
    v.value("prompt_key", c.prompt_key);
    v.value("answer_key", c.answer_key);
    v.value("response_key", c.response_key);
    v.value("data_source_key", c.data_source_key);
    v.value("default_data_source", c.default_data_source);
    v.value("answer_extract", c.answer_extract);
    v.value("prompt_suffix", c.prompt_suffix);
    v.value("extra_keys", c.extra_keys);
    v.section("builtin", [&](Visitor& b) {
        auto& t = c.builtin;
        b.value("task", t.task);
        b.value("num_train", t.num_train);
        b.value("num_val", t.num_val);
        b.value("min_digits", t.min_digits);
        b.value("max_digits", t.max_digits);
        b.value("num_operands", t.num_operands);
        b.value("ops", t.ops);
        b.value("reversed_answer", t.reversed_answer);
        b.value("demo_carry_error_rate", t.demo_carry_error_rate);
        b.value("tool_demo_rate", t.tool_demo_rate);
        b.value("seed", t.seed);
    });
    v.value("train_batch_size", c.train_batch_size);
    v.value("val_batch_size", c.val_batch_size);
    v.value("max_prompt_length", c.max_prompt_length);
    v.value("max_response_length", c.max_response_length);
    v.value("filter_overlong_prompts", c.filter_overlong_prompts);
    v.value("truncation", c.truncation);
    v.value("shuffle", c.shuffle);
    v.value("seed", c.seed);
}

void visit_actor(Visitor& v, ActorConfig& c) {
    v.section("optim", [&](Visitor& o) { visit_optim(o, c.optim); });
    v.value("ppo_mini_batch_size", c.ppo_mini_batch_size);
    v.value("ppo_micro_batch_size_per_rank", c.ppo_micro_batch_size_per_rank);
    v.value("use_dynamic_bsz", c.use_dynamic_bsz);
    v.value("ppo_max_token_len_per_rank", c.ppo_max_token_len_per_rank);
    v.value("ppo_epochs", c.ppo_epochs);
    v.value("shuffle", c.shuffle);
    v.value("clip_ratio", c.clip_ratio);
    v.value("clip_ratio_low", c.clip_ratio_low);
    v.value("clip_ratio_high", c.clip_ratio_high);
    v.value("clip_ratio_c", c.clip_ratio_c);
    v.section("policy_loss", [&](Visitor& p) {
        auto& l = c.policy_loss;
        p.value("loss_mode", l.loss_mode);
        p.value("clip_cov_ratio", l.clip_cov_ratio);
        p.value("clip_cov_lb", l.clip_cov_lb);
        p.value("clip_cov_ub", l.clip_cov_ub);
        p.value("kl_cov_ratio", l.kl_cov_ratio);
        p.value("ppo_kl_coef", l.ppo_kl_coef);
        p.value("dro_beta", l.dro_beta);
    });
    v.value("loss_agg_mode", c.loss_agg_mode);
    v.value("loss_scale_factor", c.loss_scale_factor);
    v.value("entropy_coeff", c.entropy_coeff);
    v.value("calculate_entropy", c.calculate_entropy);
    v.value("use_kl_loss", c.use_kl_loss);
    v.value("kl_loss_coef", c.kl_loss_coef);
    v.value("kl_loss_type", c.kl_loss_type);
    v.value("tau_pos", c.tau_pos);
    v.value("tau_neg", c.tau_neg);
    v.value("log_prob_micro_batch_size_per_rank", c.log_prob_micro_batch_size_per_rank);
}

void visit_rollout(Visitor& v, RolloutConfig& c) {
    v.value("n", c.n);
    v.value("temperature", c.temperature);
    v.value("top_p", c.top_p);
    v.value("top_k", c.top_k);
    v.value("do_sample", c.do_sample);
    v.value("stop_token_ids", c.stop_token_ids);
    v.value("stop", c.stop);
    v.value("include_stop_str_in_output", c.include_stop_str_in_output);
    v.value("max_num_seqs", c.max_num_seqs);
    v.value("max_num_batched_tokens", c.max_num_batched_tokens);
    v.value("calculate_log_probs", c.calculate_log_probs);
    v.value("dtype", c.dtype);
    v.value("generator", c.generator);
    v.section("beam_search", [&](Visitor& b) {
        b.value("beam_width", c.beam_search.beam_width);
        b.value("length_penalty", c.beam_search.length_penalty);
    });
    visit_list(v, "stages", c.stages, [](Visitor& s, RolloutStageConfig& st) {
        s.value("generator", st.generator);
        s.value("max_tokens", st.max_tokens);
        s.value("stop", st.stop);
        s.value("append", st.append);
        s.value("share_across_samples", st.share_across_samples);
    });
    v.section("multi_turn", [&](Visitor& m) {
        auto& t = c.multi_turn;
        m.value("max_assistant_turns", t.max_assistant_turns);
        m.value("max_user_turns", t.max_user_turns);
        m.value("max_parallel_calls", t.max_parallel_calls);
        m.value("max_tool_response_length", t.max_tool_response_length);
        m.value("tool_response_truncate_side", t.tool_response_truncate_side);
        m.value("format", t.format);
        m.value("mcp_servers", t.mcp_servers);
        m.value("builtin_tools", t.builtin_tools);
        m.value("tool_timeout_s", t.tool_timeout_s);
        m.value("server_start_timeout_s", t.server_start_timeout_s);
        m.value("env_command", t.env_command);
        m.value("env_workers", t.env_workers);
        m.value("env_timeout_s", t.env_timeout_s);
    });
    v.value("tensor_model_parallel_size", c.tensor_model_parallel_size);
    v.section("val", [&](Visitor& s) { visit_sampling(s, c.val); });
    v.section("weight_sync", [&](Visitor& w) {
        w.value("backend", c.weight_sync.backend);
        w.value("bucket_mb", c.weight_sync.bucket_mb);
    });
}

void visit_critic(Visitor& v, CriticConfig& c) {
    v.value("enable", c.enable);
    v.value("model_path", c.model_path);
    v.section("optim", [&](Visitor& o) { visit_optim(o, c.optim); });
    v.value("cliprange_value", c.cliprange_value);
    v.value("ppo_mini_batch_size", c.ppo_mini_batch_size);
    v.value("ppo_epochs", c.ppo_epochs);
    v.value("ppo_micro_batch_size_per_rank", c.ppo_micro_batch_size_per_rank);
    v.value("forward_micro_batch_size_per_rank", c.forward_micro_batch_size_per_rank);
}

void visit_algorithm(Visitor& v, AlgorithmConfig& c) {
    v.value("adv_estimator", c.adv_estimator);
    v.value("gamma", c.gamma);
    v.value("lam", c.lam);
    v.value("norm_adv_by_std_in_grpo", c.norm_adv_by_std_in_grpo);
    v.value("use_kl_in_reward", c.use_kl_in_reward);
    v.value("kl_penalty", c.kl_penalty);
    v.section("kl_ctrl", [&](Visitor& k) {
        k.value("type", c.kl_ctrl.type);
        k.value("kl_coef", c.kl_ctrl.kl_coef);
        k.value("horizon", c.kl_ctrl.horizon);
        k.value("target_kl", c.kl_ctrl.target_kl);
    });
    v.section("filter_groups", [&](Visitor& f) {
        f.value("enable", c.filter_groups.enable);
        f.value("metric", c.filter_groups.metric);
        f.value("max_num_gen_batches", c.filter_groups.max_num_gen_batches);
    });
    v.value("gdpo_reward_keys", c.gdpo_reward_keys);
    v.value("gdpo_reward_weights", c.gdpo_reward_weights);
    v.section("rollout_correction", [&](Visitor& r) {
        auto& rc = c.rollout_correction;
        r.value("rollout_is", rc.rollout_is);
        r.value("rollout_is_threshold", rc.rollout_is_threshold);
        r.value("rollout_is_batch_normalize", rc.rollout_is_batch_normalize);
        r.value("rollout_rs", rc.rollout_rs);
        r.value("rollout_rs_threshold", rc.rollout_rs_threshold);
        r.value("bypass_mode", rc.bypass_mode);
        r.value("loss_type", rc.loss_type);
    });
}

void visit_reward(Visitor& v, RewardConfig& c) {
    v.value("scorer", c.scorer);
    v.value("scorers", c.scorers);
    v.value("command", c.command);
    v.value("command_timeout_s", c.command_timeout_s);
    v.value("custom_library", c.custom_library);
    v.value("format_score", c.format_score);
    v.section("overlong_buffer", [&](Visitor& o) {
        o.value("enable", c.overlong_buffer.enable);
        o.value("len", c.overlong_buffer.len);
        o.value("penalty_factor", c.overlong_buffer.penalty_factor);
    });
}

void visit_sft(Visitor& v, SftConfig& c) {
    v.value("total_steps", c.total_steps);
    v.value("batch_size", c.batch_size);
    v.value("micro_batch_size_per_rank", c.micro_batch_size_per_rank);
    v.section("optim", [&](Visitor& o) { visit_optim(o, c.optim); });
    v.value("eval_every", c.eval_every);
    v.value("output_model_dir", c.output_model_dir);
}

}  // namespace

void visit_config(Visitor& v, Config& c) {
    v.section("trainer", [&](Visitor& s) { visit_trainer(s, c.trainer); });
    v.section("placement", [&](Visitor& s) { visit_placement(s, c.placement); });
    v.section("model", [&](Visitor& s) { visit_model(s, c.model); });
    v.section("data", [&](Visitor& s) { visit_data(s, c.data); });
    v.section("actor", [&](Visitor& s) { visit_actor(s, c.actor); });
    v.section("rollout", [&](Visitor& s) { visit_rollout(s, c.rollout); });
    v.section("ref", [&](Visitor& s) {
        s.value("log_prob_micro_batch_size_per_rank", c.ref.log_prob_micro_batch_size_per_rank);
        s.value("zero_stage", c.ref.zero_stage);
    });
    v.section("critic", [&](Visitor& s) { visit_critic(s, c.critic); });
    v.section("reward_model", [&](Visitor& s) {
        s.value("enable", c.reward_model.enable);
        s.value("model_path", c.reward_model.model_path);
        s.value("micro_batch_size_per_rank", c.reward_model.micro_batch_size_per_rank);
    });
    v.section("algorithm", [&](Visitor& s) { visit_algorithm(s, c.algorithm); });
    v.section("reward", [&](Visitor& s) { visit_reward(s, c.reward); });
    v.section("sft", [&](Visitor& s) { visit_sft(s, c.sft); });
}

}  // namespace rlpt::config_detail
