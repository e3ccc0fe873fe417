#pragma once
// The run configuration: typed structs with defaults (the defaults live here and in the lower
// layers' setting structs included below, nowhere else). Torch-free. Only src/app and src/config
// read it: the run plan resolves each role's settings from it once (app/role_settings.h).
//
// Flow (DESIGN §1, STYLE §4): rank 0 calls load_config(file, overrides) which reads the YAML
// file with yaml-cpp, applies `dotted.key=value` command-line overrides, binds the result to
// these structs (unknown keys and wrong types are ConfigErrors naming the key path and its
// origin, "configs/grpo.yaml:12" or "command line"), and validate() checks ranges and
// cross-field rules. Rank 0 then broadcasts to_yaml(config) and every rank parses the same
// text, so all ranks see identical values. to_yaml() is also the effective config written
// beside a run's outputs.
//
// Key names follow verl where a verl user would look for them (actor.optim.lr,
// rollout.n, algorithm.adv_estimator, data.train_batch_size, trainer.save_freq, ...).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

// The sections a lower layer reads are that layer's torch-free structs, included here (their
// defaults live there): the optimizer (actor.optim, critic.optim, sft.optim), the built-in model
// (model.builtin), the policy loss (actor.policy_loss and the clip keys) and the placement.
#include "rlpt/algo/advantage_config.h"
#include "rlpt/algo/loss_config.h"
#include "rlpt/comm/placement_config.h"
#include "rlpt/engine/optim_config.h"
#include "rlpt/model/model_config.h"
#include "rlpt/rollout/multi_turn_config.h"

namespace rlpt {

struct ModelConfig {
    std::string path;                     // Hugging Face folder (config.json + safetensors); empty: built-in
    std::string dtype = "float32";        // float32 | bfloat16
    std::string head_precision = "fp32";  // fp32 | tf32 | bf16: the log-prob head's matmuls (model/chunked_head.h)
    std::string device = "auto";          // auto | cpu | cuda
    std::string chat_template = "none";   // none | qwen2 | llama3 | qwen3
    // The chat template's keyword arguments (verl's data.apply_chat_template_kwargs); only the
    // ones rlpt's templates read are keys, so a misspelt or unsupported kwarg is refused.
    struct ChatTemplateKwargs {
        bool enable_thinking = true;  // qwen3: false ends the generation prompt with an empty think block
    } apply_chat_template_kwargs;
    BuiltinModelConfig builtin;  // used when path is empty
};

struct BuiltinTaskConfig {
    std::string task =
        "arithmetic";          // arithmetic | arithmetic_tools (data/arithmetic.h); used when data.train_files is empty
    int64_t num_train = 5000;  // at most ~90% of the distinct problems (1-2 digit sums: 10000)
    int64_t num_val = 200;
    int64_t min_digits = 1;
    int64_t max_digits = 2;
    int64_t num_operands = 2;
    std::string ops = "+";
    bool reversed_answer = false;        // answer digits least significant first
    double demo_carry_error_rate = 0.0;  // share of carry problems whose SFT target forgets the carry
    double tool_demo_rate = 0.2;         // arithmetic_tools: share of SFT demonstrations that call the calculator
    int64_t seed = 7;
};

struct DataConfig {
    std::string train_files;  // JSONL path(s), comma separated; empty: built-in task
    std::string val_files;
    // Record keys (dotted paths reach into nested objects). A stage reads only what it uses:
    //   rl:  prompt_key + answer_key (the scorer's ground truth)
    //   sft: prompt_key + response_key (the target); validation rows: prompt_key + answer_key,
    //        or response_key when they have no answer (the response is then the ground truth).
    std::string prompt_key = "prompt";
    std::string answer_key = "answer";
    std::string response_key = "response";  // verl's data.response_key (SFT target)
    std::string data_source_key = "data_source";
    std::string default_data_source;
    std::string answer_extract;  // "" | gsm8k (text after the last "#### ")
    std::string prompt_suffix;
    std::vector<std::string> extra_keys;
    BuiltinTaskConfig builtin;
    int64_t train_batch_size = 64;      // prompts per step
    int64_t val_batch_size = -1;        // -1: whole validation set at once
    int64_t max_prompt_length = 512;    // tokens
    int64_t max_response_length = 512;  // tokens
    bool filter_overlong_prompts = true;
    std::string truncation = "error";  // error | left | right
    bool shuffle = true;
    int64_t seed = 42;
};

struct ActorConfig {
    OptimConfig optim;
    int64_t ppo_mini_batch_size = 16;           // prompts per optimizer step (x rollout.n samples)
    int64_t ppo_micro_batch_size_per_rank = 8;  // samples per forward/backward
    bool use_dynamic_bsz = false;
    int64_t ppo_max_token_len_per_rank = 16384;
    int64_t ppo_epochs = 1;
    bool shuffle = false;               // true is refused: mini-batches are taken in order
    std::string loss_mode = "vanilla";  // actor.policy_loss.loss_mode: a row of the loss table
    // Every loss parameter (algo's struct): actor.clip_ratio, clip_ratio_low/high (null:
    // clip_ratio), clip_ratio_c, tau_pos, tau_neg and the other actor.policy_loss.* keys. Its
    // loss_agg_mode is not a key: actor.loss_agg_mode (below) is, parsed by the run plan.
    algo::PolicyLossConfig policy_loss;
    std::string loss_agg_mode = "token-mean";
    std::optional<double> loss_scale_factor;
    double entropy_coeff = 0.0;
    bool calculate_entropy = true;
    bool use_kl_loss = false;
    double kl_loss_coef = 0.001;
    std::string kl_loss_type = "low_var_kl";
    int64_t log_prob_micro_batch_size_per_rank = 32;
    // Mixture-of-experts policies (Qwen3-MoE): the load-balancing loss's weight (transformers'
    // router_aux_loss_coef; 0, off, is verl's RL default) and router replay
    // (actor.router_replay.mode, verl's names): disabled | R2 (the update routes as the old-log-prob
    // pass did) | R3 (the old-log-prob pass and the update route as the rollout did).
    double router_aux_loss_coef = 0.0;
    std::string router_replay_mode = "disabled";
};

struct SamplingConfig {
    double temperature = 1.0;
    double top_p = 1.0;
    int64_t top_k = -1;
    bool do_sample = true;
    int64_t n = 1;
};

struct WeightSyncConfig {
    std::string backend = "auto";  // auto | mpi | nccl
    double bucket_mb = 64.0;
};

// rollout.beam_search: the beam_search generator's arguments (vLLM's BeamSearchParams names;
// rollout/beam_search.h has the exact algorithm). rollout.n (and rollout.val.n) must be <=
// beam_width: a prompt's n samples are its n best beams.
struct BeamSearchConfig {
    int64_t beam_width = 4;       // >= 1
    double length_penalty = 1.0;  // beams ranked by cumulative log-prob / length^length_penalty
};

// One entry of rollout.stages (generator multi_stage; rollout/multi_stage.h). The stage
// generates at most max_tokens tokens (trained on), stopping early at one of its stop strings
// (sampler stages) or at eos / a stop token id (which also ends the response); then `append`
// (encoded with the run's tokenizer) is added as context the policy is not trained on
// (response_mask 0), unless the response ended. The stages' max_tokens plus their appended
// tokens must fit in data.max_response_length.
struct RolloutStageConfig {
    std::string generator = "sampler";  // sampler | beam_search (rollout.beam_search's arguments)
    int64_t max_tokens = 1;             // >= 1
    std::vector<std::string> stop;      // non-empty strings; sampler stages only
    std::string append;                 // text appended after the stage ("" = none)
    // The rows of one prompt run this stage once (the first sample's seed) and share its output
    // while their prefixes are identical; a shared beam_search stage gives them its n best beams.
    bool share_across_samples = false;
};

struct RolloutConfig {
    int64_t n = 1;
    double temperature = 1.0;
    double top_p = 1.0;
    int64_t top_k = -1;
    bool do_sample = true;
    std::vector<int64_t> stop_token_ids;
    // Stop strings (vLLM's `stop`): a response whose text contains one finishes there (finish
    // reason stop). Its tokens up to and including the one completing the string are kept and
    // trained on; the text the reward scorers see ends before the string, or after it with
    // include_stop_str_in_output (vLLM's name). Matched across token boundaries on the text
    // without special tokens; rollout/stop_strings.h has the exact rules. Non-empty strings.
    std::vector<std::string> stop;
    bool include_stop_str_in_output = false;
    // Continuous batching (rollout/generator.h), vLLM's names. Sequences decoded together per
    // rollout rank (KV-cache slots; was rollout.micro_batch_size):
    int64_t max_num_seqs = 256;
    // KV-cache budget per rollout rank in token positions over all slots (each slot holds the
    // longest prompt + max_new_tokens - 1); null: max_num_seqs slots. Must hold one sequence.
    std::optional<int64_t> max_num_batched_tokens;
    bool calculate_log_probs = true;  // false: the batch carries no rollout_log_probs (verl)
    // Weights generation runs with (verl/vLLM's rollout.dtype): auto = model.dtype (the policy's
    // own tensors); float32 | bfloat16 = a copy in that dtype, refreshed when the weights change.
    std::string dtype = "auto";
    std::string generator = "sampler";       // a row of the generator table (rlpt/roles/generator_table.h)
    BeamSearchConfig beam_search;            // generator beam_search, and beam_search stages
    std::vector<RolloutStageConfig> stages;  // generator multi_stage: at least one stage
    MultiTurnConfig multi_turn;              // generator tool_agent
    SamplingConfig val{0.0, 1.0, -1, false, 1};
    WeightSyncConfig weight_sync;
    // verl's key. 0: the rollout group's model_parallel_size. A rollout colocated with the actor
    // may use another size (the hybrid engine, DESIGN §4b): it generates from its own copy in
    // this layout, filled from the actor's (ZeRO shards x actor tp) before each generation and
    // freed after (rlpt/weights/held_reshard.h). Must divide the group's ranks; a rollout on ranks
    // of its own takes the size of its group instead (a different value is refused).
    int64_t tensor_model_parallel_size = 0;
};

struct ReferenceConfig {
    int64_t log_prob_micro_batch_size_per_rank = 32;
    // -1: 3 when actor.optim.zero_stage is 3, else 0. 0: a full copy per rank. 3: the parameters
    // sharded over the reference's DP ranks (in actor.optim.fsdp_size groups), each decoder layer
    // gathered for its forward (the actor's ZeRO-3 machinery with no optimizer state).
    int64_t zero_stage = -1;
};

struct CriticConfig {
    std::string enable = "auto";  // auto (on for gae) | true | false
    std::string model_path;       // empty: initialise from the policy
    OptimConfig optim{1e-5};
    double cliprange_value = 0.5;
    std::optional<int64_t> ppo_mini_batch_size;  // null: actor's
    std::optional<int64_t> ppo_epochs;           // null: actor's
    int64_t ppo_micro_batch_size_per_rank = 8;
    int64_t forward_micro_batch_size_per_rank = 32;
};

struct RewardModelConfig {
    bool enable = false;
    std::string model_path;
    int64_t micro_batch_size_per_rank = 32;
};

struct KlCtrlConfig {
    std::string type = "fixed";  // fixed | adaptive
    double kl_coef = 0.001;
    double horizon = 10000;
    double target_kl = 0.1;
};

struct FilterGroupsConfig {
    bool enable = false;
    // acc | score (the scorer's score) | seq_reward (Σ token_level_scores: score + reward model +
    // overlong penalty) | seq_final_reward (Σ token_level_rewards; = seq_reward without KL in reward)
    std::string metric = "acc";
    int64_t max_num_gen_batches = 0;  // 0: unlimited
};

// algorithm.rollout_correction (verl's names and yaml defaults, ALGORITHMS §6): off-policy
// correction between the rollout's log-probs (rollout.calculate_log_probs) and the actor's old
// log-probs, once per training batch. It runs whenever the batch has rollout log-probs: with
// rollout_is and rollout_rs null it only logs the rollout_corr/* diagnostics.
struct RolloutCorrectionConfig {
    std::optional<std::string> rollout_is;    // null | token | sequence: IS weights for the policy loss
    std::string rollout_is_threshold = "2";   // U (truncated IS: min(w, U)) or "L_U" (IcePop: 0 outside [L, U])
    bool rollout_is_batch_normalize = false;  // divide the weights by their batch mean
    std::optional<std::string> rollout_rs;    // null | comma list: token_k1, seq_mean_k3, ... (rejection sampling)
    std::optional<std::string> rollout_rs_threshold;  // one spec for all options, or one per option
    // true: no old-log-prob pass; old_log_probs := the rollout's log-probs (PPO ratio π_θ/π_rollout).
    // rlpt then applies no IS/RS and logs no rollout_corr metrics (verl computes them per micro-batch
    // inside the actor); loss_type must be ppo_clip (reinforce is not implemented).
    bool bypass_mode = false;
    std::string loss_type = "ppo_clip";
};

struct AlgorithmConfig {
    std::string adv_estimator = "grpo";
    // The estimators' hyperparameters (algo's struct): algorithm.gamma, lam, norm_adv_by_std_in_grpo
    // and gdpo_reward_weights; the trainer passes it whole to the estimator.
    algo::AdvantageParams advantage;
    bool use_kl_in_reward = false;
    std::string kl_penalty = "kl";
    KlCtrlConfig kl_ctrl;
    FilterGroupsConfig filter_groups;
    // gdpo: the per-sample reward components normalised separately (score, acc, or a number a
    // scorer reports in ScoreResult::extra); their weights are advantage.gdpo_weights.
    std::vector<std::string> gdpo_reward_keys;
    RolloutCorrectionConfig rollout_correction;
};

struct OverlongBufferConfig {
    bool enable = false;
    int64_t len = 0;
    double penalty_factor = 1.0;
};

// Scorers (what `reward.scorer` / `reward.scorers` values name; README "Rewards" has the table):
//   number      the response's last number (or the whole response, extraction: whole) equals the
//               ground truth as an exact decimal ("3.50" == "3.5"); 1, else 0
//   exact       the whole response equals the ground truth as text (surrounding whitespace
//               ignored); 1, else 0
//   gsm8k       verl's GSM8K rule: the number after the last "#### " (strict) or the last number
//               (method: flexible) in the response's last 300 characters, compared as text
//   math        verl's MATH rule: the last \boxed{...} answer, normalised, compared with the
//               normalised ground truth
//   arithmetic  the built-in task: the whole response is one integer equal to the ground truth
//   format      an ICU regex (pattern: ...) matches the response: score 1, else 0 (no accuracy)
//   command     a program speaking JSON lines (reward.command; scripts/examples/reward_server.py runs
//               a verl compute_score(data_source, solution_str, ground_truth, extra_info) unchanged)
//   user        a C shared library (reward.custom_library; include/rlpt/reward/user_scorer.h)
// A map value is a name or a spec with options ({type: number, extraction: whole},
// {type: command, command: "python3 my_server.py"}; reward/registry.h lists them all).
struct RewardConfig {
    std::string scorer = "auto";  // auto: by data_source (built-ins + reward.scorers); or one name for all
    // data_source -> scorer name, or a spec (kept as JSON text); wins over reward.scorer.
    std::map<std::string, std::string> scorers;
    std::string command;              // the `command` scorer's program (run with /bin/sh -c), one per process
    double command_timeout_s = 60.0;  // a batch the command has not scored within this is an error
    std::string custom_library;       // user scorer .so (C ABI, include/rlpt/reward/user_scorer.h)
    double format_score = 0.0;
    OverlongBufferConfig overlong_buffer;
};

struct SftConfig {
    int64_t total_steps = 300;
    int64_t batch_size = 64;  // samples per optimizer step (all DP ranks)
    int64_t micro_batch_size_per_rank = 32;
    OptimConfig optim{1e-3, 0.9, 0.95, 1e-8, 0.0, 20, 0.0, "cosine", 0.1};
    int64_t eval_every = 100;      // greedy accuracy on the validation set; 0: only at the end
    std::string output_model_dir;  // where the trained policy is written (HF format)
};

struct TrainerConfig {
    std::string mode = "rl";            // rl | sft
    std::string project_name = "rlpt";  // names the run in the start-up log line (no tracker)
    std::string experiment_name = "run";
    std::string output_dir = "runs";  // run directory: <output_dir>/<experiment_name>
    int64_t total_epochs = 1;
    std::optional<int64_t> total_training_steps;  // null: epochs x batches per epoch
    int64_t save_freq = -1;
    int64_t test_freq = -1;
    bool val_before_train = true;
    std::string resume = "auto";  // auto | disable | <checkpoint dir>
    int64_t max_checkpoints = 3;
    int64_t critic_warmup = 0;
    bool balance_batch = true;
    int64_t seed = 1;
    std::string log_level = "info";
    int64_t threads_per_rank = 0;  // torch intra-op threads; 0: cores on the node / ranks on the node
    // How collectives on GPU tensors move (gradients, tensor parallelism, weight sync, resharding):
    // nccl | mpi (staged through host memory) | auto (nccl in builds with NCCL, else mpi). NCCL
    // needs each GPU rank on its own GPU; mpi also lets several ranks share one GPU (a one-GPU node
    // running a multi-rank layout). include/rlpt/comm/device.h has the GPU map's rules.
    std::string device_collectives = "auto";
    double call_timeout_s = 3600.0;  // a role call that takes longer aborts the job
    double stall_warn_s = 60.0;      // warn, naming the silent ranks, after this long
    // Where metrics go (verl's trainer.logger): console (a progress line per step), jsonl
    // (<run>/metrics.jsonl), tensorboard (<run>/tensorboard/events.out.tfevents.*).
    std::vector<std::string> logger{"console", "jsonl"};
    bool export_hf = true;        // write the final policy as a Hugging Face folder
    int64_t export_hf_freq = -1;  // also every N steps, to <run>/hf_models/step_<N>; -1: never
    // Asynchronous RL (README "Asynchronous RL"): how many actor updates older than the actor that
    // trains on it a batch's weights may be. 0: today's synchronous loop (generate with the newest
    // weights, then train). k >= 1: the rollout ranks generate batch s+1 while the actor trains on
    // batch s, and weights are synced only when needed to stay within k. Needs the rollout on ranks
    // of its own (no actor role on them); samples record their weight version, and a batch older
    // than k is never trained on. Correct for the lag with algorithm.rollout_correction. RL only
    // (trainer.mode=sft ignores it).
    int64_t max_staleness = 0;
};

struct Config {
    TrainerConfig trainer;
    PlacementConfig placement;
    ModelConfig model;
    DataConfig data;
    ActorConfig actor;
    RolloutConfig rollout;
    ReferenceConfig ref;
    CriticConfig critic;
    RewardModelConfig reward_model;
    AlgorithmConfig algorithm;
    RewardConfig reward;
    SftConfig sft;

    // Not part of the YAML: where the config came from, and where each key was set
    // ("configs/grpo.yaml:12", "command line", absent = default).
    std::string source;
    std::map<std::string, std::string> origins;
};

// Reads `path` (or only defaults when empty), applies overrides ("a.b=1", YAML values:
// "x=[1,2]", "y=null"), binds and validates. Throws ConfigError naming key and origin.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// load_config without validate(): binding errors (syntax, unknown keys, types) still throw.
// For `rlpt check`, which reports validate()'s problems together with those of the data.
Config load_config_unchecked(const std::string& path, const std::vector<std::string>& overrides = {});
// Parses YAML text (same rules; `source_name` appears in errors) and validates.
Config config_from_yaml(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides = {});
// Every key with its effective value, as YAML that config_from_yaml reads back identically.
std::string to_yaml(const Config& c);
// Range and cross-field checks; throws ConfigError "<origin>: <key>: <problem>".
void validate(const Config& c);
// Stable hash of the effective config (of to_yaml) for checkpoint compatibility checks.
uint64_t config_hash(const Config& c);
// Where a key was set, for messages: "configs/x.yaml:3", "command line" or "default".
std::string origin_of(const Config& c, const std::string& key);

}  // namespace rlpt
