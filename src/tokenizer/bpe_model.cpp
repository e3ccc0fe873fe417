#include "tokenizer/bpe_model.h"

#include <queue>

#include "rlpt/core/error.h"
#include "tokenizer/unicode.h"

namespace rlpt::tokenizer::detail {

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& where)
    : vocab_(std::move(vocab)), options_(options) {
    merges_.reserve(merges.size());
    merge_list_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const auto& [a, b] = merges[i];
        const auto ia = vocab_.find(a);
        const auto ib = vocab_.find(b);
        RLPT_CHECK_KIND(IoError, ia != vocab_.end(), "{}: merge {} ('{} {}'): token '{}' is not in the vocabulary",
                        where, i, a, b, a);
        RLPT_CHECK_KIND(IoError, ib != vocab_.end(), "{}: merge {} ('{} {}'): token '{}' is not in the vocabulary",
                        where, i, a, b, b);
        const auto merged = vocab_.find(a + b);
        RLPT_CHECK_KIND(IoError, merged != vocab_.end(),
                        "{}: merge {} ('{} {}'): the merged token '{}{}' is not in the vocabulary", where, i, a, b, a,
                        b);
        merges_[pair_key(ia->second, ib->second)] = {static_cast<int32_t>(i), merged->second};
        merge_list_.emplace_back(ia->second, ib->second);
    }

    byte_ids_.fill(-1);
    if (options_.byte_level) {
        const auto& table = byte_to_unicode();
        for (int b = 0; b < 256; ++b) {
            std::string s;
            append_utf8(s, table[b]);
            const auto it = vocab_.find(s);
            if (it != vocab_.end()) byte_ids_[b] = it->second;
        }
        if (options_.ignore_merges) {
            raw_vocab_.reserve(vocab_.size());
            for (const auto& [token, id] : vocab_) {
                std::string raw;
                size_t i = 0;
                char32_t cp = 0;
                bool ok = true;
                while (ok && i < token.size()) {
                    const int byte = utf8_next(token, i, cp) ? unicode_to_byte(cp) : -1;
                    if (byte < 0) ok = false;
                    else raw.push_back(static_cast<char>(byte));
                }
                if (ok) raw_vocab_.emplace(std::move(raw), id);
            }
        }
    }
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
    auto unknown = [&](size_t offset, char32_t cp) {
        RLPT_CHECK(options_.unk_id >= 0,
                   "character {} at byte {} of '{}' has no token in the vocabulary and the tokenizer has no "
                   "unk_token",
                   describe_code_point(cp), offset, std::string(piece));
        if (options_.fuse_unk && !ids.empty() && ids.back() == options_.unk_id) return;
        ids.push_back(options_.unk_id);
    };
    if (options_.byte_level) {
        for (size_t i = 0; i < piece.size(); ++i) {
            const auto b = static_cast<unsigned char>(piece[i]);
            if (byte_ids_[b] >= 0) ids.push_back(byte_ids_[b]);
            else unknown(i, byte_to_unicode()[b]);
        }
        return;
    }
    size_t i = 0;
    while (i < piece.size()) {
        const size_t begin = i;
        char32_t cp = 0;
        if (!utf8_next(piece, i, cp)) RLPT_THROW(InternalError, "invalid UTF-8 reached the BPE model");
        const auto it = vocab_.find(std::string(piece.substr(begin, i - begin)));
        if (it != vocab_.end()) ids.push_back(it->second);
        else unknown(begin, cp);
    }
}

void BpeModel::merge(std::vector<int32_t>& ids) const {
    const int32_t n = static_cast<int32_t>(ids.size());
    if (n < 2) return;
    struct Symbol {
        int32_t id;
        int32_t prev;
        int32_t next;
        bool alive;
    };
    struct Candidate {
        int32_t rank;
        int32_t pos;
        int32_t new_id;
    };
    // Lowest rank first, then leftmost (HF's Merge ordering).
    auto later = [](const Candidate& a, const Candidate& b) {
        return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    std::vector<Symbol> sym(n);
    for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    std::vector<Candidate> heap_storage;
    heap_storage.reserve(n);
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later, std::move(heap_storage));
    auto push_pair = [&](int32_t pos) {
        const int32_t next = sym[pos].next;
        if (next < 0) return;
        const auto it = merges_.find(pair_key(sym[pos].id, sym[next].id));
        if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& left = sym[top.pos];
        if (!left.alive || left.next < 0) continue;
        Symbol& right = sym[left.next];
        const auto it = merges_.find(pair_key(left.id, right.id));
        if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
        left.id = top.new_id;
        right.alive = false;
        left.next = right.next;
        if (left.next >= 0) sym[left.next].prev = top.pos;
        if (left.prev >= 0) push_pair(left.prev);
        push_pair(top.pos);
    }
    ids.clear();
    for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
    if (piece.empty()) return;
    if (options_.ignore_merges) {
        const auto& table = options_.byte_level ? raw_vocab_ : vocab_;
        const auto it = table.find(std::string(piece));
        if (it != table.end()) {
            out.push_back(it->second);
            return;
        }
    }
    const bool cacheable = piece.size() <= kMaxCachedPiece;
    std::string key;
    if (cacheable) {
        key.assign(piece);
        std::lock_guard<std::mutex> lock(cache_mutex_);
        const auto it = cache_.find(key);
        if (it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> ids;
    ids.reserve(piece.size());
    initial_symbols(piece, ids);
    merge(ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        if (cache_.size() < kCacheCapacity) cache_.emplace(std::move(key), std::move(ids));
    }
}

size_t BpeModel::cache_size() const {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    return cache_.size();
}

}  // namespace rlpt::tokenizer::detail
