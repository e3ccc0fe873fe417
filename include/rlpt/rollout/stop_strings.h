#pragma once
// Stop strings: vLLM's SamplingParams.stop and include_stop_str_in_output, matched on the text
// of a response while it is generated, one token at a time. Torch-free.
//
// Text. A response's text is the concatenation of its tokens' bytes, TokenTexts[id] (made by
// token_texts(): Tokenizer::token_bytes, and "" for special tokens, as vLLM's default
// skip_special_tokens=True), shown as UTF-8 with invalid sequences replaced by U+FFFD (what
// Tokenizer::decode(ids, skip_special_tokens=true) returns for byte-level BPE and character
// tokenizers). Ids without an entry (a model's padded embedding rows) add no text.
//
// Matching. After each token, StopStringMatcher::push looks for stop strings that end inside the
// bytes this token added (so a stop string spanning several tokens, or ending in the middle of
// one, is found). When several do, the one that ends first wins, then the one that starts first
// (the longest): the match a reader scanning the text character by character meets first,
// independent of the order of the list. Matching is on bytes; a valid UTF-8 stop string matches
// exactly where it occurs as characters (UTF-8 is self-synchronising).
//
// What is kept (the contract RL relies on):
//   * tokens: every sampled token up to and including the one that completed the stop string
//     stays in the response, with its log-prob and response_mask 1, whatever
//     include_stop_str_in_output says. They are what the policy sampled: cutting a token in two,
//     or dropping the tokens that spell the stop string, would leave ids, log-probs and mask that
//     no longer describe one sampled sequence (the importance ratio and the KL would be computed
//     on tokens the policy never chose, or the stop string would cost nothing to produce).
//   * text (visible_text, what reward scorers and `rlpt generate` see): the text up to the start
//     of the stop string (include_stop_str_in_output = false, vLLM's default) or up to its end
//     (true); the rest of the token that completed it is dropped, as vLLM's output.text.
// Compared with verl: verl trains on vLLM's token_ids, which keep the stop string's tokens as here,
// but decodes those ids again for the reward, so there include_stop_str_in_output changes nothing;
// here the scorers see vLLM's text, so the flag does what its name says.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlpt::tokenizer {
class Tokenizer;
}

namespace rlpt::rollout {

// The bytes each token id adds to a response's text, indexed by id.
using TokenTexts = std::vector<std::string>;

// One entry per id in [0, tok.vocab_size()): token_bytes(id), "" for special tokens and for ids
// that name no token.
TokenTexts token_texts(const tokenizer::Tokenizer& tok);

// Bytes as UTF-8 text, each invalid sequence replaced by U+FFFD (what decode() shows).
std::string utf8_text(std::string_view bytes);

// ValueError "<key>: stop string <i> is empty" (an empty string would stop every response at
// once; vLLM refuses it too).
void validate_stop_strings(const std::vector<std::string>& stop, const char* key);

// One response's text and its stop-string state. Holds pointers to the stop list and the token
// texts: both must outlive it (they belong to the generate call). A default-constructed matcher
// is inactive: push() does nothing and returns false, visible_text() is "".
class StopStringMatcher {
  public:
    StopStringMatcher() = default;
    // `stop` may be empty (the text is still collected); texts must not be null.
    StopStringMatcher(const std::vector<std::string>* stop, const TokenTexts* texts, bool include_stop_str_in_output);

    bool active() const { return texts_ != nullptr; }
    // Appends token `id`'s text. True exactly once: when this token completes a stop string
    // (later calls after a match only append text and return false). id >= 0.
    bool push(int64_t id);
    bool stopped() const { return match_ != nullptr; }
    // The stop string that matched (nullptr when none did).
    const std::string* matched() const { return match_; }
    // The response text as UTF-8, cut at the stop string as the header comment says.
    std::string visible_text() const;
    // How many bytes of raw_text() visible_text() shows (all of them when nothing matched).
    size_t visible_bytes() const { return match_ ? cut_ : text_.size(); }
    // Every byte pushed so far (not cut; may end inside a UTF-8 character).
    const std::string& raw_text() const { return text_; }

  private:
    const std::vector<std::string>* stop_ = nullptr;
    const TokenTexts* texts_ = nullptr;
    bool include_ = false;
    std::string text_;
    const std::string* match_ = nullptr;
    size_t cut_ = 0;  // visible bytes once matched
};

}  // namespace rlpt::rollout
