// `rlpt generate` (src/app/generate_cli.h): JSON and text output against the library, the
// --prompt-ids path without tokenizer files, and every usage error.
#include <gtest/gtest.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "generate_cli.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/beam_search.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sampler.h"
#include "rlpt/tokenizer/char_tokenizer.h"
#include "unit/test_model_helpers.h"

namespace rlpt::rollout {
namespace {

using model::testing::TempDir;

constexpr const char* kCharset = "0123456789+= ";

struct Run {
    int code;
    std::string out, err;
};

Run run_cli(std::vector<std::string> args) {
    args.insert(args.begin(), "generate");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    const int code = app::generate_command(static_cast<int>(args.size()), argv.data());
    std::fflush(stdout);
    std::fflush(stderr);
    Run r{code, ::testing::internal::GetCapturedStdout(), ::testing::internal::GetCapturedStderr()};
    return r;
}

// A random tiny Qwen2 model over the char tokenizer's vocabulary, saved with (or without) the tokenizer.
std::shared_ptr<model::CausalLM> save_tiny(const std::string& dir, bool with_tokenizer) {
    tokenizer::CharTokenizer tok(kCharset);
    auto a = model::tiny_model_args(model::ModelFamily::kQwen2, tok.vocab_size());
    a.initializer_range = 0.25;
    auto m = model::make_random_causal_lm(a, 5);
    model::save_pretrained(*m, dir);
    if (with_tokenizer) tok.save(dir);
    return m;
}

std::vector<int64_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

TEST(RolloutCli, JsonOutputMatchesTheLibrary) {
    TempDir dir("gen_cli");
    auto m = save_tiny(dir.str(), true);
    tokenizer::CharTokenizer tok(kCharset);
    auto r = run_cli({"--model", dir.str(), "--prompt", "12+7=", "--temperature", "0.9", "--top-p", "0.95", "--top-k",
                      "8", "--max-new-tokens", "6", "--n", "3", "--seed", "4", "--output", "json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const auto prompt = tok.encode("12+7=");
    EXPECT_EQ(ids_of(j["prompt_ids"]), prompt);
    EXPECT_EQ(j["prompt_text"], "12+7=");
    EXPECT_EQ(j["sampling"]["eos_id"], tokenizer::CharTokenizer::kEosId);
    ASSERT_EQ(j["samples"].size(), 3u);

    // The same generation through the library: seeds sample_seed(4, 0, i), EOS from the tokenizer.
    SamplingParams p;
    p.temperature = 0.9;
    p.top_p = 0.95;
    p.top_k = 8;
    p.max_new_tokens = 6;
    p.eos_id = tokenizer::CharTokenizer::kEosId;
    p.pad_id = tokenizer::CharTokenizer::kPadId;
    std::vector<uint64_t> seeds = {sample_seed(4, 0, 0), sample_seed(4, 0, 1), sample_seed(4, 0, 2)};
    auto ref = generate(*m, {prompt, prompt, prompt}, seeds, p);
    for (int64_t i = 0; i < 3; ++i) {
        const auto& s = j["samples"][static_cast<size_t>(i)];
        const int64_t len = ref.response_mask[i].sum().item<int64_t>();
        const auto ids = ids_of(s["token_ids"]);
        ASSERT_EQ(static_cast<int64_t>(ids.size()), len);
        ASSERT_EQ(s["log_probs"].size(), ids.size());
        for (int64_t t = 0; t < len; ++t) {
            EXPECT_EQ(ids[static_cast<size_t>(t)], ref.responses[i][t].item<int64_t>());
            EXPECT_NEAR(s["log_probs"][static_cast<size_t>(t)].get<double>(),
                        ref.rollout_log_probs[i][t].item<double>(), 1e-6);
        }
        EXPECT_EQ(s["text"], tok.decode(ids));
        EXPECT_EQ(s["finish_reason"], finish_reason_name(ref.finish_reasons[static_cast<size_t>(i)]));
        EXPECT_EQ(s["seed"].get<uint64_t>(), seeds[static_cast<size_t>(i)]);
        EXPECT_EQ(s["index"], i);
    }
}

TEST(RolloutCli, PromptIdsWithoutTokenizerFiles) {
    TempDir dir("gen_cli_ids");
    auto m = save_tiny(dir.str(), false);
    auto r = run_cli({"--model", dir.str(), "--prompt-ids", "4, 5,6", "--greedy", "--max-new-tokens", "5", "--output",
                      "json", "--dtype", "bfloat16"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("no text output"), std::string::npos) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(ids_of(j["prompt_ids"]), (std::vector<int64_t>{4, 5, 6}));
    EXPECT_FALSE(j.contains("prompt_text"));
    EXPECT_EQ(j["dtype"], "bfloat16");
    EXPECT_EQ(j["sampling"]["eos_id"], -1);  // no tokenizer, no eos_token_id in config.json
    ASSERT_EQ(j["samples"].size(), 1u);
    const auto& s = j["samples"][0];
    EXPECT_FALSE(s.contains("text"));
    EXPECT_EQ(s["finish_reason"], "length");
    auto bf = model::clone_causal_lm(*m, torch::kBFloat16, torch::kCPU);
    SamplingParams p;
    p.greedy = true;
    p.max_new_tokens = 5;
    auto ref = generate(*bf, {{4, 5, 6}}, {0}, p);
    auto expected = ref.responses[0].contiguous();
    EXPECT_EQ(ids_of(s["token_ids"]),
              std::vector<int64_t>(expected.data_ptr<int64_t>(), expected.data_ptr<int64_t>() + 5));
}

TEST(RolloutCli, TextOutputAndStopTokensFromGenerationConfig) {
    TempDir dir("gen_cli_text");
    save_tiny(dir.str(), true);
    { std::ofstream(dir.file("generation_config.json")) << R"({"eos_token_id": [7, 8]})"; }
    auto r = run_cli({"--model", dir.str(), "--prompt", "3+4=", "--greedy", "--max-new-tokens", "4"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("prompt: 4 tokens"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("3+4="), std::string::npos);
    EXPECT_NE(r.out.find("--- sample 0 (finish: "), std::string::npos);
    EXPECT_NE(r.out.find("log-probs: ["), std::string::npos);
    // eos = 7 (first of generation_config), stops 8 and the tokenizer's <eos> (2).
    auto j =
        nlohmann::json::parse(run_cli({"--model", dir.str(), "--prompt", "3+4=", "--greedy", "--output", "json"}).out);
    EXPECT_EQ(j["sampling"]["eos_id"], 7);
    EXPECT_EQ(ids_of(j["sampling"]["stop_token_ids"]), (std::vector<int64_t>{8, 2}));
    j = nlohmann::json::parse(
        run_cli({"--model", dir.str(), "--prompt", "3+4=", "--greedy", "--output", "json", "--ignore-eos"}).out);
    EXPECT_EQ(j["sampling"]["eos_id"], -1);
    EXPECT_TRUE(j["sampling"]["stop_token_ids"].empty());

    auto help = run_cli({"--help"});
    EXPECT_EQ(help.code, 0);
    EXPECT_NE(help.out.find("--prompt-ids"), std::string::npos);
}

TEST(RolloutCli, UsageErrorsExitWithTwo) {
    TempDir with_tok("gen_cli_err");
    save_tiny(with_tok.str(), true);
    TempDir no_tok("gen_cli_err_nt");
    save_tiny(no_tok.str(), false);
    TempDir empty("gen_cli_err_empty");
    const std::string d = with_tok.str();
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    const std::vector<Case> cases = {
        {{"--model", "/nonexistent/rlpt_model", "--prompt-ids", "1"}, "does not exist"},
        {{"--model", empty.str(), "--prompt-ids", "1"}, "no config.json"},
        {{"--model", no_tok.str(), "--prompt", "1+1="}, "--prompt needs the folder's tokenizer"},
        {{"--model", d}, "one of --prompt or --prompt-ids"},
        {{"--prompt-ids", "1"}, "--model"},
        {{"--model", d, "--prompt", "1", "--prompt-ids", "1"}, "excludes"},
        {{"--model", d, "--prompt-ids", "1", "--greedy", "--top-p", "0.5"}, "excludes"},
        {{"--model", d, "--prompt-ids", "1", "--top-p", "1.5"}, "top_p"},
        {{"--model", d, "--prompt-ids", "1", "--temperature", "0"}, "temperature"},
        {{"--model", d, "--prompt-ids", "1", "--max-new-tokens", "0"}, "max_new_tokens"},
        {{"--model", d, "--prompt-ids", "1", "--n", "0"}, "--n must be >= 1"},
        {{"--model", d, "--prompt-ids", "1,x"}, "'x' is not a non-negative integer"},
        {{"--model", d, "--prompt-ids", "1,,2"}, "'' is not a non-negative integer"},
        {{"--model", d, "--prompt-ids", "-3"}, "not a non-negative integer"},
        {{"--model", d, "--prompt-ids", "1,"}, "comma-separated"},
        {{"--model", d, "--prompt-ids", "1,999"}, "prompt id 999 is outside the model's vocabulary [0, 16)"},
        {{"--model", d, "--prompt-ids", "1", "--chat-template", "qwen2"}, "--chat-template applies to --prompt"},
        {{"--model", d, "--prompt", "1", "--chat-template", "mistral"}, "--chat-template"},
        {{"--model", d, "--prompt", "1", "--dtype", "float64"}, "--dtype"},
        {{"--model", d, "--prompt", "1", "--output", "yaml"}, "--output"},
        {{"--model", d, "--prompt", "1", "--bogus"}, "bogus"},
        {{"--model", d, "--prompt", "1", "--temperature", "abc"}, "--temperature"},
        {{"--model", d, "--prompt", "1+x"}, "--prompt cannot be encoded"},
    };
    for (const auto& c : cases) {
        auto r = run_cli(c.args);
        EXPECT_EQ(r.code, 2) << fmt::format("{}", fmt::join(c.args, " ")) << "\n" << r.err;
        EXPECT_NE(r.err.find(c.message), std::string::npos) << "'" << c.message << "' not in: " << r.err;
        EXPECT_EQ(r.err.rfind("rlpt generate: ", 0), 0u) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
}

// --stop: the sample ends at the token completing the string; the text is cut before it (or
// after it with --include-stop-str-in-output); token ids keep that token.
TEST(RolloutCli, StopStringsCutTheTextNotTheTokens) {
    TempDir dir("gen_cli_stop");
    save_tiny(dir.str(), true);
    const std::vector<std::string> base{"--model",      dir.str(),          "--prompt", "12+7=",    "--greedy",
                                        "--ignore-eos", "--max-new-tokens", "6",        "--output", "json"};
    auto free = run_cli(base);
    ASSERT_EQ(free.code, 0) << free.err;
    const auto f = nlohmann::json::parse(free.out)["samples"][0];
    const std::string text = f["text"];
    ASSERT_EQ(text.size(), 6u);
    const std::string stop = text.substr(2, 1);
    const size_t at = text.find(stop);
    for (bool include : {false, true}) {
        auto args = base;
        args.insert(args.end(), {"--stop", stop});
        if (include) args.push_back("--include-stop-str-in-output");
        auto r = run_cli(args);
        ASSERT_EQ(r.code, 0) << r.err;
        const auto j = nlohmann::json::parse(r.out);
        const auto s = j["samples"][0];
        EXPECT_EQ(s["finish_reason"], "stop");
        EXPECT_EQ(s["text"], text.substr(0, include ? at + 1 : at));
        EXPECT_EQ(ids_of(s["token_ids"]),
                  std::vector<int64_t>(f["token_ids"].begin(), f["token_ids"].begin() + static_cast<int64_t>(at) + 1));
        EXPECT_EQ(j["sampling"]["stop"], nlohmann::json::array({stop}));
    }
}

// --beam-width: every beam, best first by score, each with its cumulative log-prob.
TEST(RolloutCli, BeamSearchShowsEveryBeam) {
    TempDir dir("gen_cli_beam");
    auto m = save_tiny(dir.str(), true);
    auto r = run_cli({"--model", dir.str(), "--prompt", "12+7=", "--beam-width", "3", "--length-penalty", "0.5",
                      "--max-new-tokens", "4", "--ignore-eos", "--output", "json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["samples"].size(), 3u);
    EXPECT_EQ(j["beam_search"]["beam_width"], 3);
    tokenizer::CharTokenizer tok(kCharset);
    SamplingParams p;
    p.max_new_tokens = 4;
    p.pad_id = tokenizer::CharTokenizer::kPadId;
    const auto prompt = tok.encode("12+7=");
    const auto ref = beam_search(*m, {prompt, prompt, prompt}, p, BeamSearchParams{3, 0.5}, {0, 1, 2});
    for (int64_t k = 0; k < 3; ++k) {
        const auto& b = j["samples"][static_cast<size_t>(k)];
        EXPECT_EQ(ids_of(b["token_ids"]),
                  std::vector<int64_t>(ref.responses[k].data_ptr<int64_t>(), ref.responses[k].data_ptr<int64_t>() + 4));
        double sum = 0;
        for (double l : b["log_probs"]) sum += l;
        EXPECT_NEAR(b["cumulative_log_prob"].get<double>(), sum, 1e-9);
        if (k > 0) EXPECT_LE(b["score"].get<double>(), j["samples"][static_cast<size_t>(k - 1)]["score"].get<double>());
    }
    auto t = run_cli({"--model", dir.str(), "--prompt", "12+7=", "--beam-width", "2", "--max-new-tokens", "3"});
    ASSERT_EQ(t.code, 0) << t.err;
    EXPECT_NE(t.out.find("--- beam 1 ("), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("cumulative log-prob"), std::string::npos) << t.out;
}

TEST(RolloutCli, StopAndBeamUsageErrors) {
    TempDir dir("gen_cli_stop_err");
    save_tiny(dir.str(), true);
    TempDir bare("gen_cli_stop_bare");
    save_tiny(bare.str(), false);
    const std::string m = dir.str();
    for (const auto& args :
         std::vector<std::vector<std::string>>{{"--model", m, "--prompt", "1", "--stop", ""},
                                               {"--model", m, "--prompt", "1", "--beam-width", "0"},
                                               {"--model", m, "--prompt", "1", "--beam-width", "2", "--n", "2"},
                                               {"--model", m, "--prompt", "1", "--beam-width", "2", "--stop", "1"},
                                               {"--model", m, "--prompt", "1", "--length-penalty", "2"},
                                               {"--model", bare.str(), "--prompt-ids", "3,4", "--stop", "1"}}) {
        auto r = run_cli(args);
        EXPECT_EQ(r.code, 2) << fmt::format("{}", fmt::join(args, " ")) << "\n" << r.err;
        EXPECT_NE(r.err.find("rlpt generate: "), std::string::npos) << r.err;
    }
}

TEST(RolloutCli, BrokenCheckpointExitsWithOne) {
    TempDir dir("gen_cli_broken");
    save_tiny(dir.str(), true);
    std::filesystem::resize_file(dir.file("model.safetensors"), 20);
    auto r = run_cli({"--model", dir.str(), "--prompt", "1+1="});
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rlpt::rollout
