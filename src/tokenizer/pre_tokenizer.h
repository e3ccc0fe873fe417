#pragma once
// Hugging Face pre-tokenizers Split and ByteLevel over ICU regular expressions (private to
// src/tokenizer).

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unicode/uversion.h>

U_NAMESPACE_BEGIN
class RegexPattern;
U_NAMESPACE_END

namespace rlpt::tokenizer::detail {

// GPT-2's pattern, used by ByteLevel with use_regex=true (and by GPT-2's original files).
extern const char* const kGpt2Pattern;

// A compiled pattern. ICU's \s and \S are Unicode White_Space, as Oniguruma's (what HF
// `tokenizers` uses) are, so HF patterns run unchanged. Thread-safe: each call makes its own
// matcher.
class RegexSplitter {
  public:
    // literal: the pattern is a plain string (HF's {"String": ...}). Throws ValueError with
    // ICU's message (and the offset) when the pattern does not compile.
    RegexSplitter(const std::string& pattern, bool literal);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Covers text (valid UTF-8) with (byte range, is_match) spans in order, as HF's
    // Pattern::find_matches does. Empty matches are ignored.
    void find_matches(std::string_view text, std::vector<std::pair<std::pair<size_t, size_t>, bool>>& out) const;

  private:
    std::unique_ptr<icu::RegexPattern> pattern_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
// "Isolated", ... as in tokenizer.json; false for an unknown name.
bool parse_split_behavior(const std::string& name, SplitBehavior& out);

struct PreTokenizerStep {
    enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
    std::shared_ptr<const RegexSplitter> regex;  // kSplit, or kByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
};

// The pre-tokenizer pipeline; every step maps each piece to sub-pieces.
class PreTokenizer {
  public:
    void add_step(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
    bool empty() const { return steps_.empty(); }
    // Appends the non-empty pieces of text to out.
    void run(std::string_view text, std::vector<std::string>& out) const;

  private:
    std::vector<PreTokenizerStep> steps_;
};

}  // namespace rlpt::tokenizer::detail
