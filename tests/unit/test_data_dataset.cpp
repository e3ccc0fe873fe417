// JSONL / JSON dataset reader: options, templates, answer extraction and every error path.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "rlpt/core/error.h"
#include "rlpt/data/dataset.h"

using namespace rlpt::data;
namespace fs = std::filesystem;

namespace {

class DatasetTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/rlpt_dataset_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string write(const std::string& name, const std::string& text) {
        const fs::path p = dir_ / name;
        std::ofstream(p, std::ios::binary) << text;
        return p.string();
    }

    // The message of the IoError load_dataset throws, or a test failure.
    std::string load_error(const std::string& name, const std::string& text, const DatasetOptions& o = {}) {
        const std::string path = write(name, text);
        try {
            load_dataset(path, o);
        } catch (const rlpt::IoError& e) {
            return e.message();
        }
        ADD_FAILURE() << "no IoError for " << name;
        return {};
    }

    fs::path dir_;
};

#define EXPECT_CONTAINS(haystack, needle) \
    EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

}  // namespace

TEST_F(DatasetTest, ReadsJsonLinesWithDefaults) {
    const std::string path =
        write("d.jsonl", "{\"prompt\": \"1+1=\", \"ground_truth\": \"2\", \"data_source\": \"a/b\"}\n"
                         "\n"
                         "   \r\n"
                         "{\"prompt\": \"caf\\u00e9\", \"ground_truth\": 7, \"data_source\": \"c/d\"}\r\n"
                         "{\"prompt\": \"x\", \"ground_truth\": 2.5, \"data_source\": \"c/d\"}");
    std::vector<Example> ex = load_dataset(path, {});
    ASSERT_EQ(ex.size(), 3u);
    EXPECT_EQ(ex[0].prompt, "1+1=");
    EXPECT_EQ(ex[0].ground_truth, "2");
    EXPECT_EQ(ex[0].data_source, "a/b");
    EXPECT_EQ(ex[0].extra, nlohmann::json::object());
    EXPECT_EQ(ex[0].index, 0);
    EXPECT_EQ(ex[1].prompt, "caf\xC3\xA9");
    EXPECT_EQ(ex[1].ground_truth, "7");  // numbers become their JSON text
    EXPECT_EQ(ex[1].index, 1);           // blank lines do not count
    EXPECT_EQ(ex[2].ground_truth, "2.5");
}

TEST_F(DatasetTest, KeysTemplateSuffixExtraAndDefaultDataSource) {
    const std::string path =
        write("d.jsonl", R"({"q": "What is 2+2?", "rm": {"gt": "4"}, "meta": {"id": 5}, "lvl": 3})"
                         "\n"
                         R"({"q": "Hi", "rm": {"gt": "x"}, "meta": {"id": 6}, "lvl": 1, "src": "own/src"})"
                         "\n");
    DatasetOptions o;
    o.prompt_key = "q";
    o.answer_key = "rm.gt";
    o.data_source_key = "src";
    o.default_data_source = "my/data";
    o.extra_keys = {"meta.id", "lvl"};
    o.prompt_template = "Question: {prompt}\nAnswer:";
    o.prompt_suffix = " (be brief)";
    std::vector<Example> ex = load_dataset(path, o);
    ASSERT_EQ(ex.size(), 2u);
    EXPECT_EQ(ex[0].prompt, "Question: What is 2+2?\nAnswer: (be brief)");
    EXPECT_EQ(ex[0].ground_truth, "4");
    EXPECT_EQ(ex[0].data_source, "my/data");
    EXPECT_EQ(ex[0].extra, (nlohmann::json{{"meta.id", 5}, {"lvl", 3}}));
    EXPECT_EQ(ex[1].data_source, "own/src");
}

TEST_F(DatasetTest, Gsm8kPresetMatchesVerlPreprocessing) {
    const std::string path = write("g.jsonl", R"({"question": "How many?", "answer": "2 + 3 = <<2+3=5>>5\n#### 1,005"})"
                                              "\n");
    std::vector<Example> ex = load_dataset(path, gsm8k_dataset_options());
    ASSERT_EQ(ex.size(), 1u);
    EXPECT_EQ(ex[0].prompt, "How many? Let's think step by step and output the final answer after \"####\".");
    EXPECT_EQ(ex[0].ground_truth, "1005");
    EXPECT_EQ(ex[0].data_source, "openai/gsm8k");
}

TEST(DataGsm8kAnswer, Extraction) {
    EXPECT_EQ(gsm8k_extract_answer("work\n#### 72"), "72");
    EXPECT_EQ(gsm8k_extract_answer("#### 1,234,567"), "1234567");
    EXPECT_EQ(gsm8k_extract_answer("#### -3.5"), "-3.5");
    EXPECT_EQ(gsm8k_extract_answer("#### 1 and #### 2"), "2");
    EXPECT_EQ(gsm8k_extract_answer("#### 1 and #### x"), "1");  // the last one that parses
    EXPECT_EQ(gsm8k_extract_answer("#### $5"), std::nullopt);
    EXPECT_EQ(gsm8k_extract_answer("no marker"), std::nullopt);
    EXPECT_EQ(parse_answer_extraction("gsm8k"), AnswerExtraction::kGsm8k);
    EXPECT_EQ(parse_answer_extraction("none"), AnswerExtraction::kNone);
    EXPECT_THROW(parse_answer_extraction("math"), rlpt::ConfigError);
}

TEST_F(DatasetTest, JsonArrayFilesAndJsonLinesInDotJson) {
    const std::string arr = write("a.json", "[\n"
                                            "  {\"prompt\": \"p0\", \"ground_truth\": \"0\", \"data_source\": \"s\"},\n"
                                            "  {\"prompt\": \"p1 [with, brackets] {and \\\"quotes\\\"}\",\n"
                                            "   \"ground_truth\": \"1\", \"data_source\": \"s\"}\n"
                                            "]\n");
    std::vector<Example> ex = load_dataset(arr, {});
    ASSERT_EQ(ex.size(), 2u);
    EXPECT_EQ(ex[1].prompt, "p1 [with, brackets] {and \"quotes\"}");
    EXPECT_EQ(ex[1].index, 1);

    const std::string lines = write("l.json", "{\"prompt\": \"p\", \"ground_truth\": \"g\", \"data_source\": \"s\"}\n");
    EXPECT_EQ(load_dataset(lines, {}).size(), 1u);
}

TEST_F(DatasetTest, ErrorsNameFileAndLine) {
    const std::string good = R"({"prompt": "p", "ground_truth": "g", "data_source": "s"})";
    std::string msg;

    msg = load_error("bad.jsonl", good + "\n{\"prompt\": \"p\",\n");
    EXPECT_CONTAINS(msg, "bad.jsonl:2: bad JSON");

    msg = load_error("arr.jsonl", good + "\n\n[1, 2]\n");
    EXPECT_CONTAINS(msg, "arr.jsonl:3: expected a JSON object, got array");

    msg = load_error("noprompt.jsonl", R"({"ground_truth": "g", "data_source": "s"})");
    EXPECT_CONTAINS(msg, "noprompt.jsonl:1: missing key 'prompt'");

    msg = load_error("noanswer.jsonl", R"({"prompt": "p", "data_source": "s"})");
    EXPECT_CONTAINS(msg, "noanswer.jsonl:1: missing key 'ground_truth'");

    msg = load_error("prompttype.jsonl", R"({"prompt": 5, "ground_truth": "g", "data_source": "s"})");
    EXPECT_CONTAINS(msg, "prompttype.jsonl:1: key 'prompt': expected a string, got number 5");

    msg = load_error("chat.jsonl", R"({"prompt": [{"role": "user"}], "ground_truth": "g", "data_source": "s"})");
    EXPECT_CONTAINS(msg, "chat.jsonl:1: key 'prompt': expected a string, got array");

    msg = load_error("answertype.jsonl", R"({"prompt": "p", "ground_truth": true, "data_source": "s"})");
    EXPECT_CONTAINS(msg, "answertype.jsonl:1: key 'ground_truth': expected a string or a number, got boolean");

    msg = load_error("nods.jsonl", R"({"prompt": "p", "ground_truth": "g"})");
    EXPECT_CONTAINS(msg, "nods.jsonl:1: missing key 'data_source' and no default data_source is configured");

    msg = load_error("dstype.jsonl", R"({"prompt": "p", "ground_truth": "g", "data_source": ["x"]})");
    EXPECT_CONTAINS(msg, "dstype.jsonl:1: key 'data_source': expected a non-empty string");

    msg = load_error("dsempty.jsonl", R"({"prompt": "p", "ground_truth": "g", "data_source": ""})");
    EXPECT_CONTAINS(msg, "dsempty.jsonl:1: key 'data_source': expected a non-empty string");

    DatasetOptions extra;
    extra.extra_keys = {"meta.id"};
    msg = load_error("extra.jsonl",
                     good + "\n" + R"({"prompt": "p", "ground_truth": "g", "data_source": "s", "meta": 1})", extra);
    EXPECT_CONTAINS(msg, "extra.jsonl:1: missing key 'meta.id'");

    msg = load_error("gsm.jsonl", R"({"question": "q", "answer": "the answer is 5"})", gsm8k_dataset_options());
    EXPECT_CONTAINS(msg, "gsm.jsonl:1: key 'answer': no '#### <number>' answer in \"the answer is 5\"");

    msg = load_error("gsmnum.jsonl", R"({"question": "q", "answer": 5})", gsm8k_dataset_options());
    EXPECT_CONTAINS(msg, "gsmnum.jsonl:1: key 'answer': expected a string, got number");

    msg = load_error("empty.jsonl", "\n\n");
    EXPECT_CONTAINS(msg, "holds no records");

    msg = load_error("badarr.json", "[\n  {\"prompt\": \"p\",\n  }\n]");
    EXPECT_CONTAINS(msg, "badarr.json: bad JSON");
    EXPECT_CONTAINS(msg, "line 3");

    msg = load_error("elem.json", "[\n" + good + ",\n\n  {\"prompt\": \"p\",\n   \"data_source\": \"s\"}\n]");
    EXPECT_CONTAINS(msg, "elem.json:4 (element 1): missing key 'ground_truth'");

    msg = load_error("elemtype.json", "[" + good + ", 3]");
    EXPECT_CONTAINS(msg, "elemtype.json:1 (element 1): expected a JSON object, got number");

    try {
        load_dataset((dir_ / "absent.jsonl").string(), {});
        FAIL() << "no throw";
    } catch (const rlpt::IoError& e) {
        EXPECT_CONTAINS(e.message(), "cannot open dataset file");
    }
}

TEST_F(DatasetTest, BadOptionsAreConfigErrors) {
    const std::string path = write("d.jsonl", R"({"prompt": "p", "ground_truth": "g", "data_source": "s"})");
    DatasetOptions o;
    o.prompt_template = "no placeholder";
    EXPECT_THROW(load_dataset(path, o), rlpt::ConfigError);
    o.prompt_template = "{prompt} {prompt}";
    EXPECT_THROW(load_dataset(path, o), rlpt::ConfigError);
    o = {};
    o.prompt_key = "";
    EXPECT_THROW(load_dataset(path, o), rlpt::ConfigError);
    const std::string parquet = write("d.parquet", "PAR1");
    try {
        load_dataset(parquet, {});
        FAIL() << "no throw";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_CONTAINS(e.message(), "unsupported file type (supported: .jsonl, .json)");
    }
}

TEST(Dataset, ResponseKeyAndWhichKeysAStageNeeds) {
    using rlpt::data::AnswerNeed;
    rlpt::data::DatasetOptions o;
    o.answer_key = "answer";
    o.default_data_source = "my/task";
    o.response_key = "response";
    const nlohmann::json sft_row = {{"prompt", "2+2="}, {"response", "4"}};
    const nlohmann::json rl_row = {{"prompt", "2+2="}, {"answer", "4"}};
    // RL: the answer is required, a response is read when present.
    EXPECT_THROW(rlpt::data::example_from_json(sft_row, o, "f:1", 0), rlpt::IoError);
    auto e = rlpt::data::example_from_json(rl_row, o, "f:1", 0);
    EXPECT_EQ(e.ground_truth, "4");
    EXPECT_FALSE(e.response.has_value());
    // SFT training rows: prompt + response; no answer needed.
    o.answer = AnswerNeed::kOptional;
    o.require_response = true;
    e = rlpt::data::example_from_json(sft_row, o, "f:1", 0);
    EXPECT_EQ(*e.response, "4");
    try {
        rlpt::data::example_from_json(rl_row, o, "f:7", 0);
        FAIL() << "a training row without a response must be refused";
    } catch (const rlpt::IoError& err) {
        EXPECT_NE(err.message().find("f:7: missing key 'response'"), std::string::npos) << err.message();
    }
    // SFT validation rows: the answer, or else the response, is the ground truth.
    o.answer = AnswerNeed::kOrResponse;
    o.require_response = false;
    EXPECT_EQ(rlpt::data::example_from_json(rl_row, o, "f:1", 0).ground_truth, "4");
    EXPECT_EQ(rlpt::data::example_from_json(sft_row, o, "f:1", 0).ground_truth, "4");
    try {
        rlpt::data::example_from_json(nlohmann::json{{"prompt", "x"}}, o, "v:3", 0);
        FAIL() << "a validation row with neither answer nor response must be refused";
    } catch (const rlpt::IoError& err) {
        EXPECT_NE(err.message().find("v:3: missing key 'answer' (or 'response'"), std::string::npos) << err.message();
    }
}
