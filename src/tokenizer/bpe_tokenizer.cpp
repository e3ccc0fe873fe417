#include "rlpt/tokenizer/bpe_tokenizer.h"

#include "rlpt/core/error.h"
#include "tokenizer/bpe_state.h"
#include "tokenizer/files.h"
#include "tokenizer/unicode.h"

namespace rlpt::tokenizer {

using detail::BpeState;

int64_t detail::BpeState::lookup(std::string_view token) const {
    const std::string key(token);
    if (const auto it = added_by_content.find(key); it != added_by_content.end()) return it->second;
    if (const auto it = model->vocab().find(key); it != model->vocab().end()) return it->second;
    return -1;
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<BpeState> state) : impl_(std::move(state)) {}
BpeTokenizer::~BpeTokenizer() = default;

namespace {

void load_special_ids(BpeState& impl, const std::string& dir, SpecialTokenIds defaults) {
    impl.special = detail::resolve_special_ids(
        dir, [&impl](std::string_view t) { return impl.lookup(t); }, static_cast<int64_t>(impl.tokens.size()),
        defaults);
    const std::string config_path = detail::path_join(dir, "tokenizer_config.json");
    if (detail::is_regular_file(config_path)) impl.tokenizer_config = detail::read_text_file(config_path);
}

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_dir(const std::string& dir) {
    return from_file(detail::path_join(dir, "tokenizer.json"));
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_file(const std::string& tokenizer_json_path) {
    const std::string source = "tokenizer.json " + tokenizer_json_path;
    std::string text = detail::read_text_file(tokenizer_json_path);
    auto impl = detail::build_from_tokenizer_json(detail::parse_json(text, source), source);
    impl->tokenizer_json = std::move(text);
    load_special_ids(*impl, detail::parent_dir(tokenizer_json_path), SpecialTokenIds{});
    return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(impl)));
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_json(const std::string& json_text, const std::string& source) {
    auto impl = detail::build_from_tokenizer_json(detail::parse_json(json_text, source), source);
    impl->tokenizer_json = json_text;
    return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(impl)));
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_gpt2_files(const std::string& encoder_json_path,
                                                            const std::string& vocab_bpe_path) {
    auto impl = detail::build_from_gpt2_files(encoder_json_path, vocab_bpe_path);
    const int64_t eot = impl->lookup("<|endoftext|>");
    load_special_ids(*impl, detail::parent_dir(encoder_json_path), SpecialTokenIds{eot, eot, -1});
    return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(impl)));
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
    detail::check_utf8(text, "the text to encode");
    const BpeState& impl = *impl_;
    std::vector<int64_t> out;
    out.reserve(text.size() / 3 + 4);
    std::vector<detail::Segment> raw_segments;
    std::vector<detail::Segment> norm_segments;
    std::vector<std::string> pieces;
    impl.raw_matcher.split(text, allow_special, raw_segments);
    for (const auto& seg : raw_segments) {
        if (seg.id >= 0) {
            out.push_back(seg.id);
            continue;
        }
        const std::string_view raw = text.substr(seg.begin, seg.end - seg.begin);
        const std::string normalized = impl.nfc ? detail::nfc(raw) : std::string(raw);
        norm_segments.clear();
        impl.normalized_matcher.split(normalized, allow_special, norm_segments);
        for (const auto& nseg : norm_segments) {
            if (nseg.id >= 0) {
                out.push_back(nseg.id);
                continue;
            }
            const std::string_view part = std::string_view(normalized).substr(nseg.begin, nseg.end - nseg.begin);
            if (impl.pre_tokenizer.empty()) {
                impl.model->encode_piece(part, out);
                continue;
            }
            pieces.clear();
            impl.pre_tokenizer.run(part, pieces);
            for (const auto& piece : pieces) impl.model->encode_piece(piece, out);
        }
    }
    return out;
}

std::string BpeTokenizer::decode(const int64_t* ids, size_t n, bool skip_special_tokens) const {
    const BpeState& impl = *impl_;
    const int64_t size = static_cast<int64_t>(impl.tokens.size());
    std::string out;
    bool first = true;
    for (size_t i = 0; i < n; ++i) {
        const int64_t id = ids[i];
        RLPT_CHECK(id >= 0, "decode: negative token id {} at position {}", id, i);
        if (id >= size || !(impl.flags[id] & BpeState::kHasToken)) continue;
        if (skip_special_tokens && (impl.flags[id] & BpeState::kSpecial)) continue;
        if (impl.decoder == BpeState::Decoder::kNone && !first) out.push_back(' ');
        out += impl.decoded[id];
        first = false;
    }
    return impl.decoder == BpeState::Decoder::kByteLevel ? detail::utf8_lossy(out) : out;
}

std::string BpeTokenizer::token_bytes(int64_t id) const {
    const BpeState& impl = *impl_;
    RLPT_CHECK(id >= 0, "token_bytes: negative token id {}", id);
    if (id >= static_cast<int64_t>(impl.tokens.size()) || !(impl.flags[id] & BpeState::kHasToken)) return {};
    return impl.decoded[id];
}

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

SpecialTokenIds BpeTokenizer::special_ids() const { return impl_->special; }

std::string BpeTokenizer::id_to_token(int64_t id) const {
    RLPT_CHECK(id >= 0 && id < vocab_size() && (impl_->flags[id] & BpeState::kHasToken),
               "id_to_token: id {} names no token ({}, vocab_size {})", id, impl_->source, vocab_size());
    return impl_->tokens[id];
}

int64_t BpeTokenizer::token_to_id(std::string_view token) const { return impl_->lookup(token); }

bool BpeTokenizer::is_special(int64_t id) const {
    return id >= 0 && id < vocab_size() && (impl_->flags[id] & BpeState::kSpecial);
}

void BpeTokenizer::set_special_ids(const SpecialTokenIds& ids) {
    for (const auto& [name, id] : {std::pair{"bos", ids.bos}, std::pair{"eos", ids.eos}, std::pair{"pad", ids.pad}}) {
        RLPT_CHECK(id == -1 || (id >= 0 && id < vocab_size() && (impl_->flags[id] & BpeState::kHasToken)),
                   "set_special_ids: {} id {} names no token (vocab_size {})", name, id, vocab_size());
    }
    impl_->special = ids;
}

void BpeTokenizer::save(const std::string& dir) const {
    const BpeState& impl = *impl_;
    detail::make_dirs(dir);
    detail::write_text_file(detail::path_join(dir, "tokenizer.json"),
                            impl.tokenizer_json.empty() ? detail::gpt2_tokenizer_json(impl) : impl.tokenizer_json);
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    if (!impl.tokenizer_config.empty()) {
        config = nlohmann::ordered_json::parse(impl.tokenizer_config);
    } else {
        config["tokenizer_class"] = "PreTrainedTokenizerFast";
        config["clean_up_tokenization_spaces"] = false;
    }
    auto token_or_null = [&](int64_t id) -> nlohmann::ordered_json {
        if (id < 0) return nullptr;
        return impl.tokens[id];
    };
    config["bos_token"] = token_or_null(impl.special.bos);
    config["eos_token"] = token_or_null(impl.special.eos);
    config["pad_token"] = token_or_null(impl.special.pad);
    detail::write_text_file(detail::path_join(dir, "tokenizer_config.json"), config.dump(2) + "\n");
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
    detail::check_utf8(text, "the text to pre-tokenize");
    const std::string normalized = impl_->nfc ? detail::nfc(text) : std::string(text);
    std::vector<std::string> pieces;
    if (impl_->pre_tokenizer.empty()) {
        if (!normalized.empty()) pieces.push_back(normalized);
    } else {
        impl_->pre_tokenizer.run(normalized, pieces);
    }
    return pieces;
}

size_t BpeTokenizer::cache_size() const { return impl_->model->cache_size(); }

}  // namespace rlpt::tokenizer
