#pragma once
// The rollout role: generation. Dispatch table in roles/rollout.cpp.
#include <cstdint>

#include <string>
#include <vector>

#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"

namespace rlpt::tokenizer {
class Tokenizer;
}

namespace rlpt::roles {

enum class RolloutMethod : uint16_t {
    kPing = 0,        // one_to_all / all: identity of every rank
    kInit,            // one_to_all / none. protocol::InitArgs, RolloutInitArgs and, one row per
                      //   token id, the string field token_text (rollout::token_texts of the run's
                      //   tokenizer: the text stop strings are matched on); build it with
                      //   rollout_init_batch. Resolves rollout.generator and its typed arguments. Uses the
                      //   colocated actor's model when this rank hosts the actor, else builds its
                      //   own (weights come by sync).
    kGenerate,        // dp_split / concat.
                      //   in:  prompt_ids [B, P] int64 left-padded, prompt_mask [B, P]; int field
                      //        sample_index (global index: seeds the sample); optional string fields
                      //        data_source, ground_truth, extra (for generators that use them: the
                      //        agent's environments); GenerateArgs
                      //   out: prompts [B, P], responses/response_mask/rollout_log_probs [B, R=max_new_tokens],
                      //        input_ids/attention_mask/position_ids [B, P+R], int field
                      //        finish_reason (0 eos, 1 stop, 2 length), int field weight_version;
                      //        with rollout.stop set, string field response_text (each response's
                      //        text cut at its stop string: what the reward scorers read)
                      //        plus a float64 [B] column per GeneratorContext::sample_values key the
                      //        generator reports (tool_agent: num_turns, tool_call_counts, ...)
    kReceiveWeights,  // one_to_all / none: receive the actor's weights (with ActorMethod::kSendWeights)
    kCount
};

// The sampling of one kGenerate call (rollout::SamplingParams on the wire, plus the seeds).
struct GenerateArgs {
    double temperature = 1.0;
    double top_p = 1.0;
    int64_t top_k = -1;
    bool greedy = false;
    int64_t max_new_tokens = 1;  // R of every output column
    int64_t eos_id = -1;
    int64_t pad_id = 0;
    std::vector<int64_t> stop_ids;
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
        v("n", n);
        v("seed", seed);
        v("stream", stream);
    }
};

const protocol::RoleSpec& rollout_spec();

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

// kInit's input for the run's tokenizer: `args`, the token texts (one row per id) and the
// encoded stage appends. ConfigError naming rollout.stages when the stages' max_tokens plus
// their appended tokens exceed data.max_response_length.
Batch rollout_init_batch(const protocol::InitArgs& args, const Config& c, const tokenizer::Tokenizer& tok);

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::RolloutMethod> {
    static constexpr const char* kName = "rollout";
};
