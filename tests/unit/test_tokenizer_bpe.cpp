// BpeTokenizer on small hand-built tokenizer.json files: merges, pre-tokenizers, added tokens,
// decoding, special ids, saving, and every rejection path. No downloaded assets needed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "rlpt/core/error.h"
#include "rlpt/tokenizer/bpe_tokenizer.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using rlpt::tokenizer::BpeTokenizer;
using Ids = std::vector<int64_t>;
using Strings = std::vector<std::string>;

namespace {

// GPT-2's byte -> code point table, written out independently of the implementation.
std::string byte_char(int b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; ++x) {
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++n;
        }
        cp = 256 + n;
    }
    std::string s;
    if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
    } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return s;
}

// A byte-level tokenizer.json: ids 0..255 are the bytes (so id == byte value), then `extra`
// tokens from 256 in order, then `merges`.
json byte_level_json(const Strings& extra = {}, const Strings& merges = {}) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + static_cast<int>(i);
    json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    return {{"version", "1.0"},
            {"added_tokens", json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", nullptr},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", merges}}}};
}

// Characters as the alphabet (no ByteLevel), Fuse decoder.
json char_level_json(const Strings& chars, const Strings& merges = {}) {
    json vocab = json::object();
    for (size_t i = 0; i < chars.size(); ++i) vocab[chars[i]] = static_cast<int>(i);
    return {{"added_tokens", json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"decoder", {{"type", "Fuse"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

json added(int id, const std::string& content, bool special, bool lstrip = false, bool rstrip = false,
           bool single_word = false, bool normalized = false) {
    return {{"id", id},         {"content", content},         {"special", special},      {"lstrip", lstrip},
            {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", normalized}};
}

std::unique_ptr<BpeTokenizer> load(const json& j) { return BpeTokenizer::from_json(j.dump(), "test.json"); }

// The IoError message load(j) throws ("" when it does not throw).
std::string load_error(const json& j) {
    try {
        load(j);
    } catch (const rlpt::IoError& e) {
        return e.message();
    }
    return "";
}
std::string load_error_text(const std::string& text) {
    try {
        BpeTokenizer::from_json(text, "test.json");
    } catch (const rlpt::IoError& e) {
        return e.message();
    }
    return "";
}

class TempDir {
  public:
    TempDir() {
        static int counter = 0;
        path_ =
            fs::temp_directory_path() / ("rlpt_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string str() const { return path_.string(); }
    void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

  private:
    fs::path path_;
};

#define EXPECT_ERROR_HAS(expr, needle)                                                  \
    do {                                                                                \
        const std::string msg_ = (expr);                                                \
        EXPECT_NE(msg_.find(needle), std::string::npos) << "message: '" << msg_ << "'"; \
    } while (0)

}  // namespace

// ---- BPE merges ----

TEST(BpeTokenizer, MergesByRankThenLeftmost) {
    // ids: 256 "bc", 257 "ab", 258 "abc"
    auto tok = load(byte_level_json({"bc", "ab", "abc"}, {"b c", "a b", "a bc"}));
    // (b,c) has the lowest rank, then (a,bc) -> abc.
    EXPECT_EQ(tok->encode("abc"), (Ids{258}));
    EXPECT_EQ(tok->encode("ab"), (Ids{257}));
    EXPECT_EQ(tok->encode("abcab"), (Ids{258, 257}));

    // Equal pairs merge leftmost first: "aaa" -> "aa" "a"; "aaaa" -> "aaaa" via "aa aa".
    auto tok2 = load(byte_level_json({"aa", "aaaa"}, {"a a", "aa aa"}));
    EXPECT_EQ(tok2->encode("aaa"), (Ids{256, 'a'}));
    EXPECT_EQ(tok2->encode("aaaa"), (Ids{257}));
    EXPECT_EQ(tok2->encode("aaaaa"), (Ids{257, 'a'}));
}

TEST(BpeTokenizer, MergesAcceptPairListsAndSpacesAsG) {
    // [a, b] pairs (tokenizers >= 0.20) and byte-level spaces written as "Ġ".
    json j = byte_level_json({"Ġa", "Ġab"}, {});
    j["model"]["merges"] = json::array({json::array({"Ġ", "a"}), json::array({"Ġa", "b"})});
    auto tok = load(j);
    EXPECT_EQ(tok->encode(" ab"), (Ids{257}));
    EXPECT_EQ(tok->id_to_token(257), "Ġab");
    EXPECT_EQ(tok->decode(Ids{257, 257}), " ab ab");
}

TEST(BpeTokenizer, IgnoreMergesEmitsWholeVocabularyPieces) {
    // "abc" is in the vocabulary but no merge produces it.
    json j = byte_level_json({"abc"}, {});
    EXPECT_EQ(load(j)->encode("abc"), (Ids{'a', 'b', 'c'}));
    j["model"]["ignore_merges"] = true;
    EXPECT_EQ(load(j)->encode("abc"), (Ids{256}));
    EXPECT_EQ(load(j)->encode("abcd"), (Ids{'a', 'b', 'c', 'd'}));
}

TEST(BpeTokenizer, CacheGivesSameResultsAndIsThreadSafe) {
    auto tok = load(byte_level_json({"he", "ll", "hell", "hello"}, {"h e", "l l", "he ll", "hell o"}));
    const Ids first = tok->encode("hello hello");
    EXPECT_EQ(first, (Ids{259, ' ', 259}));  // "hello", " hello": the space byte is id 32
    EXPECT_EQ(tok->encode("hello"), (Ids{259}));
    EXPECT_GT(tok->cache_size(), 0u);
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            bool all = true;
            for (int i = 0; i < 500; ++i)
                all = all && tok->encode("hello hell he" + std::to_string(i % 7)) ==
                                 tok->encode("hello hell he" + std::to_string(i % 7));
            ok[t] = all;
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

TEST(BpeTokenizer, LongInputsDoNotExhaustTheRegexStack) {
    // Regex backtracking over one huge whitespace run or word must not overflow ICU's stack.
    json j = byte_level_json();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex", R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    for (const json& config : {byte_level_json(), j}) {
        auto tok = load(config);
        for (const std::string& text : {std::string(1000000, ' ') + "x", std::string(300000, 'a'),
                                        std::string(100000, '\n') + std::string(100000, ' ') + "!"}) {
            const Ids ids = tok->encode(text);
            EXPECT_EQ(ids.size(), text.size());  // no merges: one id per byte
            EXPECT_EQ(tok->decode(ids), text);
        }
    }
}

// ---- pre-tokenizers ----

TEST(BpeTokenizer, Gpt2PatternFromByteLevelUseRegex) {
    auto tok = load(byte_level_json());
    EXPECT_EQ(tok->pre_tokenize("Hello world  foo's 123"), (Strings{"Hello", " world", " ", " foo", "'s", " 123"}));
    EXPECT_EQ(tok->pre_tokenize("a\n\n b  "), (Strings{"a", "\n\n", " b", "  "}));
}

TEST(BpeTokenizer, Qwen2SplitPattern) {
    json j = byte_level_json();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    auto tok = load(j);
    EXPECT_EQ(tok->pre_tokenize("12345 abc\n\n  x  "),
              (Strings{"1", "2", "3", "4", "5", " abc", "\n\n", " ", " x", "  "}));
    EXPECT_EQ(tok->pre_tokenize("DON'T stop: $5!\n"), (Strings{"DON", "'T", " stop", ":", " $", "5", "!\n"}));
    EXPECT_EQ(tok->pre_tokenize("你好，世界"), (Strings{"你好", "，世界"}));
}

TEST(BpeTokenizer, Llama3SplitPatternGroupsThreeDigits) {
    json j = byte_level_json();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    auto tok = load(j);
    EXPECT_EQ(tok->pre_tokenize("1234567"), (Strings{"123", "456", "7"}));
    EXPECT_EQ(tok->pre_tokenize("I'M here"), (Strings{"I", "'M", " here"}));
}

TEST(BpeTokenizer, SplitBehaviorsAndInvert) {
    // HF's documented example: "the-final--countdown" split on "-".
    auto pieces = [](const std::string& behavior, bool invert) {
        json j = char_level_json({"t", "h", "e", "-", "f", "i", "n", "a", "l", "c", "o", "u", "d", "w"});
        j["pre_tokenizer"] = {{"type", "Split"},
                              {"pattern", {{"String", "-"}}},
                              {"behavior", behavior},
                              {"invert", invert}};
        return load(j)->pre_tokenize("the-final--countdown");
    };
    EXPECT_EQ(pieces("Removed", false), (Strings{"the", "final", "countdown"}));
    EXPECT_EQ(pieces("Isolated", false), (Strings{"the", "-", "final", "-", "-", "countdown"}));
    EXPECT_EQ(pieces("MergedWithPrevious", false), (Strings{"the-", "final-", "-", "countdown"}));
    EXPECT_EQ(pieces("MergedWithNext", false), (Strings{"the", "-final", "-", "-countdown"}));
    EXPECT_EQ(pieces("Contiguous", false), (Strings{"the", "-", "final", "--", "countdown"}));
    EXPECT_EQ(pieces("Removed", true), (Strings{"-", "-", "-"}));
}

TEST(BpeTokenizer, StringPatternIsLiteral) {
    json j = char_level_json({"a", ".", "*", "b"});
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", ".*"}}}, {"behavior", "Isolated"}};
    EXPECT_EQ(load(j)->pre_tokenize("a.*b.a"), (Strings{"a", ".*", "b.a"}));
}

TEST(BpeTokenizer, ByteLevelAddPrefixSpace) {
    json j = byte_level_json();
    j["pre_tokenizer"]["add_prefix_space"] = true;
    j["pre_tokenizer"]["use_regex"] = false;
    auto tok = load(j);
    EXPECT_EQ(tok->pre_tokenize("hello world"), (Strings{" hello world"}));
    EXPECT_EQ(tok->pre_tokenize(" x"), (Strings{" x"}));
    EXPECT_EQ(tok->encode("hi"), (Ids{' ', 'h', 'i'}));
}

TEST(BpeTokenizer, NfcNormalizer) {
    json j = byte_level_json();
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
    auto tok = load(j);
    // e + U+0301 becomes U+00E9 (bytes C3 A9) before BPE.
    EXPECT_EQ(tok->encode("e\xCC\x81"), (Ids{0xC3, 0xA9}));
    EXPECT_EQ(load(byte_level_json())->encode("e\xCC\x81"), (Ids{'e', 0xCC, 0x81}));
}

// ---- added tokens ----

TEST(BpeTokenizer, AddedTokensLongestMatchAndSpecialSwitch) {
    json j = byte_level_json();
    j["added_tokens"] = {added(300, "<x>", true), added(301, "<x>y", false)};
    auto tok = load(j);
    EXPECT_EQ(tok->vocab_size(), 302);
    EXPECT_EQ(tok->encode("a<x>yb"), (Ids{'a', 301, 'b'}));
    EXPECT_EQ(tok->encode("a<x>b"), (Ids{'a', 300, 'b'}));
    // Not allowed: the special token is plain text; the scan resumes after it, as HF does.
    EXPECT_EQ(tok->encode("a<x>b", false), (Ids{'a', '<', 'x', '>', 'b'}));
    EXPECT_EQ(tok->encode("<x>y", false), (Ids{301}));
    EXPECT_TRUE(tok->is_special(300));
    EXPECT_FALSE(tok->is_special(301));
    EXPECT_EQ(tok->decode(Ids{'a', 300, 301}), "a<x><x>y");
    EXPECT_EQ(tok->decode(Ids{'a', 300, 301}, true), "a<x>y");
    // Ids 256..299 are holes: no token, skipped by decode, an error for id_to_token.
    EXPECT_EQ(tok->decode(Ids{'a', 260, 'b'}), "ab");
    EXPECT_THROW(tok->id_to_token(260), rlpt::ValueError);
    EXPECT_EQ(tok->token_to_id("<x>y"), 301);
}

TEST(BpeTokenizer, AddedTokensStripAndSingleWord) {
    json j = byte_level_json();
    j["added_tokens"] = {added(300, "<m>", true, /*lstrip=*/true, /*rstrip=*/true),
                         added(301, "tok", false, false, false, /*single_word=*/true)};
    auto tok = load(j);
    EXPECT_EQ(tok->encode("a  <m>  b"), (Ids{'a', 300, 'b'}));
    EXPECT_EQ(tok->encode("tok x"), (Ids{301, ' ', 'x'}));
    EXPECT_EQ(tok->encode("xtok"), (Ids{'x', 't', 'o', 'k'}));
    EXPECT_EQ(tok->encode("tok_"), (Ids{'t', 'o', 'k', '_'}));
    EXPECT_EQ(tok->encode("(tok)"), (Ids{'(', 301, ')'}));
}

TEST(BpeTokenizer, NormalizedAddedTokenMatchesAfterNfc) {
    json j = byte_level_json();
    j["normalizer"] = {{"type", "NFC"}};
    j["added_tokens"] = {added(300, "caf\xC3\xA9", false, false, false, false, /*normalized=*/true)};
    auto tok = load(j);
    EXPECT_EQ(tok->encode("cafe\xCC\x81!"), (Ids{300, '!'}));
}

// ---- decoding ----

TEST(BpeTokenizer, DecodeInvalidUtf8BecomesReplacementCharacter) {
    auto tok = load(byte_level_json());
    EXPECT_EQ(tok->decode(Ids{'a', 0xE2, 0x82}), "a\xEF\xBF\xBD");  // truncated 3-byte sequence
    EXPECT_EQ(tok->decode(Ids{0xE2, 0x82, 0xAC}), "\xE2\x82\xAC");  // complete: €
    EXPECT_EQ(tok->decode(Ids{0xFF, 'x', 0xC0, 0x80}), "\xEF\xBF\xBDx\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(tok->decode(Ids{}), "");
}

TEST(BpeTokenizer, DecodersFuseAndNone) {
    json j = char_level_json({"a", "b"});
    EXPECT_EQ(load(j)->decode(Ids{0, 1, 0}), "aba");
    j["decoder"] = nullptr;  // HF joins tokens with spaces when there is no decoder
    EXPECT_EQ(load(j)->decode(Ids{0, 1, 0}), "a b a");
}

TEST(BpeTokenizer, UnknownCharacters) {
    json j = char_level_json({"a", "b", "<unk>"});
    EXPECT_THROW(load(j)->encode("axb"), rlpt::ValueError);
    try {
        load(j)->encode("ax");
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("U+0078 'x'"), std::string::npos) << e.message();
    }
    j["model"]["unk_token"] = "<unk>";
    EXPECT_EQ(load(j)->encode("axyb"), (Ids{0, 2, 2, 1}));
    j["model"]["fuse_unk"] = true;
    EXPECT_EQ(load(j)->encode("axyb"), (Ids{0, 2, 1}));
}

TEST(BpeTokenizer, InvalidUtf8InputIsValueError) {
    auto tok = load(byte_level_json());
    try {
        tok->encode("ab\xC3(");
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("at byte 2"), std::string::npos) << e.message();
    }
}

// ---- special ids, files, saving ----

TEST(BpeTokenizer, SpecialIdsFromConfigFiles) {
    json j = byte_level_json();
    j["added_tokens"] = {added(300, "<s>", true), added(301, "</s>", true), added(302, "<pad>", true)};
    TempDir dir;
    dir.write("tokenizer.json", j.dump());
    EXPECT_EQ(BpeTokenizer::from_dir(dir.str())->eos_id(), -1);  // no config files: unset

    dir.write("config.json", R"({"bos_token_id": 300, "eos_token_id": [301, 7], "pad_token_id": null})");
    auto tok = BpeTokenizer::from_dir(dir.str());
    EXPECT_EQ(tok->bos_id(), 300);
    EXPECT_EQ(tok->eos_id(), 301);
    EXPECT_EQ(tok->pad_id(), -1);

    // tokenizer_config.json wins per field; null means none; missing keys fall back to config.json.
    dir.write("tokenizer_config.json",
              R"({"eos_token": {"content": "<pad>"}, "pad_token": "</s>", "bos_token": null})");
    tok = BpeTokenizer::from_dir(dir.str());
    EXPECT_EQ(tok->bos_id(), -1);
    EXPECT_EQ(tok->eos_id(), 302);
    EXPECT_EQ(tok->pad_id(), 301);

    dir.write("tokenizer_config.json", R"({"eos_token": "<missing>"})");
    try {
        BpeTokenizer::from_dir(dir.str());
        FAIL() << "no throw";
    } catch (const rlpt::IoError& e) {
        EXPECT_NE(e.message().find("eos_token '<missing>' is not in the tokenizer's vocabulary"), std::string::npos);
        EXPECT_NE(e.message().find("tokenizer_config.json"), std::string::npos);
    }
    dir.write("tokenizer_config.json", R"({"eos_token": 5})");
    EXPECT_THROW(BpeTokenizer::from_dir(dir.str()), rlpt::IoError);
    dir.write("tokenizer_config.json", "{}");
    dir.write("config.json", R"({"eos_token_id": 999})");
    EXPECT_THROW(BpeTokenizer::from_dir(dir.str()), rlpt::IoError);
}

TEST(BpeTokenizer, SetSpecialIdsValidates) {
    json j = byte_level_json();
    j["added_tokens"] = {added(300, "<e>", true)};
    auto tok = load(j);
    tok->set_special_ids({-1, 300, 'a'});
    EXPECT_EQ(tok->eos_id(), 300);
    EXPECT_EQ(tok->pad_id(), 'a');
    EXPECT_THROW(tok->set_special_ids({-1, 299, -1}), rlpt::ValueError);  // a hole
    EXPECT_THROW(tok->set_special_ids({301, -1, -1}), rlpt::ValueError);
}

TEST(BpeTokenizer, SaveWritesLoadableFiles) {
    json j = byte_level_json({"ab"}, {"a b"});
    j["added_tokens"] = {added(300, "<e>", true)};
    auto tok = load(j);
    tok->set_special_ids({-1, 300, 300});
    TempDir dir;
    tok->save(dir.str() + "/nested/out");
    auto loaded = rlpt::tokenizer::load_tokenizer(dir.str() + "/nested/out");
    EXPECT_EQ(loaded->kind(), "bpe");
    EXPECT_EQ(loaded->encode("ab<e>"), (Ids{256, 300}));
    EXPECT_EQ(loaded->eos_id(), 300);
    EXPECT_EQ(loaded->pad_id(), 300);
    EXPECT_EQ(loaded->bos_id(), -1);
    const json config = json::parse(std::ifstream(dir.str() + "/nested/out/tokenizer_config.json"));
    EXPECT_EQ(config["eos_token"], "<e>");
    EXPECT_TRUE(config["bos_token"].is_null());
}

TEST(BpeTokenizer, LoadTokenizerErrorsNameTheDirectory) {
    try {
        rlpt::tokenizer::load_tokenizer("/nonexistent/rlpt/model");
        FAIL() << "no throw";
    } catch (const rlpt::IoError& e) {
        EXPECT_NE(e.message().find("/nonexistent/rlpt/model"), std::string::npos);
    }
    TempDir dir;
    try {
        rlpt::tokenizer::load_tokenizer(dir.str());
        FAIL() << "no throw";
    } catch (const rlpt::IoError& e) {
        EXPECT_NE(e.message().find(dir.str()), std::string::npos);
        EXPECT_NE(e.message().find("tokenizer.json"), std::string::npos);
        EXPECT_NE(e.message().find("vocab.bpe"), std::string::npos);
    }
    dir.write("tokenizer_config.json", R"({"rlpt_tokenizer": "morse"})");
    EXPECT_THROW(rlpt::tokenizer::load_tokenizer(dir.str()), rlpt::IoError);
    EXPECT_THROW(BpeTokenizer::from_file(dir.str() + "/tokenizer.json"), rlpt::IoError);
}

// ---- malformed and unsupported tokenizer.json ----

TEST(BpeTokenizer, MalformedFilesAreIoErrors) {
    EXPECT_ERROR_HAS(load_error_text("{\"model\": "), "test.json: invalid JSON");
    EXPECT_ERROR_HAS(load_error_text("[1, 2]"), "expected a JSON object");
    EXPECT_ERROR_HAS(load_error(json{{"added_tokens", json::array()}}), "missing \"model\"");

    json j = byte_level_json({"ab"}, {"a b"});
    j["model"]["merges"] = {"a qq"};
    EXPECT_ERROR_HAS(load_error(j), "merge 0 ('a qq'): token 'qq' is not in the vocabulary");
    j["model"]["merges"] = {"b a"};
    EXPECT_ERROR_HAS(load_error(j), "the merged token 'ba' is not in the vocabulary");
    j["model"]["merges"] = {"a b c"};
    EXPECT_ERROR_HAS(load_error(j), "model.merges[0]");
    j["model"]["merges"] = {7};
    EXPECT_ERROR_HAS(load_error(j), "model.merges[0]");

    j = byte_level_json();
    j["model"]["vocab"]["dup"] = 5;
    EXPECT_ERROR_HAS(load_error(j), "gives id 5 to both");
    j = byte_level_json();
    j["model"]["vocab"]["neg"] = -3;
    EXPECT_ERROR_HAS(load_error(j), "not a valid id");
    j = byte_level_json();
    j["model"]["vocab"] = json::array();
    EXPECT_ERROR_HAS(load_error(j), "model.vocab must be an object");
    j = byte_level_json();
    j["added_tokens"] = {{{"content", "<x>"}}};
    EXPECT_ERROR_HAS(load_error(j), "added_tokens[0] has no id");
    j = byte_level_json();
    j["model"]["unk_token"] = "<unk>";
    EXPECT_ERROR_HAS(load_error(j), "unk_token '<unk>' is not in the vocabulary");
    j = byte_level_json();
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
    j["decoder"] = nullptr;
    EXPECT_ERROR_HAS(load_error(j), "does not compile");
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
    EXPECT_ERROR_HAS(load_error(j), "behavior 'Sideways'");
}

TEST(BpeTokenizer, UnsupportedFeaturesAreNamed) {
    json j = byte_level_json();
    j["model"]["type"] = "WordPiece";
    EXPECT_ERROR_HAS(load_error(j), "model type 'WordPiece' is not supported");
    j["model"]["type"] = "Unigram";
    EXPECT_ERROR_HAS(load_error(j), "model type 'Unigram' is not supported");

    j = byte_level_json();
    j["normalizer"] = {{"type", "Lowercase"}};
    EXPECT_ERROR_HAS(load_error(j), "normalizer type 'Lowercase' is not supported");
    j = byte_level_json();
    j["pre_tokenizer"] = {{"type", "Metaspace"}};
    j["decoder"] = nullptr;
    EXPECT_ERROR_HAS(load_error(j), "pre_tokenizer type 'Metaspace' is not supported");
    j = byte_level_json();
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "ByteLevel"}, {"use_regex", false}},
                            {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}}}}};
    EXPECT_ERROR_HAS(load_error(j), "ByteLevel pre-tokenizer that is not the last one is not supported");
    j = byte_level_json();
    j["decoder"] = {{"type", "WordPiece"}};
    EXPECT_ERROR_HAS(load_error(j), "decoder type 'WordPiece' is not supported");
    j = byte_level_json();
    j["decoder"] = nullptr;
    EXPECT_ERROR_HAS(load_error(j), "ByteLevel pre-tokenizer without the ByteLevel decoder");
    j = char_level_json({"a"});
    j["decoder"] = {{"type", "ByteLevel"}};
    EXPECT_ERROR_HAS(load_error(j), "ByteLevel decoder without a ByteLevel pre-tokenizer");

    j = byte_level_json();
    j["model"]["dropout"] = 0.1;
    EXPECT_ERROR_HAS(load_error(j), "dropout 0.1 is not supported");
    j = byte_level_json();
    j["model"]["byte_fallback"] = true;
    EXPECT_ERROR_HAS(load_error(j), "byte_fallback is not supported");
    j = byte_level_json();
    j["model"]["continuing_subword_prefix"] = "##";
    EXPECT_ERROR_HAS(load_error(j), "continuing_subword_prefix '##' is not supported");
}
