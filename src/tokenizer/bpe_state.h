#pragma once
// BpeTokenizer's state (private to src/tokenizer): built by bpe_config.cpp from
// tokenizer.json or GPT-2's files, used by bpe_tokenizer.cpp.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "rlpt/tokenizer/bpe_tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"

namespace rlpt::tokenizer::detail {

struct BpeState {
    enum class Decoder { kNone, kByteLevel, kFuse };

    std::string source;  // what error messages call the tokenizer ("tokenizer.json '/m/tokenizer.json'")
    std::unique_ptr<BpeModel> model;
    PreTokenizer pre_tokenizer;
    bool nfc = false;
    Decoder decoder = Decoder::kNone;

    std::vector<AddedToken> added_tokens;
    std::unordered_map<std::string, int32_t> added_by_content;
    AddedTokenMatcher raw_matcher;         // normalized=false tokens, on the input
    AddedTokenMatcher normalized_matcher;  // normalized=true tokens, on normalized text

    // Indexed by id, vocab_size() entries.
    std::vector<std::string> tokens;   // token string; empty for ids that name no token
    std::vector<std::string> decoded;  // what the decoder makes of the token alone
    std::vector<uint8_t> flags;        // kHasToken | kSpecial
    static constexpr uint8_t kHasToken = 1;
    static constexpr uint8_t kSpecial = 2;

    SpecialTokenIds special;

    std::string tokenizer_json;    // text to save; empty: generate from vocab + merges
    std::string tokenizer_config;  // original tokenizer_config.json text, or empty

    int64_t lookup(std::string_view token) const;
};

// Builds everything from a parsed tokenizer.json. IoError prefixed with `source`.
std::unique_ptr<BpeState> build_from_tokenizer_json(const nlohmann::json& root, const std::string& source);
// GPT-2's original files.
std::unique_ptr<BpeState> build_from_gpt2_files(const std::string& encoder_json_path,
                                                const std::string& vocab_bpe_path);
// A Hugging Face tokenizer.json equivalent to a tokenizer built from GPT-2's files.
std::string gpt2_tokenizer_json(const BpeState& impl);

}  // namespace rlpt::tokenizer::detail
