#pragma once
// File and JSON helpers shared by the tokenizers (private to src/tokenizer).

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::tokenizer::detail {

std::string path_join(const std::string& dir, const std::string& name);
std::string parent_dir(const std::string& path);
bool is_regular_file(const std::string& path);

// Whole file; IoError "cannot read <path>: <reason>".
std::string read_text_file(const std::string& path);
// Writes via <path>.tmp + rename so a reader never sees half a file; IoError on failure.
void write_text_file(const std::string& path, const std::string& text);
// Creates dir and its parents; IoError on failure.
void make_dirs(const std::string& dir);

// IoError "<source>: invalid JSON: <parser message>" (also for numbers out of range and
// nesting deeper than 64 levels).
nlohmann::json parse_json(const std::string& text, const std::string& source);

// The special-id rules of bpe_tokenizer.h for the model directory `dir`. lookup maps a token
// string to its id (-1 when absent). Fields no file names keep the values in `defaults`.
SpecialTokenIds resolve_special_ids(const std::string& dir, const std::function<int64_t(std::string_view)>& lookup,
                                    int64_t vocab_size, SpecialTokenIds defaults);

}  // namespace rlpt::tokenizer::detail
