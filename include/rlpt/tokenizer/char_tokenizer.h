#pragma once
// One token per character (Unicode code point), for the built-in tiny tasks (arithmetic).
// Torch-free.
//
// Ids: <pad> = 0, <bos> = 1, <eos> = 2 (all three special), then the charset's characters
// in the order given, from 3, then the optional words (multi-character tokens, e.g. "<tool_call>")
// in the order given. vocab_size() = 3 + characters + words.
// Words are ordinary (non-special) tokens matched before characters, longest first, in every
// encode (also allow_special=false, as Hugging Face matches non-special added tokens); their
// characters need not be in the charset. A word has at least two characters, no '\n', and
// appears once.
// A character outside the charset is an error (ValueError naming the character and its byte
// offset); there is no <unk>, so a typo in a task's charset fails loudly instead of training
// on unknown tokens. With allow_special the literal text "<pad>", "<bos>", "<eos>" becomes
// the special id; otherwise those characters must be in the charset.
//
// Saved format (save(dir)): a valid Hugging Face tokenizer.json
//   model:        {"type": "BPE", "vocab": {"<pad>": 0, "<bos>": 1, "<eos>": 2, "a": 3, ...},
//                  "merges": [], "unk_token": null, "ignore_merges": false, ...}
//   added_tokens: <pad>, <bos>, <eos> with special=true, normalized=false; each word with
//                 special=false, normalized=false (and in the vocab after the characters)
//   normalizer: null, pre_tokenizer: null, post_processor: null, decoder: {"type": "Fuse"}
// With no pre-tokenizer and no merges, HF's BPE maps every character of the text to its own
// vocabulary id, so HF `tokenizers` encodes the same ids (HF silently drops characters outside
// the vocabulary where this class throws). tokenizer_config.json: PreTrainedTokenizerFast with
// bos/eos/pad_token, plus "rlpt_tokenizer": "char", which load_tokenizer() uses to pick this
// class (HF ignores the key).

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::tokenizer {

class CharTokenizer final : public Tokenizer {
  public:
    static constexpr int64_t kPadId = 0;
    static constexpr int64_t kBosId = 1;
    static constexpr int64_t kEosId = 2;
    static constexpr int64_t kFirstCharId = 3;

    // charset: UTF-8, each character once (ValueError for empty, invalid UTF-8 or a duplicate).
    explicit CharTokenizer(std::string_view charset, std::vector<std::string> words = {});
    // Reads what save() wrote; IoError naming the file for anything else.
    static std::unique_ptr<CharTokenizer> load(const std::string& dir);

    std::vector<int64_t> encode(std::string_view text, bool allow_special = true) const override;
    using Tokenizer::decode;
    std::string decode(const int64_t* ids, size_t n, bool skip_special_tokens = false) const override;
    std::string token_bytes(int64_t id) const override;
    int64_t vocab_size() const override { return kFirstCharId + static_cast<int64_t>(chars_.size() + words_.size()); }
    SpecialTokenIds special_ids() const override { return {kBosId, kEosId, kPadId}; }
    std::string id_to_token(int64_t id) const override;
    int64_t token_to_id(std::string_view token) const override;
    bool is_special(int64_t id) const override { return id >= 0 && id < kFirstCharId; }
    void save(const std::string& dir) const override;
    std::string_view kind() const override { return "char"; }

    // The charset as given to the constructor.
    const std::string& charset() const { return charset_; }
    // The words as given to the constructor.
    const std::vector<std::string>& words() const { return words_; }

  private:
    std::string charset_;
    std::vector<std::string> chars_;                  // UTF-8 of each character, by id - 3
    std::unordered_map<char32_t, int64_t> char_ids_;  // code point -> id
    std::vector<std::string> words_;                  // by id - 3 - chars_.size()
    std::vector<size_t> words_by_length_;             // indices into words_, longest first
    // The id of the token at text[i] (a word or a character) and its byte length; -1 if none.
    std::pair<int64_t, size_t> match(std::string_view text, size_t i) const;
};

// The distinct characters of `texts`, sorted by code point: a charset for CharTokenizer that
// covers every text (a task's prompts, responses and answers). ValueError for invalid UTF-8.
// The result is the same whatever the order of the texts.
std::string charset_of(const std::vector<std::string_view>& texts);

}  // namespace rlpt::tokenizer
