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
#include "rlpt/reward/registry.h"
#include "rlpt/tokenizer/chat_template.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::app {

struct TaskData {
    std::unique_ptr<tokenizer::Tokenizer> tok;
    tokenizer::ChatFamily chat = tokenizer::ChatFamily::kNone;
    std::vector<data::Example> train;
    std::vector<data::Example> val;
    std::vector<std::vector<int64_t>> train_ids;  // tokenised prompts (chat template applied)
    std::vector<std::vector<int64_t>> val_ids;
    reward::ScorerRegistry scorers;
    int64_t eos_id = -1;
    int64_t pad_id = 0;
    std::vector<int64_t> stop_ids;  // eos + the chat template's end-of-turn tokens + rollout.stop_token_ids
};

// Loads the tokenizer (model.path, or the character tokenizer of the built-in task),
// the train/validation data (JSONL files or the built-in task), tokenises prompts and
// filters those longer than data.max_prompt_length (logging a report), and builds the
// scorer registry from the reward section.
TaskData load_task(const Config& c);

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

// Decodes each row's response tokens (response_mask, special tokens skipped) and scores it
// with the registry (data_source, ground_truth, extra of the row).
ScoredResponses score_responses(const TaskData& t, const Batch& b);

// [B, R] fp32 with score[i] at row i's last response token (zeros elsewhere).
torch::Tensor token_level_scores(const std::vector<double>& score, const torch::Tensor& response_mask);

}  // namespace rlpt::app
