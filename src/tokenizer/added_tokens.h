#pragma once
// Added-token extraction as Hugging Face's AddedVocabulary does it (private to src/tokenizer).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlpt::tokenizer::detail {

struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;
    bool lstrip = false;       // the match swallows whitespace to its left
    bool rstrip = false;       // ... and to its right
    bool single_word = false;  // only matches when not inside a word
    bool normalized = false;   // matched against normalized text (pass 2)
};

// A text span [begin, end) of the input, and the added token it is (id) or -1 for plain text.
struct Segment {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;
};

// Finds added tokens leftmost-longest (HF uses Aho-Corasick with LeftmostLongest), over a
// byte trie. Immutable after construction, so safe to share between threads.
class AddedTokenMatcher {
  public:
    AddedTokenMatcher() = default;
    // The tokens matched in one pass; each content non-empty and distinct.
    explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

    bool empty() const { return tokens_.empty(); }

    // Covers text with segments in order. Special tokens are skipped (left as text, the scan
    // resuming after them) unless allow_special; rejected single_word matches likewise.
    void split(std::string_view text, bool allow_special, std::vector<Segment>& out) const;

  private:
    struct Node {
        std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node index
        int32_t token = -1;                                       // index into tokens_
    };
    // Longest token starting at pos: index into tokens_ and its end, or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t& end) const;

    std::vector<AddedToken> tokens_;
    std::vector<Node> nodes_;
    bool first_byte_[256] = {};
};

}  // namespace rlpt::tokenizer::detail
