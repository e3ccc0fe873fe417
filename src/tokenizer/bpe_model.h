#pragma once
// The BPE model of Hugging Face `tokenizers` (private to src/tokenizer): vocabulary, merges by
// rank, and the merge loop of its Word::merge_all, with a bounded per-piece cache.

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rlpt::tokenizer::detail {

struct BpeOptions {
    // Pieces are raw bytes mapped through GPT-2's byte-to-unicode table; otherwise the
    // characters of the piece are the alphabet.
    bool byte_level = true;
    // A piece that is itself a vocabulary token is emitted whole (Llama-3).
    bool ignore_merges = false;
    int32_t unk_id = -1;  // id for characters with no token; -1: such characters are an error
    bool fuse_unk = false;
};

class BpeModel {
  public:
    // merges: token pairs in rank order (rank = index; a repeated pair keeps its last rank, as
    // HF does). Throws IoError "<where>: merge <i> ..." for a merge whose tokens or whose
    // concatenation are not in the vocabulary.
    BpeModel(std::unordered_map<std::string, int32_t> vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
             const std::string& where);

    // Appends the ids of one pre-token (UTF-8 bytes, before the byte-to-unicode mapping).
    // ValueError for a character with no token when there is no unk token.
    void encode_piece(std::string_view piece, std::vector<int64_t>& out) const;

    const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
    // Merges in rank order as id pairs (for writing them back).
    const std::vector<std::pair<int32_t, int32_t>>& merge_list() const { return merge_list_; }
    const BpeOptions& options() const { return options_; }
    size_t cache_size() const;

  private:
    struct MergeTarget {
        int32_t rank;
        int32_t new_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const;
    void merge(std::vector<int32_t>& ids) const;

    std::unordered_map<std::string, int32_t> vocab_;
    std::unordered_map<std::string, int32_t> raw_vocab_;  // byte_level: token bytes -> id
    std::unordered_map<uint64_t, MergeTarget> merges_;
    std::vector<std::pair<int32_t, int32_t>> merge_list_;
    std::array<int32_t, 256> byte_ids_{};
    BpeOptions options_;

    static constexpr size_t kCacheCapacity = 1 << 16;
    static constexpr size_t kMaxCachedPiece = 256;  // bytes
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace rlpt::tokenizer::detail
