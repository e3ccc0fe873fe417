// Broken tokenizer.json files: each must be an IoError naming the source and the field, never
// a crash, a huge allocation or an nlohmann exception. A file that still loads must encode and
// decode without crashing. Named cases, then a seeded mini-fuzz.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "rlpt/tokenizer/bpe_tokenizer.h"
#include "test_malformed_util.h"

namespace rlpt::tokenizer {
namespace {

using malformed::expect_error;
using nlohmann::json;

// Characters as the alphabet (no ByteLevel), a Split pre-tokenizer, added tokens and merges:
// small, but it goes through most of the reader.
json seed_json() {
    json vocab = json::object();
    const std::vector<std::string> chars = {"a", "b", "c", "d", " ", "1", "2", "+", "=", "ab", "abc", " a", "12"};
    for (size_t i = 0; i < chars.size(); ++i) vocab[chars[i]] = static_cast<int>(i);
    return {{"version", "1.0"},
            {"added_tokens", json::array({{{"id", 13},
                                           {"content", "<eos>"},
                                           {"special", true},
                                           {"lstrip", false},
                                           {"rstrip", false},
                                           {"single_word", false},
                                           {"normalized", false}},
                                          {{"id", 14}, {"content", "<pad>"}, {"special", true}}})},
            {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}}},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers", json::array({{{"type", "Split"},
                                              {"pattern", {{"Regex", "\\p{N}| ?\\p{L}+|\\s+|."}}},
                                              {"behavior", "Isolated"},
                                              {"invert", false}}})}}},
            {"decoder", {{"type", "Fuse"}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"vocab", vocab},
              {"merges", json::array({"a b", "ab c", json::array({" ", "a"}), "1 2"})}}}};
}

void load_and_use(const std::string& text) {
    auto tok = BpeTokenizer::from_json(text, "tok.json");
    const auto ids = tok->encode("abc 12+a=d<eos>");
    (void)tok->decode(ids.data(), ids.size());
    (void)tok->vocab_size();
}

TEST(MalformedTokenizer, SeedLoadsAndEncodes) {
    auto tok = BpeTokenizer::from_json(seed_json().dump(), "tok.json");
    EXPECT_EQ(tok->encode("abc"), (std::vector<int64_t>{10}));
    EXPECT_EQ(tok->encode("12<eos>"), (std::vector<int64_t>{5, 6, 13}));  // \p{N} splits digits
}

TEST(MalformedTokenizer, NamedCases) {
    struct Case {
        const char* name;
        std::string text;
        std::vector<std::string> parts;
    };
    auto edit = [](auto&& f) {
        json j = seed_json();
        f(j);
        return j.dump();
    };
    const std::vector<Case> cases = {
        {"not JSON", "{\"model\": ", {"tok.json: invalid JSON"}},
        {"empty text", "", {"tok.json: invalid JSON"}},
        {"top level array", "[1, 2]", {"tok.json: expected a JSON object at the top level"}},
        {"no model", edit([](json& j) { j.erase("model"); }), {"tok.json: missing \"model\" object"}},
        {"WordPiece model",
         edit([](json& j) { j["model"]["type"] = "WordPiece"; }),
         {"model type 'WordPiece' is not supported"}},
        {"vocab is a list",
         edit([](json& j) { j["model"]["vocab"] = json::array({"a"}); }),
         {"model.vocab must be an object mapping tokens to ids"}},
        {"negative id",
         edit([](json& j) { j["model"]["vocab"]["a"] = -1; }),
         {"model.vocab[\"a\"] = -1 is not a valid id"}},
        {"string id",
         edit([](json& j) { j["model"]["vocab"]["a"] = "0"; }),
         {"model.vocab[\"a\"] must be an integer id, got \"0\""}},
        {"duplicate id", edit([](json& j) { j["model"]["vocab"]["b"] = 0; }), {"model.vocab gives id 0 to both"}},
        {"huge id",
         edit([](json& j) { j["model"]["vocab"]["zz"] = 2147483646; }),
         {"token ids go up to 2147483646 but the file has only 16 tokens"}},
        {"huge added id",
         edit([](json& j) { j["added_tokens"][0]["id"] = 100000000; }),
         {"token ids go up to 100000000"}},
        {"id overflow", edit([](json& j) { j["model"]["vocab"]["a"] = 1e300; }), {"must be an integer id"}},
        {"number overflow text",
         R"({"model": {"type": "BPE", "vocab": {"a": 1e999}}})",
         {"tok.json: invalid JSON", "number overflow"}},
        {"merge of one token",
         edit([](json& j) { j["model"]["merges"][0] = "ab"; }),
         {"model.merges[0] = \"ab\" is not of the form \"a b\""}},
        {"merge as a number", edit([](json& j) { j["model"]["merges"][1] = 5; }), {"model.merges[1] = 5 must be"}},
        {"merge with unknown token", edit([](json& j) { j["model"]["merges"][0] = "x y"; }), {"tok.json", "x"}},
        {"dropout", edit([](json& j) { j["model"]["dropout"] = 0.1; }), {"BPE dropout 0.1 is not supported"}},
        {"byte fallback",
         edit([](json& j) { j["model"]["byte_fallback"] = true; }),
         {"model.byte_fallback is not supported"}},
        {"unk not in vocab",
         edit([](json& j) { j["model"]["unk_token"] = "<unk>"; }),
         {"model.unk_token '<unk>' is not in the vocabulary"}},
        {"normalizer NFKC",
         edit([](json& j) {
             j["normalizer"] = {{"type", "NFKC"}};
         }),
         {"type 'NFKC' is not supported"}},
        {"normalizer without type",
         edit([](json& j) { j["normalizer"] = json::object(); }),
         {"normalizer has no \"type\""}},
        {"pre-tokenizer Metaspace",
         edit([](json& j) {
             j["pre_tokenizer"] = {{"type", "Metaspace"}};
         }),
         {"pre_tokenizer type 'Metaspace' is not supported"}},
        {"bad regex",
         edit([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; }),
         {"pre_tokenizer.pretokenizers[0].pattern"}},
        {"empty regex",
         edit([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = ""; }),
         {"pattern is empty"}},
        {"bad behavior",
         edit([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Merged"; }),
         {"behavior 'Merged' is not one of"}},
        {"pretokenizers not a list",
         edit([](json& j) { j["pre_tokenizer"]["pretokenizers"] = 3; }),
         {"pre_tokenizer.pretokenizers must be a list"}},
        {"ByteLevel decoder alone",
         edit([](json& j) {
             j["decoder"] = {{"type", "ByteLevel"}};
         }),
         {"the ByteLevel decoder without a ByteLevel pre-tokenizer is not supported"}},
        {"decoder WordPiece",
         edit([](json& j) {
             j["decoder"] = {{"type", "WordPiece"}};
         }),
         {"decoder type 'WordPiece' is not supported"}},
        {"added token without content",
         edit([](json& j) { j["added_tokens"][0].erase("content"); }),
         {"added_tokens[0] has no content"}},
        {"added token without id",
         edit([](json& j) { j["added_tokens"][1].erase("id"); }),
         {"added_tokens[1] has no id"}},
        {"added token special not bool",
         edit([](json& j) { j["added_tokens"][0]["special"] = "yes"; }),
         {"added_tokens[0].special must be a boolean, got string"}},
        {"added_tokens not a list",
         edit([](json& j) { j["added_tokens"] = json::object(); }),
         {"added_tokens must be a list"}},
        {"deep nesting",
         "{\"model\": " + malformed::nested_json(100000) + "}",
         {"tok.json: invalid JSON: nested deeper than 64 levels"}},
        {"deep pre-tokenizer sequence",
         [] {
             std::string s = "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\"}";
             for (int i = 0; i < 100; ++i) s = "{\"type\": \"Sequence\", \"pretokenizers\": [" + s + "]}";
             return "{\"pre_tokenizer\": " + s + ", \"model\": {\"type\": \"BPE\", \"vocab\": {}}}";
         }(),
         {"nested deeper than 64 levels"}},
        {"invalid utf-8", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\xc3\x28\": 0}}}", {"tok.json: invalid JSON"}},
    };
    for (const auto& c : cases) {
        std::vector<std::string> parts = c.parts;
        parts.insert(parts.begin(), "tok.json");
        expect_error<IoError>([&] { BpeTokenizer::from_json(c.text, "tok.json"); }, parts, c.name);
    }
}

TEST(MalformedTokenizer, MissingFile) {
    expect_error<IoError>([] { BpeTokenizer::from_file("/no/such/tokenizer.json"); },
                          {"cannot read /no/such/tokenizer.json"});
}

TEST(MalformedTokenizer, FuzzedFilesOnlyGiveRlptErrors) {
    const std::string seed = seed_json().dump(1);
    auto counts = malformed::fuzz({seed}, 3000, 5, "{}[]\":,\\0123456789 abcpN+=<>",
                                  [](const std::string& text) { load_and_use(text); });
    EXPECT_EQ(counts.bad, 0);
    EXPECT_GT(counts.rejected, 500);
    EXPECT_GT(counts.accepted, 30);
}

}  // namespace
}  // namespace rlpt::tokenizer
