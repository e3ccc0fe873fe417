#pragma once
// The rollout role: generation. Dispatch table in roles/rollout.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"
#include "rlpt/roles/settings.h"
#include "rlpt/rollout/generators.h"

namespace rlpt::roles {

enum class RolloutMethod : uint16_t {
    kPing = 0,        // one_to_all / all: identity of every rank
    kInit,            // one_to_all / none. RolloutInit (the run's InitArgs, RolloutSettings, the
                      //   stages' encoded appends) and, one row per token id, the string field
                      //   token_text (rollout::token_texts of the run's tokenizer: the text stop
                      //   strings are matched on); app::rollout_init_batch builds it. Uses the
                      //   colocated actor's model when this rank hosts the actor, else builds its
                      //   own (weights come by sync).
    kGenerate,        // dp_split / concat.
                      //   in:  prompt_ids [B, P] int64 left-padded, prompt_mask [B, P]; int field
                      //        sample_index (global index: seeds the sample); optional string fields
                      //        data_source, ground_truth, extra (for generators that use them: the
                      //        agent's environments); GenerateArgs
                      //   out: prompts [B, P], responses/response_mask/rollout_log_probs [B, R=max_new_tokens]
                      //        (multi_stage, tool_agent: response_mask and log-probs 0 on appended
                      //        tokens, which attention_mask covers),
                      //        input_ids/attention_mask/position_ids [B, P+R], int field
                      //        finish_reason (0 eos, 1 stop, 2 length), int field weight_version;
                      //        with rollout.stop set or generator multi_stage, string field
                      //        response_text (each response's text, cut at its stop string, appended
                      //        text included: what the reward scorers read); with a mixture-of-experts
                      //        model, routed_experts [B, P+R, moe layers, k] int16 (the experts each
                      //        fed position was routed to, -1 elsewhere; -1 everywhere for generators
                      //        other than sampler)
                      //        plus a float64 [B] column per GeneratorContext::sample_values key the
                      //        generator reports (tool_agent: num_turns, tool_call_counts, ...)
    kReceiveWeights,  // one_to_all / none: receive the actor's weights (with ActorMethod::kSendWeights)
    kCount
};

// The sampling of one kGenerate call (rollout::SamplingParams on the wire, plus the seeds), all of
// it assembled by the caller (the trainer: rollout.* for training, rollout.val.* for validation).
struct GenerateArgs {
    double temperature = 1.0;
    double top_p = 1.0;
    int64_t top_k = -1;
    bool greedy = false;
    int64_t max_new_tokens = 1;  // R of every output column
    int64_t eos_id = -1;
    int64_t pad_id = 0;
    std::vector<int64_t> stop_ids;
    std::vector<std::string> stop;            // stop strings (rollout.stop; rollout/stop_strings.h)
    bool include_stop_str_in_output = false;  // rollout.include_stop_str_in_output
    int64_t n = 1;       // samples per prompt in this call: sample_index mod n is a row's rank among
                         // its prompt's samples (the trainer keeps each prompt's indices aligned to n)
    int64_t seed = 0;    // the run seed
    int64_t stream = 0;  // the random stream: a training step, or an offset stream (rlpt/core/rng_streams.h)
    template <typename V>
    void visit(V& v) {
        v("temperature", temperature);
        v("top_p", top_p);
        v("top_k", top_k);
        v("greedy", greedy);
        v("max_new_tokens", max_new_tokens);
        v("eos_id", eos_id);
        v("pad_id", pad_id);
        v("stop_ids", stop_ids);
        v("stop", stop);
        v("include_stop_str_in_output", include_stop_str_in_output);
        v("n", n);
        v("seed", seed);
        v("stream", stream);
    }
};

const protocol::RoleSpec& rollout_spec();

// The rollout's settings (include/rlpt/roles/settings.h says how settings travel), resolved from
// rollout.* by the run plan (app/role_settings.cpp). The sampling of each call is not here: it
// comes with the call (GenerateArgs).
struct RolloutSettings {
    ModelSettings model;       // the model of an own copy (a rollout not sharing the actor's); its path
                               // is where the tool agent loads the tokenizer from (no charset given)
    std::string dtype;         // rollout.dtype: auto (model.dtype) | float32 | bfloat16
    std::string generator;     // rollout.generator: a row of roles/generator_table.h
    int64_t max_num_seqs = 1;  // rollout.max_num_seqs: sequences decoded together
    std::optional<int64_t> max_num_batched_tokens;  // rollout.max_num_batched_tokens: unset, max_num_seqs slots
    // The generators' typed arguments: rollout.beam_search, rollout.stages (append_ids empty:
    // kInit's RolloutInitArgs carries them), rollout.multi_turn and the model.chat_template the
    // tool agent formats turns with.
    rollout::GeneratorArgs generators;
    WeightSyncSettings weight_sync;  // how an own copy receives the actor's weights
    template <typename V>
    void visit(V& v) {
        v("model", model);
        v("dtype", dtype);
        v("generator", generator);
        v("max_num_seqs", max_num_seqs);
        v("max_num_batched_tokens", max_num_batched_tokens);
        v("generators", generators);
        v("weight_sync", weight_sync);
    }
};

// kInit's rollout arguments: the token ids of each rollout.stages[i].append, encoded by the
// controller with the run's tokenizer (special-token text allowed), concatenated, and their
// lengths (one per stage).
struct RolloutInitArgs {
    std::vector<int64_t> append_ids;
    std::vector<int64_t> append_lengths;
    template <typename V>
    void visit(V& v) {
        v("append_ids", append_ids);
        v("append_lengths", append_lengths);
    }
};

// ArgsOf<kInit>: protocol::InitWith<RolloutSettings> plus the stage appends.
struct RolloutInit {
    protocol::InitWith<RolloutSettings> init;
    RolloutInitArgs appends;
    template <typename V>
    void visit(V& v) {
        init.visit(v);
        appends.visit(v);
    }
};

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::RolloutMethod> {
    static constexpr const char* kName = "rollout";
};
template <>
struct rlpt::protocol::ArgsOf<rlpt::roles::RolloutMethod::kInit> {
    using type = rlpt::roles::RolloutInit;
};
template <>
struct rlpt::protocol::ArgsOf<rlpt::roles::RolloutMethod::kGenerate> {
    using type = rlpt::roles::GenerateArgs;
};
