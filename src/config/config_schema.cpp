// The config schema: every key, in one place, with its meaning. Adding a key = a struct field with
// its default in include/rlpt/config/config.h + one line here with a one-line doc (+ a range check in
// config_validate.cpp), then regenerate docs/config-reference.md:
//   build/src/rlpt --help-config=markdown > docs/config-reference.md
// (tests/unit/test_config_reference.cpp fails while a doc is empty or the reference is stale).
#include "config/config_schema.h"

namespace rlpt::config_detail {
namespace {

void visit_optim(Visitor& v, OptimConfig& c) {
    v.value("lr", c.lr, "peak learning rate of AdamW");
    v.value("beta1", c.beta1, "AdamW beta1, in [0, 1)");
    v.value("beta2", c.beta2, "AdamW beta2, in [0, 1)");
    v.value("eps", c.eps, "AdamW epsilon, > 0");
    v.value("weight_decay", c.weight_decay, "AdamW decoupled weight decay");
    v.value("warmup_steps", c.warmup_steps,
            "linear warm-up length in training steps (the schedule moves once per training step, as verl's); "
            "-1: warmup_ratio x total training steps");
    v.value("warmup_ratio", c.warmup_ratio,
            "warm-up as a fraction of the total training steps, in [0, 1]; used when warmup_steps is -1");
    v.value("scheduler", c.scheduler, "learning-rate schedule after warm-up: constant | cosine");
    v.value("min_lr_ratio", c.min_lr_ratio, "cosine floor as a fraction of lr, in [0, 1]");
    v.value("num_cycles", c.num_cycles, "cosine cycles over the run (0.5: one half-cosine from lr to the floor)");
    v.value("clip_grad", c.clip_grad, "maximum global gradient norm; <= 0 disables clipping");
    v.value("zero_stage", c.zero_stage,
            "ZeRO sharding over the role's DP ranks: 0 replicated; 1 AdamW moments sharded; 2 + gradients "
            "(reduce-scattered); 3 + parameters (gathered per decoder layer, FSDP-style)");
    v.value("fsdp_size", c.fsdp_size,
            "hybrid shard (verl's fsdp_config.fsdp_size): ZeRO state sharded inside groups of DP ranks and "
            "replicated across them. -1: one group of all DP ranks; 0: the DP ranks of one node; N: N "
            "consecutive DP ranks (must divide the DP size); needs zero_stage >= 1 unless -1");
    v.value("grad_bucket_mb", c.grad_bucket_mb, "gradient all-reduce bucket size in MB");
}

void visit_sampling(Visitor& v, SamplingConfig& c) {
    v.value("temperature", c.temperature, "sampling temperature for validation");
    v.value("top_p", c.top_p, "nucleus sampling threshold for validation, in (0, 1]");
    v.value("top_k", c.top_k, "top-k for validation; -1: off");
    v.value("do_sample", c.do_sample, "false: greedy decoding for validation");
    v.value("n", c.n, "samples per validation prompt");
}

void visit_trainer(Visitor& v, TrainerConfig& c) {
    v.value("mode", c.mode, "rl (GRPO, PPO and relatives) | sft (supervised fine-tuning on prompt/response rows)");
    v.value("project_name", c.project_name, "names the run in the start-up log line (no experiment tracker)");
    v.value("experiment_name", c.experiment_name, "run directory name under output_dir (no '/')");
    v.value("output_dir", c.output_dir, "parent of the run directory <output_dir>/<experiment_name>");
    v.value("total_epochs", c.total_epochs, "passes over the training data when total_training_steps is null");
    v.value("total_training_steps", c.total_training_steps,
            "training steps of an RL run; null: total_epochs x batches per epoch (SFT counts sft.total_steps)");
    v.value("save_freq", c.save_freq,
            "checkpoint every N steps (RL: and after the last step); -1: never (a stop signal still checkpoints)");
    v.value("test_freq", c.test_freq, "validate every N steps and after the last step; -1: never");
    v.value("val_before_train", c.val_before_train, "validate once before the first step of a fresh run");
    v.value("resume", c.resume,
            "auto: continue from the newest complete checkpoint in the run directory | disable: start fresh | a "
            "checkpoint directory");
    v.value("max_checkpoints", c.max_checkpoints, "complete checkpoints kept; older ones are deleted");
    v.value("critic_warmup", c.critic_warmup, "first steps that update only the critic, not the actor");
    v.value("balance_batch", c.balance_batch,
            "balance each mini-batch's DP shares by sequence workload (Karmarkar-Karp), as verl's balance_batch");
    v.value("seed", c.seed,
            "seed of the sampling, the engines and the losses' random streams (data.seed seeds the shuffling)");
    v.value("log_level", c.log_level, "trace | debug | info | warn | error | off (RLPT_LOG_LEVEL overrides it)");
    v.value("threads_per_rank", c.threads_per_rank,
            "torch intra-op threads per rank; 0: the cores a rank is bound to, else cores / ranks on the node");
    v.value("device_collectives", c.device_collectives,
            "how collectives on GPU tensors move: nccl | mpi (staged through host memory; lets ranks share a GPU) | "
            "auto (nccl in builds with NCCL, else mpi)");
    v.value("call_timeout_s", c.call_timeout_s,
            "a role call (and every wait inside it) that takes longer ends the job with exit code 4");
    v.value("stall_warn_s", c.stall_warn_s, "warn, naming the ranks that have not answered, after this long");
    v.value("logger", c.logger,
            "where metrics go: console (a line per step), jsonl (<run>/metrics.jsonl), tensorboard "
            "(<run>/tensorboard/)");
    v.value("export_hf", c.export_hf, "write the final policy as a Hugging Face folder (<run>/hf_model)");
    v.value("export_hf_freq", c.export_hf_freq, "also export every N steps to <run>/hf_models/step_<N>; -1: never");
    v.value("max_staleness", c.max_staleness,
            "asynchronous RL: how many actor updates old a batch's weights may be when trained on. 0: synchronous; "
            ">= 1: the rollout (on ranks of its own) generates the next batch during the update");
}

void visit_placement(Visitor& v, PlacementConfig& c) {
    v.value("controller_hosts_roles", c.controller_hosts_roles,
            "rank 0 also does role work (so N GPUs do N GPUs' work); false: rank 0 only controls");
    visit_list(v, "groups", "groups of colocated roles; each takes consecutive ranks and every rank must belong to one",
               c.groups, [](Visitor& g, RoleGroupConfig& r) {
                   g.value("roles", r.roles,
                           "roles sharing these ranks: actor, rollout, reference, critic, reward_model");
                   g.value("ranks", r.ranks, "a rank count, or auto: a share of the ranks the fixed groups leave");
                   g.value("model_parallel_size", r.model_parallel_size,
                           "tensor-parallel size: models are split over blocks of this many consecutive ranks "
                           "inside one node; ranks / size blocks share the batch");
               });
}

void visit_model(Visitor& v, ModelConfig& c) {
    v.value("path", c.path,
            "Hugging Face folder (config.json, *.safetensors, tokenizer); empty: the built-in model (model.builtin)");
    v.value("dtype", c.dtype, "parameter dtype: float32 | bfloat16 (then fp32 master weights and optimizer state)");
    v.value("head_precision", c.head_precision,
            "LM head matmuls of log-probs and losses: fp32 (IEEE) | tf32 (TF32 on CUDA; on the CPU the same as fp32) "
            "| bf16 (bf16 operands, fp32 accumulation and output)");
    v.value(
        "device", c.device,
        "auto (cuda when the build has CUDA kernels and every role-hosting rank sees a GPU, else cpu) | cpu | cuda");
    v.value("chat_template", c.chat_template, "how prompts are wrapped: none | qwen2 | llama3 | qwen3");
    v.section(
        "apply_chat_template_kwargs",
        "the chat template's keyword arguments (verl's data.apply_chat_template_kwargs); unknown ones are refused",
        [&](Visitor& k) {
            k.value("enable_thinking", c.apply_chat_template_kwargs.enable_thinking,
                    "qwen3: false ends every generation prompt with an empty <think></think> block "
                    "(Qwen3's non-thinking mode)");
        });
    v.section("builtin", "the built-in Llama-style model, used when model.path is empty", [&](Visitor& b) {
        auto& m = c.builtin;
        b.value("hidden_size", m.hidden_size, "hidden size (a multiple of num_heads)");
        b.value("num_layers", m.num_layers, "decoder layers");
        b.value("num_heads", m.num_heads, "attention heads");
        b.value("num_kv_heads", m.num_kv_heads, "key/value heads (grouped-query attention; divides num_heads)");
        b.value("intermediate_size", m.intermediate_size, "SwiGLU MLP width");
        b.value("max_position", m.max_position, "longest sequence (prompt + response) in tokens");
        b.value("rope_theta", m.rope_theta, "rotary embedding base");
        b.value("tie_embeddings", m.tie_embeddings, "share the input embedding with the LM head");
        b.value("init_seed", m.init_seed, "seed of the initial weights");
    });
}

void visit_data(Visitor& v, DataConfig& c) {
    v.value("train_files", c.train_files, "JSONL training file(s), comma separated; empty: the built-in task");
    v.value("val_files", c.val_files, "JSONL validation file(s), comma separated");
    v.value("prompt_key", c.prompt_key, "record key of the prompt (dotted paths reach into nested objects)");
    v.value("answer_key", c.answer_key, "record key of the ground truth the scorer compares with");
    v.value("response_key", c.response_key, "record key of the SFT target response");
    v.value("data_source_key", c.data_source_key, "record key of the data_source that picks the scorer");
    v.value("default_data_source", c.default_data_source, "data_source of records without one");
    v.value("answer_extract", c.answer_extract,
            "\"\": the answer as written | gsm8k: the number after the last '#### ' of the answer");
    v.value("prompt_suffix", c.prompt_suffix, "text appended to every prompt");
    v.value("extra_keys", c.extra_keys,
            "record keys copied into the sample's extra_info (scorers and environments get it)");
    v.section("builtin", "the built-in arithmetic task, used when data.train_files is empty", [&](Visitor& b) {
        auto& t = c.builtin;
        b.value("task", t.task, "arithmetic | arithmetic_tools (2-digit products with a calculator tool)");
        b.value("num_train", t.num_train, "training problems (at most ~90% of the distinct problems)");
        b.value("num_val", t.num_val, "held-out problems, none of them in the training set");
        b.value("min_digits", t.min_digits, "fewest digits per operand");
        b.value("max_digits", t.max_digits, "most digits per operand");
        b.value("num_operands", t.num_operands, "operands per problem");
        b.value("ops", t.ops, "operators to draw from, any of + - *");
        b.value("reversed_answer", t.reversed_answer, "answer digits least significant first");
        b.value("demo_carry_error_rate", t.demo_carry_error_rate,
                "share of carry problems whose SFT target forgets the carry (flawed demonstrations)");
        b.value("tool_demo_rate", t.tool_demo_rate,
                "arithmetic_tools: share of SFT demonstrations that call the calculator");
        b.value("seed", t.seed, "seed of the generated problems");
    });
    v.value("train_batch_size", c.train_batch_size, "prompts per RL training step");
    v.value("val_batch_size", c.val_batch_size, "validation prompts per generation call; -1: all at once");
    v.value("max_prompt_length", c.max_prompt_length, "longest prompt in tokens");
    v.value("max_response_length", c.max_response_length,
            "longest response in tokens (with tools: model and tool tokens together)");
    v.value("filter_overlong_prompts", c.filter_overlong_prompts,
            "drop records whose prompt is longer than max_prompt_length (with a warning)");
    v.value("truncation", c.truncation, "an overlong prompt that is kept: error | left | right (which end is cut)");
    v.value("shuffle", c.shuffle, "shuffle the training data every epoch");
    v.value("seed", c.seed, "seed of the shuffling");
}

void visit_actor(Visitor& v, ActorConfig& c) {
    v.section("optim", "the actor's optimizer (and, for SFT, see sft.optim)",
              [&](Visitor& o) { visit_optim(o, c.optim); });
    v.value("ppo_mini_batch_size", c.ppo_mini_batch_size,
            "prompts per optimizer step (x rollout.n samples), as verl's; must split the step's batch");
    v.value("ppo_micro_batch_size_per_rank", c.ppo_micro_batch_size_per_rank,
            "samples per forward/backward on a rank (gradient accumulation)");
    v.value("use_dynamic_bsz", c.use_dynamic_bsz,
            "micro-batches by token budget (ppo_max_token_len_per_rank) instead of by sample count");
    v.value("ppo_max_token_len_per_rank", c.ppo_max_token_len_per_rank,
            "token budget of one micro-batch with use_dynamic_bsz");
    v.value("ppo_epochs", c.ppo_epochs, "passes over each batch per training step");
    v.value("shuffle", c.shuffle, "must stay false: mini-batches are taken in order");
    auto& l = c.policy_loss;
    v.value("clip_ratio", l.clip_ratio, "PPO clip range epsilon (both sides unless clip_ratio_low/high are set)");
    v.value("clip_ratio_low", l.clip_ratio_low, "lower clip range; null: clip_ratio");
    v.value("clip_ratio_high", l.clip_ratio_high, "upper clip range (DAPO's clip-higher); null: clip_ratio");
    v.value("clip_ratio_c", l.clip_ratio_c, "dual-clip constant for negative advantages, > 1");
    v.section("policy_loss", "the policy loss and its parameters (verl's actor.policy_loss)", [&](Visitor& p) {
        p.value("loss_mode", c.loss_mode,
                "vanilla (PPO clip + dual-clip) | gspo | gpg | cispo | sapo | clip_cov | kl_cov | geo_mean | dro | "
                "dppo_tv | dppo_kl");
        p.value("clip_cov_ratio", l.clip_cov_ratio, "clip_cov: share of tokens whose gradient is cut");
        p.value("clip_cov_lb", l.clip_cov_lb, "clip_cov: lower bound of the covariance window");
        p.value("clip_cov_ub", l.clip_cov_ub, "clip_cov: upper bound of the covariance window");
        p.value("kl_cov_ratio", l.kl_cov_ratio, "kl_cov: share of tokens that get the KL penalty");
        p.value("ppo_kl_coef", l.ppo_kl_coef, "kl_cov: coefficient of its KL penalty");
        p.value("dro_beta", l.dro_beta, "dro: the quadratic penalty's beta; required (> 0) for loss_mode dro");
    });
    v.value("loss_agg_mode", c.loss_agg_mode,
            "how token losses become one number: token-mean | token-sum | seq-mean-token-sum | seq-mean-token-mean | "
            "seq-mean-token-sum-norm");
    v.value("loss_scale_factor", c.loss_scale_factor, "seq-mean-token-sum-norm's divisor; null: the response length");
    v.value("entropy_coeff", c.entropy_coeff, "entropy bonus coefficient (0: none)");
    v.value("calculate_entropy", c.calculate_entropy, "compute the entropy metric even when entropy_coeff is 0");
    v.value("use_kl_loss", c.use_kl_loss, "add a KL-to-reference term to the actor loss (GRPO style)");
    v.value("kl_loss_coef", c.kl_loss_coef, "coefficient of the KL loss");
    v.value("kl_loss_type", c.kl_loss_type,
            "KL estimator of the loss: kl (k1) | abs | mse (k2) | low_var_kl (k3), '+' for the k2 gradient");
    v.value("tau_pos", l.tau_pos, "sapo: gate temperature for positive advantages");
    v.value("tau_neg", l.tau_neg, "sapo: gate temperature for negative advantages");
    v.value("log_prob_micro_batch_size_per_rank", c.log_prob_micro_batch_size_per_rank,
            "samples per forward when computing old log-probs");
    v.value("router_aux_loss_coef", c.router_aux_loss_coef,
            "mixture-of-experts models: weight of the load-balancing loss (0: off, verl's RL default)");
    v.section("router_replay", "mixture-of-experts models: whose expert choices the training forwards replay",
              [&](Visitor& r) {
                  r.value("mode", c.router_replay_mode,
                          "disabled | R2 (the update routes as the old-log-prob pass did) | R3 (both route as the "
                          "rollout did)");
              });
}

void visit_rollout(Visitor& v, RolloutConfig& c) {
    v.value("n", c.n, "samples per prompt (GRPO's group size; > 1 for grpo_passk and rloo)");
    v.value("temperature", c.temperature, "sampling temperature (also divides the logits of the log-prob passes)");
    v.value("top_p", c.top_p, "nucleus sampling threshold, in (0, 1]");
    v.value("top_k", c.top_k, "top-k sampling; -1: off");
    v.value("do_sample", c.do_sample, "false: greedy decoding");
    v.value("stop_token_ids", c.stop_token_ids, "token ids that end a response, besides EOS and end-of-turn");
    v.value("stop", c.stop,
            "stop strings (vLLM's stop): a response ends at the token that completes one; its tokens are kept");
    v.value("include_stop_str_in_output", c.include_stop_str_in_output,
            "the text the scorers see keeps the stop string (vLLM's name); the tokens are the same either way");
    v.value("max_num_seqs", c.max_num_seqs, "sequences decoded together per rollout rank (continuous batching slots)");
    v.value("max_num_batched_tokens", c.max_num_batched_tokens,
            "KV-cache budget per rollout rank in token positions over all slots; null: max_num_seqs slots");
    v.value("calculate_log_probs", c.calculate_log_probs,
            "keep the rollout's own log-probs in the batch (needed by rollout_correction)");
    v.value("dtype", c.dtype, "weights generation runs with: auto (model.dtype) | float32 | bfloat16 (a copy)");
    v.value("generator", c.generator, "the rollout program: sampler | beam_search | multi_stage | tool_agent");
    v.section("beam_search", "arguments of the beam_search generator and of beam_search stages", [&](Visitor& b) {
        b.value("beam_width", c.beam_search.beam_width, "beams per prompt; rollout.n (and rollout.val.n) <= it");
        b.value("length_penalty", c.beam_search.length_penalty,
                "beams are ranked by cumulative log-prob / length^length_penalty");
    });
    visit_list(v, "stages", "generator multi_stage: the stages, in order", c.stages,
               [](Visitor& s, RolloutStageConfig& st) {
                   s.value("generator", st.generator, "sampler | beam_search (with rollout.beam_search's arguments)");
                   s.value("max_tokens", st.max_tokens, "most tokens this stage generates (trained on)");
                   s.value("stop", st.stop, "stop strings that hand over to the next stage (sampler stages)");
                   s.value("append", st.append,
                           "text appended after the stage as context, not trained on (response_mask 0)");
                   s.value("share_across_samples", st.share_across_samples,
                           "run the stage once per prompt and share it between the prompt's samples");
               });
    v.section("multi_turn", "generator tool_agent: tools, environments and turn limits (verl's names)",
              [&](Visitor& m) {
                  auto& t = c.multi_turn;
                  m.value("max_assistant_turns", t.max_assistant_turns, "model turns per sample; 0: no limit");
                  m.value("max_user_turns", t.max_user_turns,
                          "observation turns (tool results, environment) per sample; 0: no limit");
                  m.value("max_parallel_calls", t.max_parallel_calls,
                          "tool calls run per assistant turn; further calls are dropped");
                  m.value("max_tool_response_length", t.max_tool_response_length,
                          "characters of one tool result kept (verl counts characters too)");
                  m.value("tool_response_truncate_side", t.tool_response_truncate_side,
                          "where a long tool result is cut: left | middle | right");
                  m.value("format", t.format, "tool-call format: hermes (<tool_call>{json}</tool_call>)");
                  m.value("mcp_servers", t.mcp_servers,
                          "MCP servers over stdio, one shell command each; every rollout rank starts its own");
                  m.value("builtin_tools", t.builtin_tools, "tools inside rlpt: calculator");
                  m.value("tool_timeout_s", t.tool_timeout_s, "per tool call; a late call is an error observation");
                  m.value("server_start_timeout_s", t.server_start_timeout_s, "an MCP server's start and handshake");
                  m.value("env_command", t.env_command,
                          "an environment program speaking JSON lines instead of tools; its rewards are the score");
                  m.value("env_workers", t.env_workers, "environment processes per rollout rank");
                  m.value("env_timeout_s", t.env_timeout_s, "per environment reset/step");
              });
    v.value("tensor_model_parallel_size", c.tensor_model_parallel_size,
            "verl's key. 0: the rollout group's model_parallel_size; another size for a rollout colocated with the "
            "actor (the hybrid engine)");
    v.section("val", "sampling for validation (verl's val_kwargs)", [&](Visitor& s) { visit_sampling(s, c.val); });
    v.section("weight_sync", "how the actor's weights reach the rollout after each update", [&](Visitor& w) {
        w.value("backend", c.weight_sync.backend, "auto | mpi | nccl");
        w.value("bucket_mb", c.weight_sync.bucket_mb, "bucket size in MB for packed and staged transfers");
    });
}

void visit_critic(Visitor& v, CriticConfig& c) {
    v.value("enable", c.enable, "auto (on for the gae estimator) | true | false");
    v.value("model_path", c.model_path, "value model folder; empty: initialised from the policy");
    v.section("optim", "the critic's optimizer", [&](Visitor& o) { visit_optim(o, c.optim); });
    v.value("cliprange_value", c.cliprange_value, "value clipping range of the value loss");
    v.value("ppo_mini_batch_size", c.ppo_mini_batch_size, "prompts per critic optimizer step; null: the actor's");
    v.value("ppo_epochs", c.ppo_epochs, "critic passes per training step; null: the actor's");
    v.value("ppo_micro_batch_size_per_rank", c.ppo_micro_batch_size_per_rank,
            "samples per critic forward/backward on a rank");
    v.value("forward_micro_batch_size_per_rank", c.forward_micro_batch_size_per_rank,
            "samples per forward when computing values");
}

void visit_algorithm(Visitor& v, AlgorithmConfig& c) {
    v.value("adv_estimator", c.adv_estimator,
            "advantage estimator: grpo | gae | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax | "
            "opo | gpg | grpo_passk | gdpo | optimal_token_baseline | tir_optimal_token_baseline (and verl's "
            "aliases grpo_vectorized, rloo_vectorized)");
    v.value("gamma", c.advantage.gamma, "discount factor (gae, reinforce_plus_plus), in [0, 1]");
    v.value("lam", c.advantage.lam, "GAE lambda, in [0, 1]");
    v.value("norm_adv_by_std_in_grpo", c.advantage.norm_adv_by_std_in_grpo,
            "grpo: divide by the group's standard deviation; false is Dr.GRPO");
    v.value("use_kl_in_reward", c.use_kl_in_reward, "subtract a KL penalty to the reference from the rewards");
    v.value(
        "kl_penalty", c.kl_penalty,
        "KL estimator of the in-reward penalty: kl (k1) | abs | mse (k2) | low_var_kl (k3), '+' for the k2 gradient");
    v.section("kl_ctrl", "the in-reward KL coefficient and its controller", [&](Visitor& k) {
        k.value("type", c.kl_ctrl.type, "fixed | adaptive (Ziegler et al.)");
        k.value("kl_coef", c.kl_ctrl.kl_coef, "KL coefficient (the adaptive controller's start)");
        k.value("horizon", c.kl_ctrl.horizon, "adaptive: horizon of the update, > 0");
        k.value("target_kl", c.kl_ctrl.target_kl, "adaptive: the KL it steers to");
    });
    v.section("filter_groups", "DAPO dynamic sampling: drop groups whose samples all score alike", [&](Visitor& f) {
        f.value("enable", c.filter_groups.enable, "turn dynamic sampling on (extra generation rounds fill the batch)");
        f.value("metric", c.filter_groups.metric,
                "what must differ inside a group: acc | score | seq_reward | seq_final_reward");
        f.value("max_num_gen_batches", c.filter_groups.max_num_gen_batches,
                "most generation rounds per step; 0: unlimited");
    });
    v.value("gdpo_reward_keys", c.gdpo_reward_keys,
            "gdpo: the reward components normalised separately (score, acc, or a number a scorer reports)");
    v.value("gdpo_reward_weights", c.advantage.gdpo_weights, "gdpo: one weight per component; empty: 1 each");
    v.section("rollout_correction", "off-policy correction between rollout and actor log-probs (verl's keys)",
              [&](Visitor& r) {
                  auto& rc = c.rollout_correction;
                  r.value("rollout_is", rc.rollout_is,
                          "importance weights for the policy loss: null | token | sequence");
                  r.value("rollout_is_threshold", rc.rollout_is_threshold,
                          "U (truncated IS: min(w, U)) or \"L_U\" (IcePop: weights outside [L, U] become 0)");
                  r.value("rollout_is_batch_normalize", rc.rollout_is_batch_normalize,
                          "divide the weights by their batch mean");
                  r.value("rollout_rs", rc.rollout_rs,
                          "rejection sampling: null or a comma list of options (token_k1, seq_mean_k3, ...)");
                  r.value("rollout_rs_threshold", rc.rollout_rs_threshold,
                          "rollout_rs bounds: one spec for all options, or one per option");
                  r.value("bypass_mode", rc.bypass_mode,
                          "true: no old-log-prob pass; the rollout's log-probs are the old ones (no IS/RS then)");
                  r.value("loss_type", rc.loss_type, "bypass mode's loss: ppo_clip (reinforce is not implemented)");
              });
}

void visit_reward(Visitor& v, RewardConfig& c) {
    v.value("scorer", c.scorer,
            "auto: by data_source (built-ins + reward.scorers) | one scorer name for every data_source");
    v.value("scorers", c.scorers,
            "data_source -> scorer name or spec ({type: number, extraction: whole}); wins over reward.scorer");
    v.value("command", c.command, "the command scorer's program (run with /bin/sh -c), speaking JSON lines");
    v.value("command_timeout_s", c.command_timeout_s, "a batch the command has not scored within this is an error");
    v.value("custom_library", c.custom_library, "the user scorer's shared library (C ABI, rlpt/reward/user_scorer.h)");
    v.value("format_score", c.format_score,
            "score of a well-formed but wrong answer (gsm8k, number and arithmetic scorers)");
    v.section("overlong_buffer", "DAPO overlong shaping: a penalty for responses near the length limit",
              [&](Visitor& o) {
                  o.value("enable", c.overlong_buffer.enable, "turn the penalty on");
                  o.value("len", c.overlong_buffer.len,
                          "buffer length L_b: responses longer than max_response_length - L_b are penalised");
                  o.value("penalty_factor", c.overlong_buffer.penalty_factor,
                          "the penalty at max_response_length (it grows linearly over the buffer)");
              });
}

void visit_sft(Visitor& v, SftConfig& c) {
    v.value("total_steps", c.total_steps, "optimizer steps of the SFT run");
    v.value("batch_size", c.batch_size, "samples per optimizer step over all DP ranks");
    v.value("micro_batch_size_per_rank", c.micro_batch_size_per_rank, "samples per forward/backward on a rank");
    v.section("optim", "the SFT optimizer", [&](Visitor& o) { visit_optim(o, c.optim); });
    v.value("eval_every", c.eval_every, "greedy validation accuracy every N steps; 0: only at the end");
    v.value("output_model_dir", c.output_model_dir, "where the trained model is written; empty: <run>/model");
}

}  // namespace

void visit_config(Visitor& v, Config& c) {
    v.section("trainer", "the run: mode, length, run directory, checkpoints, logging, watchdog",
              [&](Visitor& s) { visit_trainer(s, c.trainer); });
    v.section("placement", "which ranks host which roles", [&](Visitor& s) { visit_placement(s, c.placement); });
    v.section("model", "the policy model", [&](Visitor& s) { visit_model(s, c.model); });
    v.section("data", "datasets, keys and length limits", [&](Visitor& s) { visit_data(s, c.data); });
    v.section("actor", "the policy's training: optimizer, mini-batches, policy loss, KL loss",
              [&](Visitor& s) { visit_actor(s, c.actor); });
    v.section("rollout", "generation: sampling, rollout programs, tools, weight sync",
              [&](Visitor& s) { visit_rollout(s, c.rollout); });
    v.section("ref", "the reference policy (a frozen copy of the initial policy)", [&](Visitor& s) {
        s.value("log_prob_micro_batch_size_per_rank", c.ref.log_prob_micro_batch_size_per_rank,
                "samples per forward when computing reference log-probs");
        s.value("zero_stage", c.ref.zero_stage,
                "-1: 3 when actor.optim.zero_stage is 3, else 0 | 0: a full copy per rank | 3: sharded over its DP "
                "ranks");
    });
    v.section("critic", "the value model (PPO with GAE)", [&](Visitor& s) { visit_critic(s, c.critic); });
    v.section("reward_model", "a learned reward model role", [&](Visitor& s) {
        s.value("enable", c.reward_model.enable, "score responses with a reward model role too");
        s.value("model_path", c.reward_model.model_path, "the reward model: a value-head Hugging Face folder");
        s.value("micro_batch_size_per_rank", c.reward_model.micro_batch_size_per_rank,
                "samples per reward-model forward on a rank");
    });
    v.section("algorithm", "advantages, KL penalties, dynamic sampling, off-policy correction",
              [&](Visitor& s) { visit_algorithm(s, c.algorithm); });
    v.section("reward", "rule-based and program scorers", [&](Visitor& s) { visit_reward(s, c.reward); });
    v.section("sft", "supervised fine-tuning (trainer.mode: sft)", [&](Visitor& s) { visit_sft(s, c.sft); });
}

}  // namespace rlpt::config_detail
