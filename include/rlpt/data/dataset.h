#pragma once
// Reading prompt datasets from JSON Lines (.jsonl) or JSON (.json) files into Examples.
// Torch-free. Pre-tokenised HDF5 datasets are not read here.
//
// One record (a JSON object) gives one Example:
//   prompt        = record[prompt_key] (a string), then prompt_template / prompt_suffix
//   ground_truth  = record[answer_key] (a string or a number, numbers as their JSON text),
//                   optionally run through the answer extraction; see `answer` for records
//                   without one
//   response      = record[response_key] (a string) when response_key is set and the record
//                   has it; required with require_response
//   data_source   = record[data_source_key] (a string) or default_data_source when the key
//                   is absent (or data_source_key is "")
//   extra         = {key: record[key] for key in extra_keys} (an object, possibly empty)
//   index         = 0-based record number in the file
// Keys may be dotted paths into nested objects: "reward_model.ground_truth" reads
// record["reward_model"]["ground_truth"].
//
// Errors are IoError and name "<file>:<line>" and the key: unreadable file, bad JSON,
// a record that is not an object, a missing key, a value of the wrong type, an answer the
// extraction cannot parse, an empty dataset. Options that make no sense are ConfigError.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlpt/data/example.h"

namespace rlpt::data {

enum class AnswerExtraction {
    kNone,   // the answer field is the ground truth
    kGsm8k,  // GSM8K worked solution -> the number after its last "#### ", commas removed
};

// "none" | "gsm8k"; anything else throws ConfigError.
AnswerExtraction parse_answer_extraction(const std::string& s);

// What a record without answer_key gets. A stage asks only for the keys it uses.
enum class AnswerNeed {
    kRequired,    // an error naming the file, line and key (RL data: the scorer needs it)
    kOrResponse,  // the response (response_key) is the ground truth; error when both are missing
    kOptional,    // ground_truth "" (SFT training data: only prompt and response are used)
};

struct DatasetOptions {
    std::string prompt_key = "prompt";
    std::string answer_key = "ground_truth";
    AnswerNeed answer = AnswerNeed::kRequired;
    std::string response_key;                     // "" -> not read
    bool require_response = false;                // a record without response_key is an error
    std::string data_source_key = "data_source";  // "" -> always default_data_source
    std::string default_data_source;              // "" -> every record must carry data_source_key
    std::vector<std::string> extra_keys;          // copied into Example::extra under the same key
    AnswerExtraction answer_extraction = AnswerExtraction::kNone;
    // "" or a text containing "{prompt}" exactly once, which is replaced by the prompt.
    std::string prompt_template;
    // Appended after the template is applied.
    std::string prompt_suffix;
};

// Throws ConfigError on empty prompt/answer keys or a template without exactly one "{prompt}".
void validate_dataset_options(const DatasetOptions& options);

// verl's GSM8K instruction (examples/data_preprocess/gsm8k.py), appended after a space.
inline constexpr std::string_view kGsm8kInstruction =
    "Let's think step by step and output the final answer after \"####\".";

// Options for the raw openai/grade-school-math files ({"question", "answer"} lines), giving
// the same prompts and ground truths as verl's preprocessing: prompt = question + " " +
// kGsm8kInstruction, ground_truth = extracted answer, data_source "openai/gsm8k".
DatasetOptions gsm8k_dataset_options();

// The GSM8K answer of a worked solution: the last match of "#### (-?[0-9.,]+)" with commas
// removed, or nullopt when there is none. ("...\n#### 1,234" -> "1234")
std::optional<std::string> gsm8k_extract_answer(std::string_view solution);

// Reads `path`: ".jsonl" as JSON Lines (blank lines skipped); ".json" as a JSON array of
// objects when its first non-blank character is '[', else as JSON Lines (the format
// Hugging Face datasets' to_json writes). Other extensions throw ConfigError.
std::vector<Example> load_dataset(const std::string& path, const DatasetOptions& options);

// Converts one parsed record. `where` prefixes error messages ("train.jsonl:12").
Example example_from_json(const nlohmann::json& record, const DatasetOptions& options, const std::string& where,
                          int64_t index);

}  // namespace rlpt::data
