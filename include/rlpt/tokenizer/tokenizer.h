#pragma once
// Tokenizers (DESIGN §4): the interface the data pipeline, the rollout engine and
// `rlpt generate` code against, and load_tokenizer(), which picks the implementation from
// the files in a model directory. Torch-free.
//
// Implementations:
//   BpeTokenizer  (bpe_tokenizer.h)  Hugging Face byte-level BPE from tokenizer.json
//                                    (GPT-2 / Qwen2 / Llama-3), or GPT-2's encoder.json + vocab.bpe.
//   CharTokenizer (char_tokenizer.h) one token per character, for the built-in tiny tasks.
//
// Token ids are int64_t (what torch index tensors hold). The const methods (encode, decode,
// lookups, save) are thread-safe; BpeTokenizer's encode shares a mutex-guarded cache.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rlpt::tokenizer {

// bos/eos/pad ids; -1 means "this tokenizer has none".
struct SpecialTokenIds {
    int64_t bos = -1;
    int64_t eos = -1;
    int64_t pad = -1;
};

class Tokenizer {
  public:
    virtual ~Tokenizer() = default;

    // UTF-8 text -> ids. Equivalent to Hugging Face `tokenizer.encode(text,
    // add_special_tokens=False)`: nothing is added around the text (no BOS/EOS; the chat
    // template or the caller adds those). allow_special=true: the literal text of a special
    // token ("<|im_end|>") becomes its id; false: special tokens are encoded as ordinary text
    // (HF's split_special_tokens=True), so untrusted text cannot inject control tokens.
    // Non-special added tokens ("<think>" in Qwen3) are always matched.
    // Throws ValueError for invalid UTF-8 (naming the byte offset) and for characters the
    // vocabulary cannot represent.
    virtual std::vector<int64_t> encode(std::string_view text, bool allow_special = true) const = 0;

    // ids -> UTF-8 text. skip_special_tokens drops special tokens (pad, eos, <|im_end|>, ...).
    // Ids that name no token (>= vocab_size(), or holes in the id space, e.g. the padded
    // embedding rows a model may sample) are skipped, as Hugging Face does; negative ids are
    // a ValueError. Byte sequences that are not valid UTF-8 (a response cut inside a
    // multi-byte character) decode to U+FFFD.
    virtual std::string decode(const int64_t* ids, size_t n, bool skip_special_tokens = false) const = 0;
    std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const {
        return decode(ids.data(), ids.size(), skip_special_tokens);
    }

    // The bytes token `id` adds to decode()'s text before invalid UTF-8 is replaced (byte-level
    // BPE: the token's raw bytes, possibly part of a character; special tokens: their literal
    // text). "" for ids that name no token; ValueError for negative ids. Concatenating the
    // pieces of a sequence gives decode()'s bytes (a tokenizer.json without a decoder, whose
    // decode() joins tokens with spaces, is the exception: its pieces carry no spaces).
    virtual std::string token_bytes(int64_t id) const = 0;

    // Largest id + 1, added tokens included (the embedding matrix must have at least this many rows).
    virtual int64_t vocab_size() const = 0;
    virtual SpecialTokenIds special_ids() const = 0;
    int64_t bos_id() const { return special_ids().bos; }
    int64_t eos_id() const { return special_ids().eos; }
    int64_t pad_id() const { return special_ids().pad; }

    // The token's string as stored in the vocabulary (byte-level BPE shows a leading space as
    // "Ġ"). ValueError for an id that names no token.
    virtual std::string id_to_token(int64_t id) const = 0;
    // The id of a vocabulary or added token given in that same form; -1 when absent.
    virtual int64_t token_to_id(std::string_view token) const = 0;
    // True for special added tokens (those skip_special_tokens drops).
    virtual bool is_special(int64_t id) const = 0;

    // Writes tokenizer.json + tokenizer_config.json into dir (created if missing), in the
    // format Hugging Face `AutoTokenizer.from_pretrained(dir)` and load_tokenizer(dir) read.
    // Throws IoError when the files cannot be written.
    virtual void save(const std::string& dir) const = 0;

    // "bpe" or "char".
    virtual std::string_view kind() const = 0;
};

// Loads the tokenizer stored in model_dir, chosen by the files present:
//   tokenizer_config.json with "rlpt_tokenizer": "char"  -> CharTokenizer
//   tokenizer.json                                        -> BpeTokenizer
//   encoder.json + vocab.bpe (GPT-2's original files)     -> BpeTokenizer
// bos/eos/pad come from tokenizer_config.json / config.json (see bpe_tokenizer.h).
// Throws IoError naming the directory when it is missing or holds none of these, and
// IoError naming the file for malformed or unsupported files.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir);

}  // namespace rlpt::tokenizer
