#include "rlpt/tokenizer/char_tokenizer.h"

#include <algorithm>
#include <set>

#include "rlpt/core/error.h"
#include "tokenizer/files.h"
#include "tokenizer/unicode.h"

namespace rlpt::tokenizer {

namespace {

constexpr const char* kSpecials[] = {"<pad>", "<bos>", "<eos>"};  // ids 0, 1, 2

}  // namespace

CharTokenizer::CharTokenizer(std::string_view charset, std::vector<std::string> words) : charset_(charset) {
    detail::check_utf8(charset, "the charset");
    RLPT_CHECK(!charset.empty(), "CharTokenizer: the charset is empty");
    size_t i = 0;
    while (i < charset.size()) {
        const size_t begin = i;
        char32_t cp = 0;
        detail::utf8_next(charset, i, cp);
        const auto [it, fresh] = char_ids_.emplace(cp, kFirstCharId + static_cast<int64_t>(chars_.size()));
        RLPT_CHECK(fresh, "CharTokenizer: character {} appears twice in the charset (byte {})",
                   detail::describe_code_point(cp), begin);
        chars_.emplace_back(charset.substr(begin, i - begin));
    }
    for (auto& w : words) {
        detail::check_utf8(w, "a word");
        size_t n = 0, at = 0;
        char32_t cp = 0;
        while (at < w.size() && detail::utf8_next(w, at, cp)) ++n;
        RLPT_CHECK(n >= 2, "CharTokenizer: word '{}' must have at least two characters", w);
        RLPT_CHECK(w.find('\n') == std::string::npos, "CharTokenizer: word '{}' contains a newline", w);
        RLPT_CHECK(std::find(words_.begin(), words_.end(), w) == words_.end(), "CharTokenizer: word '{}' appears twice",
                   w);
        for (const char* s : kSpecials) RLPT_CHECK(w != s, "CharTokenizer: word '{}' is a special token", w);
        words_.push_back(std::move(w));
    }
    for (size_t k = 0; k < words_.size(); ++k) words_by_length_.push_back(k);
    std::stable_sort(words_by_length_.begin(), words_by_length_.end(),
                     [&](size_t a, size_t b) { return words_[a].size() > words_[b].size(); });
}

std::pair<int64_t, size_t> CharTokenizer::match(std::string_view text, size_t i) const {
    for (size_t k : words_by_length_) {
        if (text.compare(i, words_[k].size(), words_[k]) == 0)
            return {kFirstCharId + static_cast<int64_t>(chars_.size() + k), words_[k].size()};
    }
    size_t end = i;
    char32_t cp = 0;
    detail::utf8_next(text, end, cp);
    const auto it = char_ids_.find(cp);
    return {it == char_ids_.end() ? -1 : it->second, end - i};
}

std::vector<int64_t> CharTokenizer::encode(std::string_view text, bool allow_special) const {
    detail::check_utf8(text, "the text to encode");
    std::vector<int64_t> out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        if (allow_special && text[i] == '<') {
            bool matched = false;
            for (int64_t s = 0; s < kFirstCharId; ++s) {
                const std::string_view special = kSpecials[s];
                if (text.compare(i, special.size(), special) == 0) {
                    out.push_back(s);
                    i += special.size();
                    matched = true;
                    break;
                }
            }
            if (matched) continue;
        }
        const size_t begin = i;
        const auto [id, len] = match(text, i);
        if (id < 0) {
            char32_t cp = 0;
            detail::utf8_next(text, i, cp);
            RLPT_THROW(ValueError, "CharTokenizer: character {} at byte {} is not in the charset",
                       detail::describe_code_point(cp), begin);
        }
        out.push_back(id);
        i += len;
    }
    return out;
}

std::string CharTokenizer::decode(const int64_t* ids, size_t n, bool skip_special_tokens) const {
    std::string out;
    for (size_t i = 0; i < n; ++i) {
        const int64_t id = ids[i];
        RLPT_CHECK(id >= 0, "decode: negative token id {} at position {}", id, i);
        if (id >= vocab_size()) continue;
        if (id < kFirstCharId) {
            if (!skip_special_tokens) out += kSpecials[id];
        } else {
            out += token_bytes(id);
        }
    }
    return out;
}

std::string CharTokenizer::token_bytes(int64_t id) const {
    RLPT_CHECK(id >= 0, "token_bytes: negative token id {}", id);
    if (id >= vocab_size()) return {};
    if (id < kFirstCharId) return kSpecials[id];
    const auto c = static_cast<size_t>(id - kFirstCharId);
    return c < chars_.size() ? chars_[c] : words_[c - chars_.size()];
}

std::string CharTokenizer::id_to_token(int64_t id) const {
    RLPT_CHECK(id >= 0 && id < vocab_size(), "id_to_token: id {} is outside the char vocabulary (size {})", id,
               vocab_size());
    return token_bytes(id);
}

int64_t CharTokenizer::token_to_id(std::string_view token) const {
    for (int64_t s = 0; s < kFirstCharId; ++s) {
        if (token == kSpecials[s]) return s;
    }
    for (size_t k = 0; k < words_.size(); ++k)
        if (token == words_[k]) return kFirstCharId + static_cast<int64_t>(chars_.size() + k);
    size_t i = 0;
    char32_t cp = 0;
    if (token.empty() || !detail::utf8_next(token, i, cp) || i != token.size()) return -1;
    const auto it = char_ids_.find(cp);
    return it == char_ids_.end() ? -1 : it->second;
}

void CharTokenizer::save(const std::string& dir) const {
    using ojson = nlohmann::ordered_json;
    ojson added = ojson::array();
    ojson vocab = ojson::object();
    for (int64_t s = 0; s < kFirstCharId; ++s) {
        added.push_back({{"id", s},
                         {"content", kSpecials[s]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
        vocab[kSpecials[s]] = s;
    }
    for (size_t c = 0; c < chars_.size(); ++c) vocab[chars_[c]] = kFirstCharId + static_cast<int64_t>(c);
    for (size_t k = 0; k < words_.size(); ++k) {
        const int64_t id = kFirstCharId + static_cast<int64_t>(chars_.size() + k);
        added.push_back({{"id", id},
                         {"content", words_[k]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", false}});
        vocab[words_[k]] = id;
    }
    const ojson root = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer", nullptr},
        {"pre_tokenizer", nullptr},
        {"post_processor", nullptr},
        {"decoder", {{"type", "Fuse"}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", false},
          {"vocab", vocab},
          {"merges", ojson::array()}}},
    };
    const ojson config = {
        {"tokenizer_class", "PreTrainedTokenizerFast"},
        {"bos_token", kSpecials[kBosId]},
        {"eos_token", kSpecials[kEosId]},
        {"pad_token", kSpecials[kPadId]},
        {"clean_up_tokenization_spaces", false},
        {"rlpt_tokenizer", "char"},
    };
    detail::make_dirs(dir);
    detail::write_text_file(detail::path_join(dir, "tokenizer.json"), root.dump(2) + "\n");
    detail::write_text_file(detail::path_join(dir, "tokenizer_config.json"), config.dump(2) + "\n");
}

std::unique_ptr<CharTokenizer> CharTokenizer::load(const std::string& dir) {
    const std::string path = detail::path_join(dir, "tokenizer.json");
    const std::string source = "tokenizer.json " + path;
    const nlohmann::json root = detail::parse_json(detail::read_text_file(path), source);
    auto fail = [&](const std::string& what) {
        RLPT_THROW(IoError, "{}: not a character tokenizer as CharTokenizer::save writes it: {}", source, what);
    };
    if (!root.is_object()) fail("expected a JSON object");
    const auto model = root.find("model");
    if (model == root.end() || !model->is_object()) fail("missing \"model\" object");
    if (model->value("type", std::string()) != "BPE") fail("model.type is not BPE");
    const auto merges = model->find("merges");
    if (merges != model->end() && !(merges->is_array() && merges->empty())) fail("model.merges is not empty");
    for (const char* key : {"normalizer", "pre_tokenizer"}) {
        if (root.contains(key) && !root[key].is_null()) fail(fmt::format("{} is not null", key));
    }
    const auto vocab = model->find("vocab");
    if (vocab == model->end() || !vocab->is_object()) fail("missing model.vocab");
    const int64_t n = static_cast<int64_t>(vocab->size());
    if (n <= kFirstCharId) fail("model.vocab holds no characters");
    std::vector<std::string> by_id(n);
    for (const auto& [token, id_json] : vocab->items()) {
        if (!id_json.is_number_integer()) fail(fmt::format("id of '{}' is not an integer", token));
        const int64_t id = id_json.get<int64_t>();
        if (id < 0 || id >= n || !by_id[id].empty()) {
            fail(fmt::format("ids must be 0..{} without gaps or repeats (token '{}' has id {})", n - 1, token, id));
        }
        by_id[id] = token;
    }
    for (int64_t s = 0; s < kFirstCharId; ++s) {
        if (by_id[s] != kSpecials[s]) fail(fmt::format("id {} must be '{}', found '{}'", s, kSpecials[s], by_id[s]));
    }
    // Words: the non-special added tokens; they follow the characters.
    std::set<std::string> word_set;
    if (const auto added = root.find("added_tokens"); added != root.end() && added->is_array()) {
        for (const auto& a : *added)
            if (a.is_object() && !a.value("special", true)) word_set.insert(a.value("content", std::string()));
    }
    std::string charset;
    std::vector<std::string> words;
    for (int64_t id = kFirstCharId; id < n; ++id) {
        if (word_set.count(by_id[id])) {
            words.push_back(by_id[id]);
            continue;
        }
        size_t i = 0;
        char32_t cp = 0;
        if (!detail::utf8_next(by_id[id], i, cp) || i != by_id[id].size()) {
            fail(fmt::format("token '{}' (id {}) is not a single character nor a non-special added token", by_id[id],
                             id));
        }
        if (!words.empty()) fail(fmt::format("character '{}' (id {}) follows a word", by_id[id], id));
        charset += by_id[id];
    }
    try {
        return std::make_unique<CharTokenizer>(charset, std::move(words));
    } catch (const ValueError& e) {
        fail(e.message());
    }
    return nullptr;
}

std::string charset_of(const std::vector<std::string_view>& texts) {
    std::set<char32_t> seen;
    for (std::string_view text : texts) {
        detail::check_utf8(text, "the text");
        size_t i = 0;
        char32_t cp = 0;
        while (i < text.size() && detail::utf8_next(text, i, cp)) seen.insert(cp);
    }
    std::string out;
    for (char32_t cp : seen) detail::append_utf8(out, cp);
    return out;
}

}  // namespace rlpt::tokenizer
