// `rlpt init-model --arch`: llama stays the default (the same files as naming it), qwen3 writes a
// Qwen3ForCausalLM folder that rlpt loads with its q/k norms, explicit head_dim and tied
// embeddings, qwen3_moe a Qwen3MoeForCausalLM with its experts, and an unknown name (or an expert
// option for another architecture) is refused before anything is written.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "init_model.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/transformer.h"
#include "test_model_helpers.h"

namespace {

using rlpt::model::testing::TempDir;

int init_model(std::vector<std::string> args) {
    args.insert(args.begin(), "init-model");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return rlpt::app::init_model_command(static_cast<int>(argv.size()), argv.data());
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A data file whose characters form the vocabulary, and the small sizes every case uses.
std::vector<std::string> small(const TempDir& dir) {
    std::ofstream(dir.file("d.jsonl")) << "{\"prompt\": \"12+30=\", \"answer\": \"42\"}\n";
    return {"--chars-from",
            dir.file("d.jsonl"),
            "--hidden-size",
            "32",
            "--layers",
            "2",
            "--heads",
            "2",
            "--kv-heads",
            "1",
            "--intermediate-size",
            "64"};
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

}  // namespace

TEST(InitModel, LlamaIsTheDefaultArchitecture) {
    TempDir dir("init_llama");
    ASSERT_EQ(init_model(with(small(dir), {"--out", dir.file("a")})), 0);
    ASSERT_EQ(init_model(with(small(dir), {"--out", dir.file("b"), "--arch", "llama"})), 0);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
        EXPECT_EQ(read_bytes(dir.file(std::string("a/") + f)), read_bytes(dir.file(std::string("b/") + f))) << f;
    const auto a = rlpt::model::load_model_args(dir.file("a"));
    EXPECT_EQ(a.architecture(), "LlamaForCausalLM");
    EXPECT_EQ(a.head_dim, 16);
    EXPECT_DOUBLE_EQ(a.rope_theta, 10000.0);
    EXPECT_FALSE(a.qk_norm);
}

TEST(InitModel, Qwen3FolderLoadsWithItsNormsAndHeadDim) {
    TempDir dir("init_qwen3");
    ASSERT_EQ(init_model(with(small(dir), {"--out", dir.file("q"), "--arch", "qwen3", "--head-dim", "24"})), 0);
    const auto a = rlpt::model::load_model_args(dir.file("q"));
    EXPECT_EQ(a.architecture(), "Qwen3ForCausalLM");
    EXPECT_EQ(a.model_type(), "qwen3");
    EXPECT_TRUE(a.qk_norm);
    EXPECT_FALSE(a.qkv_bias);
    EXPECT_TRUE(a.tie_word_embeddings);
    EXPECT_EQ(a.head_dim, 24);  // not hidden / heads = 16
    EXPECT_DOUBLE_EQ(a.rope_theta, 1e6);
    auto m = rlpt::model::load_pretrained(dir.file("q"), torch::kFloat32);
    bool q_norm = false;
    for (const auto& p : m->named_parameters()) {
        if (p.key().find("q_norm") != std::string::npos) {
            q_norm = true;
            EXPECT_EQ(p.value().size(0), 24) << p.key();
        }
        if (p.key().find("q_proj.weight") != std::string::npos) EXPECT_EQ(p.value().size(0), 2 * 24) << p.key();
    }
    EXPECT_TRUE(q_norm);
    // --rope-theta overrides the architecture's default.
    ASSERT_EQ(init_model(with(small(dir), {"--out", dir.file("r"), "--arch", "qwen3", "--rope-theta", "5e5"})), 0);
    EXPECT_DOUBLE_EQ(rlpt::model::load_model_args(dir.file("r")).rope_theta, 5e5);
}

TEST(InitModel, Qwen3MoeWritesAMixtureOfExpertsThatLoads) {
    TempDir dir("init_moe");
    ASSERT_EQ(init_model(with(small(dir), {"--out", dir.file("moe"), "--arch", "qwen3_moe", "--experts", "4",
                                           "--experts-per-tok", "2", "--moe-intermediate-size", "16"})),
              0);
    auto m = rlpt::model::load_pretrained(dir.file("moe"), torch::kFloat32);
    const auto& a = m->args();
    EXPECT_EQ(a.architecture(), "Qwen3MoeForCausalLM");
    EXPECT_EQ(a.num_experts, 4);
    EXPECT_EQ(a.num_experts_per_tok, 2);
    EXPECT_EQ(a.moe_intermediate_size, 16);
    EXPECT_TRUE(a.norm_topk_prob && a.qk_norm);
    EXPECT_EQ(a.num_moe_layers(), a.num_hidden_layers);
    int64_t experts = 0;
    for (const auto& p : m->named_parameters())
        if (p.key().find(".mlp.experts.") != std::string::npos && p.key().find("down_proj") != std::string::npos) {
            ++experts;
            EXPECT_EQ(p.value().size(1), 16) << p.key();
        }
    EXPECT_EQ(experts, 4 * a.num_hidden_layers);
}

TEST(InitModel, UnknownArchitecturesAndMisplacedExpertOptionsAreRefusedBeforeWriting) {
    TempDir dir("init_refused");
    testing::internal::CaptureStderr();
    EXPECT_EQ(init_model(with(small(dir), {"--out", dir.file("moe"), "--arch", "qwen3", "--experts", "4"})), 2);
    const std::string moe = testing::internal::GetCapturedStderr();
    EXPECT_NE(moe.find("--experts applies to --arch qwen3_moe only"), std::string::npos) << moe;
    EXPECT_FALSE(std::filesystem::exists(dir.file("moe")));
    testing::internal::CaptureStderr();
    EXPECT_EQ(init_model(with(small(dir), {"--out", dir.file("x"), "--arch", "gpt2"})), 2);
    const std::string unknown = testing::internal::GetCapturedStderr();
    EXPECT_NE(unknown.find("unknown architecture 'gpt2' (choices: llama, qwen3, qwen3_moe)"), std::string::npos)
        << unknown;
}
