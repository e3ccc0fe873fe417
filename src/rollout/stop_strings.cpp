#include "rlpt/rollout/stop_strings.h"

#include "rlpt/core/error.h"
#include "rlpt/tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace rlpt::rollout {

TokenTexts token_texts(const tokenizer::Tokenizer& tok) {
    TokenTexts out(static_cast<size_t>(tok.vocab_size()));
    for (int64_t id = 0; id < tok.vocab_size(); ++id)
        if (!tok.is_special(id)) out[static_cast<size_t>(id)] = tok.token_bytes(id);
    return out;
}

std::string utf8_text(std::string_view bytes) { return tokenizer::detail::utf8_lossy(bytes); }

void validate_stop_strings(const std::vector<std::string>& stop, const char* key) {
    for (size_t i = 0; i < stop.size(); ++i)
        RLPT_CHECK(!stop[i].empty(), "{}: stop string {} is empty (it would end every response at once)", key, i);
}

StopStringMatcher::StopStringMatcher(const std::vector<std::string>* stop, const TokenTexts* texts,
                                     bool include_stop_str_in_output)
    : stop_(stop), texts_(texts), include_(include_stop_str_in_output) {
    RLPT_ASSERT(stop_ != nullptr && texts_ != nullptr);
}

bool StopStringMatcher::push(int64_t id) {
    if (texts_ == nullptr || id < 0 || static_cast<size_t>(id) >= texts_->size()) return false;
    const std::string& piece = (*texts_)[static_cast<size_t>(id)];
    if (piece.empty()) return false;
    const size_t old = text_.size();
    text_ += piece;
    if (match_ != nullptr) return false;
    // A stop string that ends inside the new bytes starts at >= old - (len - 1).
    size_t best_end = std::string::npos, best_start = 0;
    for (const auto& s : *stop_) {
        const size_t from = old + 1 >= s.size() ? old + 1 - s.size() : 0;
        const size_t pos = text_.find(s, from);
        if (pos == std::string::npos) continue;
        const size_t end = pos + s.size();
        if (end < best_end || (end == best_end && pos < best_start)) {
            best_end = end;
            best_start = pos;
            match_ = &s;
        }
    }
    if (match_ == nullptr) return false;
    cut_ = include_ ? best_end : best_start;
    return true;
}

std::string StopStringMatcher::visible_text() const {
    return utf8_text(std::string_view(text_).substr(0, visible_bytes()));
}

}  // namespace rlpt::rollout
