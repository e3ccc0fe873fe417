// Reading tokenizer.json and GPT-2's encoder.json + vocab.bpe into BpeState.

#include <algorithm>
#include <limits>

#include "rlpt/core/error.h"
#include "tokenizer/bpe_state.h"
#include "tokenizer/files.h"
#include "tokenizer/unicode.h"

namespace rlpt::tokenizer::detail {

namespace {

using nlohmann::json;
using Impl = BpeState;

const char* json_type(const json& j) { return j.type_name(); }

const json* member(const json& obj, const char* key) {
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
}

bool get_bool(const json& obj, const char* key, bool def, const std::string& source, const std::string& path) {
    const json* v = member(obj, key);
    if (v == nullptr || v->is_null()) return def;
    RLPT_CHECK_KIND(IoError, v->is_boolean(), "{}: {}.{} must be a boolean, got {}", source, path, key, json_type(*v));
    return v->get<bool>();
}

// A string member, or "" when missing / null.
std::string get_string(const json& obj, const char* key, const std::string& source, const std::string& path) {
    const json* v = member(obj, key);
    if (v == nullptr || v->is_null()) return {};
    RLPT_CHECK_KIND(IoError, v->is_string(), "{}: {}.{} must be a string, got {}", source, path, key, json_type(*v));
    return v->get<std::string>();
}

int32_t get_id(const json& v, const std::string& source, const std::string& path) {
    RLPT_CHECK_KIND(IoError, v.is_number_integer(), "{}: {} must be an integer id, got {}", source, path, v.dump());
    const int64_t id = v.get<int64_t>();
    RLPT_CHECK_KIND(IoError, id >= 0 && id < std::numeric_limits<int32_t>::max(), "{}: {} = {} is not a valid id",
                    source, path, id);
    return static_cast<int32_t>(id);
}

std::string type_of(const json& obj, const std::string& source, const std::string& path) {
    RLPT_CHECK_KIND(IoError, obj.is_object(), "{}: {} must be an object, got {}", source, path, json_type(obj));
    const std::string type = get_string(obj, "type", source, path);
    RLPT_CHECK_KIND(IoError, !type.empty(), "{}: {} has no \"type\"", source, path);
    return type;
}

bool parse_normalizer(const json& n, const std::string& source, const std::string& path) {
    if (n.is_null()) return false;
    const std::string type = type_of(n, source, path);
    if (type == "NFC") return true;
    if (type == "Sequence") {
        const json* list = member(n, "normalizers");
        RLPT_CHECK_KIND(IoError, list != nullptr && list->is_array(), "{}: {}.normalizers must be a list", source,
                        path);
        bool any = false;
        for (size_t i = 0; i < list->size(); ++i) {
            any = parse_normalizer((*list)[i], source, fmt::format("{}.normalizers[{}]", path, i)) || any;
        }
        return any;
    }
    RLPT_THROW(IoError, "{}: {} type '{}' is not supported (rlpt supports NFC or no normalizer)", source, path, type);
}

void parse_pre_tokenizer(const json& p, const std::string& source, const std::string& path,
                         std::vector<PreTokenizerStep>& steps) {
    if (p.is_null()) return;
    const std::string type = type_of(p, source, path);
    if (type == "Sequence") {
        const json* list = member(p, "pretokenizers");
        RLPT_CHECK_KIND(IoError, list != nullptr && list->is_array(), "{}: {}.pretokenizers must be a list", source,
                        path);
        for (size_t i = 0; i < list->size(); ++i) {
            parse_pre_tokenizer((*list)[i], source, fmt::format("{}.pretokenizers[{}]", path, i), steps);
        }
        return;
    }
    PreTokenizerStep step;
    if (type == "ByteLevel") {
        step.kind = PreTokenizerStep::Kind::kByteLevel;
        step.add_prefix_space = get_bool(p, "add_prefix_space", true, source, path);
        if (get_bool(p, "use_regex", true, source, path)) {
            step.regex = std::make_shared<RegexSplitter>(kGpt2Pattern, false);
        }
    } else if (type == "Split") {
        const json* pattern = member(p, "pattern");
        RLPT_CHECK_KIND(IoError, pattern != nullptr && pattern->is_object(),
                        "{}: {}.pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}", source, path);
        bool literal = false;
        std::string text;
        if (member(*pattern, "Regex") != nullptr) {
            text = get_string(*pattern, "Regex", source, path + ".pattern");
        } else if (member(*pattern, "String") != nullptr) {
            text = get_string(*pattern, "String", source, path + ".pattern");
            literal = true;
        } else {
            RLPT_THROW(IoError, "{}: {}.pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}, got {}", source,
                       path, pattern->dump());
        }
        RLPT_CHECK_KIND(IoError, !text.empty(), "{}: {}.pattern is empty", source, path);
        try {
            step.regex = std::make_shared<RegexSplitter>(text, literal);
        } catch (const ValueError& e) {
            RLPT_THROW(IoError, "{}: {}.pattern: {}", source, path, e.message());
        }
        const std::string behavior = get_string(p, "behavior", source, path);
        RLPT_CHECK_KIND(IoError, parse_split_behavior(behavior, step.behavior),
                        "{}: {}.behavior '{}' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                        "Contiguous",
                        source, path, behavior);
        step.invert = get_bool(p, "invert", false, source, path);
    } else {
        RLPT_THROW(IoError, "{}: {} type '{}' is not supported (rlpt supports Split, ByteLevel and Sequences of them)",
                   source, path, type);
    }
    steps.push_back(std::move(step));
}

Impl::Decoder parse_decoder(const json& d, const std::string& source) {
    if (d.is_null()) return Impl::Decoder::kNone;
    const std::string type = type_of(d, source, "decoder");
    if (type == "ByteLevel") return Impl::Decoder::kByteLevel;
    if (type == "Fuse") return Impl::Decoder::kFuse;
    RLPT_THROW(IoError, "{}: decoder type '{}' is not supported (rlpt supports ByteLevel and Fuse)", source, type);
}

std::vector<AddedToken> parse_added_tokens(const json& root, const std::string& source) {
    std::vector<AddedToken> out;
    const json* list = member(root, "added_tokens");
    if (list == nullptr || list->is_null()) return out;
    RLPT_CHECK_KIND(IoError, list->is_array(), "{}: added_tokens must be a list", source);
    for (size_t i = 0; i < list->size(); ++i) {
        const json& t = (*list)[i];
        const std::string path = fmt::format("added_tokens[{}]", i);
        RLPT_CHECK_KIND(IoError, t.is_object(), "{}: {} must be an object", source, path);
        AddedToken tok;
        const json* id = member(t, "id");
        RLPT_CHECK_KIND(IoError, id != nullptr, "{}: {} has no id", source, path);
        tok.id = get_id(*id, source, path + ".id");
        tok.content = get_string(t, "content", source, path);
        RLPT_CHECK_KIND(IoError, !tok.content.empty(), "{}: {} has no content", source, path);
        tok.special = get_bool(t, "special", false, source, path);
        tok.lstrip = get_bool(t, "lstrip", false, source, path);
        tok.rstrip = get_bool(t, "rstrip", false, source, path);
        tok.single_word = get_bool(t, "single_word", false, source, path);
        tok.normalized = get_bool(t, "normalized", !tok.special, source, path);
        out.push_back(std::move(tok));
    }
    return out;
}

// Split "a b" (GPT-2 / legacy tokenizer.json form): exactly one space.
bool split_merge_line(const std::string& line, std::pair<std::string, std::string>& out) {
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= line.size()) return false;
    if (line.find(' ', space + 1) != std::string::npos) return false;
    out = {line.substr(0, space), line.substr(space + 1)};
    return true;
}

std::unique_ptr<BpeModel> parse_model(const json& root, bool byte_level, const std::string& source) {
    const json* model = member(root, "model");
    RLPT_CHECK_KIND(IoError, model != nullptr && model->is_object(), "{}: missing \"model\" object", source);
    std::string type = get_string(*model, "type", source, "model");
    if (type.empty() && member(*model, "merges") != nullptr) type = "BPE";  // older files omit it
    RLPT_CHECK_KIND(IoError, type == "BPE", "{}: model type '{}' is not supported (rlpt implements BPE only)", source,
                    type);

    const json* vocab_json = member(*model, "vocab");
    RLPT_CHECK_KIND(IoError, vocab_json != nullptr && vocab_json->is_object(),
                    "{}: model.vocab must be an object mapping tokens to ids", source);
    std::unordered_map<std::string, int32_t> vocab;
    vocab.reserve(vocab_json->size());
    std::unordered_map<int32_t, std::string> seen;
    seen.reserve(vocab_json->size());
    for (const auto& [token, id_json] : vocab_json->items()) {
        const int32_t id = get_id(id_json, source, "model.vocab[\"" + token + "\"]");
        const auto [it, fresh] = seen.emplace(id, token);
        RLPT_CHECK_KIND(IoError, fresh, "{}: model.vocab gives id {} to both '{}' and '{}'", source, id, it->second,
                        token);
        vocab.emplace(token, id);
    }

    std::vector<std::pair<std::string, std::string>> merges;
    if (const json* merges_json = member(*model, "merges"); merges_json != nullptr && !merges_json->is_null()) {
        RLPT_CHECK_KIND(IoError, merges_json->is_array(), "{}: model.merges must be a list", source);
        merges.reserve(merges_json->size());
        for (size_t i = 0; i < merges_json->size(); ++i) {
            const json& m = (*merges_json)[i];
            std::pair<std::string, std::string> pair;
            if (m.is_string()) {
                RLPT_CHECK_KIND(IoError, split_merge_line(m.get<std::string>(), pair),
                                "{}: model.merges[{}] = {} is not of the form \"a b\"", source, i, m.dump());
            } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
                pair = {m[0].get<std::string>(), m[1].get<std::string>()};
            } else {
                RLPT_THROW(IoError, "{}: model.merges[{}] = {} must be \"a b\" or [\"a\", \"b\"]", source, i, m.dump());
            }
            merges.push_back(std::move(pair));
        }
    }

    if (const json* dropout = member(*model, "dropout"); dropout != nullptr && !dropout->is_null()) {
        RLPT_CHECK_KIND(IoError, dropout->is_number() && dropout->get<double>() == 0.0,
                        "{}: BPE dropout {} is not supported", source, dropout->dump());
    }
    RLPT_CHECK_KIND(IoError, !get_bool(*model, "byte_fallback", false, source, "model"),
                    "{}: model.byte_fallback is not supported", source);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const std::string value = get_string(*model, key, source, "model");
        RLPT_CHECK_KIND(IoError, value.empty(), "{}: model.{} '{}' is not supported", source, key, value);
    }
    BpeOptions options;
    options.byte_level = byte_level;
    options.ignore_merges = get_bool(*model, "ignore_merges", false, source, "model");
    options.fuse_unk = get_bool(*model, "fuse_unk", false, source, "model");
    const std::string unk = get_string(*model, "unk_token", source, "model");
    if (!unk.empty()) {
        const auto it = vocab.find(unk);
        RLPT_CHECK_KIND(IoError, it != vocab.end(), "{}: model.unk_token '{}' is not in the vocabulary", source, unk);
        options.unk_id = it->second;
    }
    return std::make_unique<BpeModel>(std::move(vocab), merges, options, source);
}

// What the ByteLevel decoder makes of one token: its bytes when every character is in the
// byte table, else the token's own UTF-8 (HF's rule).
std::string byte_level_decode_token(const std::string& token) {
    std::string bytes;
    size_t i = 0;
    char32_t cp = 0;
    while (i < token.size()) {
        const int b = utf8_next(token, i, cp) ? unicode_to_byte(cp) : -1;
        if (b < 0) return token;
        bytes.push_back(static_cast<char>(b));
    }
    return bytes;
}

// Id tables and matchers from model + added tokens.
void finalize(Impl& impl) {
    int64_t size = 0;
    for (const auto& [token, id] : impl.model->vocab()) size = std::max<int64_t>(size, id + 1);
    for (const auto& t : impl.added_tokens) size = std::max<int64_t>(size, t.id + 1);
    // The id tables are dense. Real tokenizers number their tokens 0..n-1 (added tokens may
    // reuse or follow vocabulary ids); a file with one token at id 2^31-2 would make the tables
    // tens of gigabytes, so ids far beyond the token count are refused.
    const int64_t n_tokens = static_cast<int64_t>(impl.model->vocab().size() + impl.added_tokens.size());
    const int64_t max_size = 2 * n_tokens + 1024;
    RLPT_CHECK_KIND(IoError, size <= max_size,
                    "{}: token ids go up to {} but the file has only {} tokens (rlpt needs ids below {})", impl.source,
                    size - 1, n_tokens, max_size);
    impl.tokens.assign(size, std::string());
    impl.flags.assign(size, 0);
    for (const auto& [token, id] : impl.model->vocab()) {
        impl.tokens[id] = token;
        impl.flags[id] = Impl::kHasToken;
    }
    std::vector<AddedToken> raw;
    std::vector<AddedToken> normalized;
    for (const auto& t : impl.added_tokens) {
        impl.tokens[t.id] = t.content;
        impl.flags[t.id] = Impl::kHasToken | (t.special ? Impl::kSpecial : 0);
        impl.added_by_content[t.content] = t.id;
        if (t.normalized) {
            AddedToken n = t;
            if (impl.nfc) n.content = nfc(n.content);
            normalized.push_back(std::move(n));
        } else {
            raw.push_back(t);
        }
    }
    impl.raw_matcher = AddedTokenMatcher(std::move(raw));
    impl.normalized_matcher = AddedTokenMatcher(std::move(normalized));
    impl.decoded.assign(size, std::string());
    for (int64_t id = 0; id < size; ++id) {
        if (!(impl.flags[id] & Impl::kHasToken)) continue;
        impl.decoded[id] =
            impl.decoder == Impl::Decoder::kByteLevel ? byte_level_decode_token(impl.tokens[id]) : impl.tokens[id];
    }
}

}  // namespace

std::unique_ptr<Impl> build_from_tokenizer_json(const json& root, const std::string& source) {
    RLPT_CHECK_KIND(IoError, root.is_object(), "{}: expected a JSON object at the top level", source);
    auto impl = std::make_unique<Impl>();
    impl->source = source;
    if (const json* n = member(root, "normalizer"); n != nullptr)
        impl->nfc = parse_normalizer(*n, source, "normalizer");

    std::vector<PreTokenizerStep> steps;
    if (const json* p = member(root, "pre_tokenizer"); p != nullptr)
        parse_pre_tokenizer(*p, source, "pre_tokenizer", steps);
    bool byte_level = false;
    for (size_t i = 0; i < steps.size(); ++i) {
        if (steps[i].kind != PreTokenizerStep::Kind::kByteLevel) continue;
        RLPT_CHECK_KIND(IoError, i + 1 == steps.size(),
                        "{}: a ByteLevel pre-tokenizer that is not the last one is not supported", source);
        byte_level = true;
    }
    for (auto& s : steps) impl->pre_tokenizer.add_step(std::move(s));

    const json* decoder = member(root, "decoder");
    impl->decoder = decoder == nullptr ? Impl::Decoder::kNone : parse_decoder(*decoder, source);
    if (byte_level) {
        RLPT_CHECK_KIND(IoError, impl->decoder == Impl::Decoder::kByteLevel,
                        "{}: a ByteLevel pre-tokenizer without the ByteLevel decoder is not supported", source);
    } else {
        RLPT_CHECK_KIND(IoError, impl->decoder != Impl::Decoder::kByteLevel,
                        "{}: the ByteLevel decoder without a ByteLevel pre-tokenizer is not supported", source);
    }

    impl->model = parse_model(root, byte_level, source);
    impl->added_tokens = parse_added_tokens(root, source);
    finalize(*impl);
    return impl;
}

std::unique_ptr<Impl> build_from_gpt2_files(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
    const std::string enc_source = "encoder.json " + encoder_json_path;
    const json encoder = parse_json(read_text_file(encoder_json_path), enc_source);
    RLPT_CHECK_KIND(IoError, encoder.is_object(), "{}: expected an object mapping tokens to ids", enc_source);
    std::unordered_map<std::string, int32_t> vocab;
    vocab.reserve(encoder.size());
    for (const auto& [token, id] : encoder.items()) vocab.emplace(token, get_id(id, enc_source, "\"" + token + "\""));

    const std::string bpe_source = "vocab.bpe " + vocab_bpe_path;
    const std::string text = read_text_file(vocab_bpe_path);
    std::vector<std::pair<std::string, std::string>> merges;
    size_t line_no = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        std::pair<std::string, std::string> pair;
        RLPT_CHECK_KIND(IoError, split_merge_line(line, pair), "{}: line {}: expected \"a b\", got '{}'", bpe_source,
                        line_no, line);
        merges.push_back(std::move(pair));
    }

    auto impl = std::make_unique<Impl>();
    impl->source = bpe_source;
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.regex = std::make_shared<RegexSplitter>(kGpt2Pattern, false);
    impl->pre_tokenizer.add_step(std::move(step));
    impl->decoder = Impl::Decoder::kByteLevel;
    const auto eot = vocab.find("<|endoftext|>");
    if (eot != vocab.end()) {
        AddedToken t;
        t.content = eot->first;
        t.id = eot->second;
        t.special = true;
        impl->added_tokens.push_back(t);
    }
    impl->model = std::make_unique<BpeModel>(std::move(vocab), merges, BpeOptions{}, bpe_source);
    finalize(*impl);
    return impl;
}

std::string gpt2_tokenizer_json(const Impl& impl) {
    // Plain json (keys sorted): ordered_json inserts in linear time, quadratic for a vocabulary.
    using ojson = nlohmann::json;
    ojson added = ojson::array();
    for (const auto& t : impl.added_tokens) {
        added.push_back({{"id", t.id},
                         {"content", t.content},
                         {"single_word", t.single_word},
                         {"lstrip", t.lstrip},
                         {"rstrip", t.rstrip},
                         {"normalized", t.normalized},
                         {"special", t.special}});
    }
    std::vector<std::pair<int32_t, const std::string*>> by_id;
    by_id.reserve(impl.model->vocab().size());
    for (const auto& [token, id] : impl.model->vocab()) by_id.emplace_back(id, &token);
    std::sort(by_id.begin(), by_id.end());
    ojson vocab = ojson::object();
    for (const auto& [id, token] : by_id) vocab.emplace(*token, id);
    ojson merges = ojson::array();
    std::vector<const std::string*> model_tokens(impl.tokens.size(), nullptr);
    for (const auto& [id, token] : by_id) model_tokens[id] = token;
    for (const auto& [a, b] : impl.model->merge_list()) merges.push_back(*model_tokens[a] + " " + *model_tokens[b]);
    const ojson byte_level = {{"type", "ByteLevel"},
                              {"add_prefix_space", false},
                              {"trim_offsets", true},
                              {"use_regex", true}};
    ojson root = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer", nullptr},
        {"pre_tokenizer", byte_level},
        {"post_processor", byte_level},
        {"decoder", byte_level},
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
          {"merges", merges}}},
    };
    return root.dump(2);
}

}  // namespace rlpt::tokenizer::detail
