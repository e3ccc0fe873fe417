#pragma once
// Byte-level BPE as Hugging Face `tokenizers` runs it, read from a tokenizer.json
// (GPT-2, Qwen2/2.5/3, Llama-3 style) or from GPT-2's original encoder.json + vocab.bpe.
// Torch-free; ICU stays behind the pimpl.
//
// Encoding pipeline (identical ids to HF `encode(text, add_special_tokens=False)`):
//   1. split out added tokens with normalized=false (leftmost-longest; lstrip/rstrip/single_word
//      honoured; special ones only when allow_special),
//   2. normalize the remaining text (none or NFC),
//   3. split out added tokens with normalized=true,
//   4. pre-tokenize: Split (ICU regex, e.g. Qwen2's / Llama-3's pattern; behaviours Isolated,
//      Removed, MergedWithPrevious, MergedWithNext, Contiguous; invert), then ByteLevel
//      (add_prefix_space; use_regex applies GPT-2's pattern),
//   5. BPE each piece by merge rank (leftmost first among equal ranks), ignore_merges
//      honoured, results cached per piece (bounded cache).
// post_processor is not applied (no BOS is added; see Tokenizer::encode).
// Decoding: ByteLevel decoder (bytes, then UTF-8 with U+FFFD for invalid sequences).
//
// tokenizer.json features that are rejected with IoError ("... is not supported"), never
// approximated: model types other than BPE (WordPiece, Unigram, WordLevel), BPE dropout,
// byte_fallback, continuing_subword_prefix / end_of_word_suffix, normalizers other than NFC,
// pre-tokenizers other than Split/ByteLevel (Metaspace, Digits, Whitespace, ...), ByteLevel
// not last in the pre-tokenizer sequence, decoders other than ByteLevel / Fuse, and a
// ByteLevel pre-tokenizer without the ByteLevel decoder (or the reverse).
// Also usable without ByteLevel: characters are then the BPE alphabet (the format
// CharTokenizer writes), decoded by the Fuse decoder.
//
// Special ids (bos/eos/pad), per field:
//   tokenizer_config.json beside tokenizer.json: "bos_token"/"eos_token"/"pad_token", each a
//     string or {"content": ...}; a key present with null means "none";
//   else config.json beside it: "bos_token_id"/"eos_token_id"/"pad_token_id" (an int, or a
//     list whose first entry is taken);
//   else -1. GPT-2's original files without either config default to bos = eos = <|endoftext|>.
// A named token missing from the vocabulary is an IoError.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::tokenizer {

namespace detail {
struct BpeState;  // src/tokenizer/bpe_state.h
}

class BpeTokenizer final : public Tokenizer {
  public:
    // <dir>/tokenizer.json plus special ids from <dir>/tokenizer_config.json, <dir>/config.json.
    static std::unique_ptr<BpeTokenizer> from_dir(const std::string& dir);
    // A tokenizer.json at any path; special ids from the config files in the same directory.
    static std::unique_ptr<BpeTokenizer> from_file(const std::string& tokenizer_json_path);
    // tokenizer.json text held in memory; `source` names it in error messages. No special ids.
    static std::unique_ptr<BpeTokenizer> from_json(const std::string& json_text,
                                                   const std::string& source = "<memory>");
    // GPT-2's encoder.json (token -> id) and vocab.bpe ("#version" line, then one "a b" merge
    // per line, in rank order). GPT-2's regex, no normalizer; <|endoftext|> (when present) is a
    // special added token. Special ids from config files next to encoder.json, else
    // bos = eos = <|endoftext|>.
    static std::unique_ptr<BpeTokenizer> from_gpt2_files(const std::string& encoder_json_path,
                                                         const std::string& vocab_bpe_path);

    ~BpeTokenizer() override;
    BpeTokenizer(const BpeTokenizer&) = delete;
    BpeTokenizer& operator=(const BpeTokenizer&) = delete;

    std::vector<int64_t> encode(std::string_view text, bool allow_special = true) const override;
    using Tokenizer::decode;
    std::string decode(const int64_t* ids, size_t n, bool skip_special_tokens = false) const override;
    std::string token_bytes(int64_t id) const override;
    int64_t vocab_size() const override;
    SpecialTokenIds special_ids() const override;
    std::string id_to_token(int64_t id) const override;
    int64_t token_to_id(std::string_view token) const override;
    bool is_special(int64_t id) const override;
    // tokenizer.json: the file as it was read (from_gpt2_files: an equivalent HF tokenizer.json
    // is generated). tokenizer_config.json: the original with bos/eos/pad_token set to the
    // current special ids, or a minimal PreTrainedTokenizerFast config.
    void save(const std::string& dir) const override;
    std::string_view kind() const override { return "bpe"; }

    // Overrides bos/eos/pad (each -1 or an id < vocab_size(); ValueError otherwise).
    void set_special_ids(const SpecialTokenIds& ids);

    // Steps 2 and 4 of the pipeline on text that holds no added tokens: the pieces BPE sees,
    // as UTF-8 (before the byte-to-unicode mapping). For tests and debugging.
    std::vector<std::string> pre_tokenize(std::string_view text) const;

    // Number of pieces whose BPE result is cached (tests).
    size_t cache_size() const;

  private:
    explicit BpeTokenizer(std::unique_ptr<detail::BpeState> state);
    std::unique_ptr<detail::BpeState> impl_;
};

}  // namespace rlpt::tokenizer
