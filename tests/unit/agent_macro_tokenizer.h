#pragma once
// For agent tests and scripts/bench_agent.sh: a character tokenizer plus "macro" tokens, ids after
// the characters whose text is a whole string (a complete tool call), so that a random-weight
// model samples well-formed tool calls. Declared stop token ids, macros end a turn; the agent loop
// then reads the call from the turn's text. Encoding never produces macros (observations are
// characters). Torch-free.
#include <string>
#include <string_view>
#include <vector>

#include "rlpt/core/error.h"
#include "rlpt/tokenizer/char_tokenizer.h"

namespace rlpt::agent::testing {

class MacroTokenizer final : public tokenizer::Tokenizer {
  public:
    MacroTokenizer(std::string_view charset, std::vector<std::string> macros)
        : chars_(charset), macros_(std::move(macros)) {}
    int64_t first_macro_id() const { return chars_.vocab_size(); }
    std::vector<int64_t> macro_ids() const {
        std::vector<int64_t> ids;
        for (size_t k = 0; k < macros_.size(); ++k) ids.push_back(first_macro_id() + static_cast<int64_t>(k));
        return ids;
    }

    std::vector<int64_t> encode(std::string_view text, bool allow_special = true) const override {
        return chars_.encode(text, allow_special);
    }
    using Tokenizer::decode;
    std::string decode(const int64_t* ids, size_t n, bool skip_special_tokens = false) const override {
        std::string out;
        for (size_t k = 0; k < n; ++k) {
            if (ids[k] >= first_macro_id()) out += token_bytes(ids[k]);
            else out += chars_.decode(ids + k, 1, skip_special_tokens);
        }
        return out;
    }
    std::string token_bytes(int64_t id) const override {
        if (id < first_macro_id()) return chars_.token_bytes(id);
        const auto k = static_cast<size_t>(id - first_macro_id());
        return k < macros_.size() ? macros_[k] : std::string();
    }
    int64_t vocab_size() const override { return chars_.vocab_size() + static_cast<int64_t>(macros_.size()); }
    tokenizer::SpecialTokenIds special_ids() const override { return chars_.special_ids(); }
    std::string id_to_token(int64_t id) const override {
        return id < first_macro_id() ? chars_.id_to_token(id) : token_bytes(id);
    }
    int64_t token_to_id(std::string_view token) const override { return chars_.token_to_id(token); }
    bool is_special(int64_t id) const override { return chars_.is_special(id); }
    void save(const std::string&) const override { throw ValueError("MacroTokenizer: a test tokenizer is not saved"); }
    std::string_view kind() const override { return "macro"; }

  private:
    tokenizer::CharTokenizer chars_;
    std::vector<std::string> macros_;
};

}  // namespace rlpt::agent::testing
