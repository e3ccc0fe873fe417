#pragma once
// The controller's data side: tokenizer, datasets, scorers, and the Batches that carry
// prompts to the rollout and responses to the scorers. Private to src/app.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/batch/batch.h"
#include "rlpt/config/config.h"
#include "rlpt/data/example.h"
#include "rlpt/protocol/args.h"
#include "rlpt/reward/registry.h"
#include "rlpt/tokenizer/chat_template.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::app {

struct TaskData {
    std::unique_ptr<tokenizer::Tokenizer> tok;
    tokenizer::ChatFamily chat = tokenizer::ChatFamily::kNone;
    tokenizer::ChatOptions chat_options;  // model.apply_chat_template_kwargs
    std::vector<data::Example> train;
    std::vector<data::Example> val;
    std::vector<std::vector<int64_t>> train_ids;  // tokenised prompts (chat template applied)
    std::vector<std::vector<int64_t>> val_ids;
    reward::ScorerRegistry scorers;
    int64_t eos_id = -1;
    int64_t pad_id = 0;
    std::vector<int64_t> stop_ids;  // eos + the chat template's end-of-turn tokens + rollout.stop_token_ids
    // rollout.generator tool_agent: the tools the prompts list (agent::list_tool_schemas).
    std::vector<nlohmann::json> tools;
};

// Loads the train/validation data (JSONL files or the built-in task), the tokenizer
// (model.path's; with the built-in model the built-in task's characters, or every character
// of the data files), tokenises prompts and filters those longer than data.max_prompt_length
// (logging a report), and builds the scorer registry from the reward section, checking that
// every data_source the run scores has a scorer. Each part below is also called on its own by
// `rlpt check`.
TaskData load_task(const Config& c);

// The records of data.train_files (validation=false) or data.val_files, read with the keys the
// stage uses (trainer.mode; see DataConfig in config.h); the built-in task when train_files is
// empty. Errors name the file, line and key.
std::vector<data::Example> load_examples(const Config& c, bool validation);

// model.path's tokenizer; for the built-in model, the character tokenizer of the built-in task,
// or (data.train_files set) one of every character in the examples' prompts, responses and
// answers.
std::unique_ptr<tokenizer::Tokenizer> make_tokenizer(const Config& c, const std::vector<data::Example>& train,
                                                     const std::vector<data::Example>& val);

// kInit's arguments for the roles: the vocabulary size, the run's training steps, and the
// character tokenizer's charset and words when the run uses one (the rollout's agent loop
// rebuilds it from them).
protocol::InitArgs role_init_args(const TaskData& t, int64_t total_steps);

// A prompt's token ids (the chat template applied when model.chat_template is set).
std::vector<int64_t> encode_prompt(const TaskData& t, const std::string& prompt);

// Tokenises prompts (chat template applied), filters or truncates those over
// data.max_prompt_length; the number filtered out is returned (logged as a warning).
int64_t prepare_prompts(const TaskData& t, const Config& c, std::vector<data::Example>& examples,
                        std::vector<std::vector<int64_t>>& ids, const char* split);

// The registry the reward section describes: built-in data_sources, reward.scorer for all,
// reward.scorers per data_source (names or specs), reward.command, reward.custom_library.
reward::ScorerRegistry scorers_from_config(const Config& c);

// The data_sources of `examples` the registry cannot score, each with how many rows use it.
std::map<std::string, int64_t> unscored_data_sources(const reward::ScorerRegistry& scorers,
                                                     const std::vector<data::Example>& examples);

// A Batch of prompts for the rollout: rows = examples x n (each prompt's n samples adjacent),
// prompt_ids/prompt_mask [B, P] left-padded; string fields uid, data_source, ground_truth,
// extra (JSON); int field sample_index = first_sample_index + row.
Batch make_prompt_batch(const TaskData& t, const std::vector<const data::Example*>& examples,
                        const std::vector<const std::vector<int64_t>*>& prompt_ids, int64_t n,
                        int64_t first_sample_index);

struct ScoredResponses {
    std::vector<double> score;  // per row
    std::vector<double> acc;    // per row; NaN when the scorer gives no accuracy
    std::vector<std::string> text;
    // ScoreResult::extra by key, one value per row (NaN for rows whose scorer did not report it).
    std::map<std::string, std::vector<double>> extra;
};

// Decodes each row's response tokens (response_mask, special tokens skipped), or takes the
// rollout's string field response_text when the batch has it (stop strings: the text cut at the
// stop string, rollout/stop_strings.h), and scores it with the registry (data_source,
// ground_truth, extra of the row).
ScoredResponses score_responses(const TaskData& t, const Batch& b);

// [B, R] fp32 with score[i] at row i's last response token with response_mask 1 (zeros
// elsewhere): the last token the policy produced, also when appended tokens (mask 0) follow.
torch::Tensor token_level_scores(const std::vector<double>& score, const torch::Tensor& response_mask);

// "reward.scorers: data_source 'x' (n rows) has no scorer; set one, e.g. ..." (load_task, rlpt check).
std::string unscored_message(const std::string& data_source, int64_t rows);

// Validation metrics per data_source with verl's names (val-core/<ds>/acc/mean@<n>,
// val-core/<ds>/reward/mean@<n>, val-aux/<ds>/acc/best@<n>/mean for n > 1), accumulated over
// chunks of generated and scored rows (each prompt's n samples adjacent). With a tool_agent
// rollout also val-aux/tool_call_rate (share of samples with at least one tool call) and
// val-aux/tool_call_counts/mean.
class ValidationTally {
  public:
    void add(const Batch& generated, const ScoredResponses& scored);
    std::map<std::string, double> metrics(int64_t n) const;

  private:
    std::map<std::string, std::vector<double>> score_, acc_;
    std::vector<double> tool_calls_;  // per sample, when the rollout reports tool_call_counts
};

}  // namespace rlpt::app
