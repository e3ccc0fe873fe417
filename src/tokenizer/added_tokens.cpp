#include "tokenizer/added_tokens.h"

#include "rlpt/core/error.h"
#include "tokenizer/unicode.h"

namespace rlpt::tokenizer::detail {

namespace {

// The code point ending at text[end) (text is valid UTF-8); begin receives its first byte.
char32_t previous_code_point(std::string_view text, size_t end, size_t& begin) {
    begin = end - 1;
    while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
    size_t i = begin;
    char32_t cp = 0;
    if (!utf8_next(text, i, cp)) cp = static_cast<unsigned char>(text[begin]);
    return cp;
}

char32_t next_code_point(std::string_view text, size_t begin, size_t& end) {
    end = begin;
    char32_t cp = 0;
    if (!utf8_next(text, end, cp)) {
        end = begin + 1;
        cp = static_cast<unsigned char>(text[begin]);
    }
    return cp;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
    nodes_.emplace_back();
    for (size_t t = 0; t < tokens_.size(); ++t) {
        const std::string& s = tokens_[t].content;
        RLPT_ASSERT(!s.empty());
        first_byte_[static_cast<unsigned char>(s[0])] = true;
        int32_t node = 0;
        for (char ch : s) {
            const auto b = static_cast<unsigned char>(ch);
            int32_t child = -1;
            for (const auto& [cb, ci] : nodes_[node].children) {
                if (cb == b) {
                    child = ci;
                    break;
                }
            }
            if (child < 0) {
                child = static_cast<int32_t>(nodes_.size());
                nodes_[node].children.emplace_back(b, child);
                nodes_.emplace_back();
            }
            node = child;
        }
        nodes_[node].token = static_cast<int32_t>(t);  // a repeated content keeps the last entry
    }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& end) const {
    int32_t node = 0;
    int32_t best = -1;
    for (size_t i = pos; i < text.size(); ++i) {
        const auto b = static_cast<unsigned char>(text[i]);
        int32_t child = -1;
        for (const auto& [cb, ci] : nodes_[node].children) {
            if (cb == b) {
                child = ci;
                break;
            }
        }
        if (child < 0) break;
        node = child;
        if (nodes_[node].token >= 0) {
            best = nodes_[node].token;
            end = i + 1;
        }
    }
    return best;
}

void AddedTokenMatcher::split(std::string_view text, bool allow_special, std::vector<Segment>& out) const {
    size_t start_offset = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
            ++pos;
            continue;
        }
        size_t stop = 0;
        const int32_t index = longest_at(text, pos, stop);
        if (index < 0) {
            ++pos;
            continue;
        }
        const AddedToken& tok = tokens_[index];
        size_t start = pos;
        pos = stop;
        if (tok.special && !allow_special) continue;
        if (tok.single_word) {
            size_t unused = 0;
            const bool word_before = start > 0 && is_word_char(previous_code_point(text, start, unused));
            const bool word_after = stop < text.size() && is_word_char(next_code_point(text, stop, unused));
            if (word_before || word_after) continue;
        }
        if (tok.lstrip) {
            size_t new_start = start;
            while (new_start > start_offset) {
                size_t cp_begin = 0;
                if (!is_white_space(previous_code_point(text, new_start, cp_begin))) break;
                new_start = cp_begin;
            }
            start = new_start;
        }
        if (tok.rstrip) {
            while (stop < text.size()) {
                size_t cp_end = 0;
                if (!is_white_space(next_code_point(text, stop, cp_end))) break;
                stop = cp_end;
            }
            pos = stop;
        }
        if (start_offset < start) out.push_back({start_offset, start, -1});
        out.push_back({start, stop, tok.id});
        start_offset = stop;
    }
    if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace rlpt::tokenizer::detail
