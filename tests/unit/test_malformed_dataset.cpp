// Broken JSONL / JSON dataset files: every one must be an IoError naming the file, the line
// and what is wrong; never a crash or an nlohmann exception. Named cases, then a mini-fuzz.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rlpt/data/dataset.h"
#include "test_malformed_util.h"

namespace rlpt::data {
namespace {

using malformed::expect_error;
using malformed::TempDir;

DatasetOptions options(bool with_extra = true) {
    DatasetOptions o;
    o.prompt_key = "prompt";
    o.answer_key = "answer";
    o.default_data_source = "test";
    if (with_extra) o.extra_keys = {"meta.id"};
    return o;
}

const char* kSeedJsonl = R"({"prompt": "1+1=", "answer": "2", "meta": {"id": 1}}
{"prompt": "2+3=", "answer": 5, "data_source": "arith", "meta": {"id": 2}}

{"prompt": "7*6=", "answer": "42", "meta": {"id": [3, "x"]}}
)";

const char* kSeedJsonArray = R"([
  {"prompt": "1+1=", "answer": "2", "meta": {"id": 1}},
  {"prompt": "a \"quoted\" [tricky] {one}", "answer": "3", "meta": {"id": 2}}
])";

TEST(MalformedDataset, SeedsAreValid) {
    TempDir dir("ds");
    EXPECT_EQ(load_dataset(dir.write("a.jsonl", kSeedJsonl), options()).size(), 3u);
    EXPECT_EQ(load_dataset(dir.write("a.json", kSeedJsonArray), options()).size(), 2u);
}

TEST(MalformedDataset, NamedCases) {
    struct Case {
        const char* name;
        std::string text;
        std::vector<std::string> parts;
    };
    const std::string deep = "{\"prompt\": " + malformed::nested_json(100000) + ", \"answer\": \"1\"}\n";
    const std::vector<Case> cases = {
        {"truncated record", "{\"prompt\": \"1+1=\", \"answ\n", {"d.jsonl:1: bad JSON", "parse error"}},
        {"second line broken", "{\"prompt\": \"a\", \"answer\": \"1\"}\n{\"prompt\": }\n", {"d.jsonl:2: bad JSON"}},
        {"not an object", "[1, 2]\n", {"d.jsonl:1: expected a JSON object, got array"}},
        {"a bare string", "\"prompt\"\n", {"d.jsonl:1: expected a JSON object, got string"}},
        {"missing prompt", "{\"answer\": \"1\"}\n", {"d.jsonl:1: missing key 'prompt'"}},
        {"missing answer", "{\"prompt\": \"x\"}\n", {"d.jsonl:1: missing key 'answer'"}},
        {"prompt not a string",
         "{\"prompt\": 5, \"answer\": \"1\"}\n",
         {"d.jsonl:1: key 'prompt': expected a string, got number 5"}},
        {"answer is an object",
         "{\"prompt\": \"x\", \"answer\": {\"a\": 1}}\n",
         {"d.jsonl:1: key 'answer': expected a string or a number, got object"}},
        {"empty data_source",
         "{\"prompt\": \"x\", \"answer\": \"1\", \"data_source\": \"\"}\n",
         {"d.jsonl:1: key 'data_source': expected a non-empty string"}},
        {"missing extra key",
         "{\"prompt\": \"x\", \"answer\": \"1\"}\n{\"prompt\": \"x\", \"answer\": \"1\", \"meta\": 3}\n",
         {"d.jsonl:1: missing key 'meta.id'"}},
        {"number overflow", "{\"prompt\": \"x\", \"answer\": 1e999}\n", {"d.jsonl:1: bad JSON", "number overflow"}},
        {"deep nesting", deep, {"d.jsonl:1: bad JSON: nested deeper than 200 levels"}},
        {"invalid utf-8", "{\"prompt\": \"\xff\xfe\", \"answer\": \"1\"}\n", {"d.jsonl:1: bad JSON", "UTF-8"}},
        {"NUL byte", std::string("{\"prompt\": \"a\0\", \"answer\": \"1\"}\n", 32), {"d.jsonl:1: bad JSON"}},
        {"trailing garbage", "{\"prompt\": \"x\", \"answer\": \"1\"} trailing\n", {"d.jsonl:1: bad JSON"}},
        {"two records on a line",
         "{\"prompt\": \"x\", \"answer\": \"1\"}{\"prompt\": \"y\", \"answer\": \"2\"}\n",
         {"d.jsonl:1: bad JSON"}},
        {"only blank lines", "\n  \n\t\n", {"dataset file", "d.jsonl' holds no records"}},
        {"empty file", "", {"d.jsonl' holds no records"}},
        {"binary garbage", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16), {"d.jsonl:1: bad JSON"}},
    };
    TempDir dir("ds");
    for (const auto& c : cases) {
        const std::string path = dir.write("d.jsonl", c.text);
        const bool extra = std::string(c.name) == "missing extra key";
        expect_error<IoError>([&] { load_dataset(path, options(extra)); }, c.parts, c.name);
    }
    // JSON-array files name the file (and the element's line for record errors).
    const std::vector<Case> array_cases = {
        {"unclosed array", "[{\"prompt\": \"x\", \"answer\": \"1\"},\n", {"d.json: bad JSON"}},
        {"element not an object",
         "[\n{\"prompt\": \"x\", \"answer\": \"1\"},\n 7\n]",
         {"d.json:3 (element 1): expected a JSON object"}},
        {"deep element", "[" + malformed::nested_json(5000) + "]", {"d.json: bad JSON: nested deeper than 200 levels"}},
        {"overflow", "[{\"prompt\": \"x\", \"answer\": -1e400}]", {"d.json: bad JSON", "number overflow"}},
    };
    for (const auto& c : array_cases) {
        const std::string path = dir.write("d.json", c.text);
        expect_error<IoError>([&] { load_dataset(path, options(false)); }, c.parts, c.name);
    }
    expect_error<IoError>([&] { load_dataset(dir.file("absent.jsonl"), options()); },
                          {"cannot open dataset file", "absent.jsonl"}, "missing file");
    expect_error<ConfigError>([&] { load_dataset(dir.write("d.csv", "a,b\n"), options()); },
                              {"d.csv': unsupported file type"}, "csv");
}

// Nesting up to the limit is still data (kept in Example::extra).
TEST(MalformedDataset, ModerateNestingIsAccepted) {
    TempDir dir("ds");
    const std::string text =
        "{\"prompt\": \"x\", \"answer\": \"1\", \"meta\": {\"id\": " + malformed::nested_json(150) + "}}\n";
    auto examples = load_dataset(dir.write("d.jsonl", text), options());
    ASSERT_EQ(examples.size(), 1u);
    EXPECT_EQ(examples[0].extra["meta.id"].dump().size(), 301u);
}

TEST(MalformedDataset, FuzzedJsonLinesOnlyGiveIoErrors) {
    TempDir dir("ds");
    const std::string path = dir.file("f.jsonl");
    auto counts = malformed::fuzz({kSeedJsonl}, 1000, 11, "{}[]\":,\\0123456789.eE-+ \ntruefalsn",
                                  [&](const std::string& text) {
                                      dir.write("f.jsonl", text);
                                      load_dataset(path, options());
                                  },
                                  {ErrorKind::kIo});
    EXPECT_EQ(counts.bad, 0);
    EXPECT_GT(counts.rejected, 150);
    EXPECT_GT(counts.accepted, 10);
}

TEST(MalformedDataset, FuzzedJsonArraysOnlyGiveIoErrors) {
    TempDir dir("ds");
    const std::string path = dir.file("f.json");
    auto counts = malformed::fuzz({kSeedJsonArray}, 1000, 12, "{}[]\":,\\0123456789.eE-+ \n\rtruefalsn",
                                  [&](const std::string& text) {
                                      dir.write("f.json", text);
                                      load_dataset(path, options());
                                  },
                                  {ErrorKind::kIo});
    EXPECT_EQ(counts.bad, 0);
    EXPECT_GT(counts.rejected, 150);
    EXPECT_GT(counts.accepted, 10);
}

}  // namespace
}  // namespace rlpt::data
