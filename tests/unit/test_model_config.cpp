#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "rlpt/model/model_config.h"
#include "test_model_helpers.h"

using rlpt::model::load_model_args;
using rlpt::model::model_args_from_json;
using rlpt::model::model_args_to_json;
using rlpt::model::ModelArgs;
using rlpt::model::ModelFamily;
using rlpt::model::ModelHead;
using rlpt::model::RopeScalingType;
using rlpt::model::testing::expect_error;
using json = nlohmann::json;

namespace {

// Shaped like Qwen2.5-0.5B-Instruct's config.json (sizes shrunk).
json qwen_config() {
    return json::parse(R"({
      "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
      "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 64,
      "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 32768,
      "max_window_layers": 21, "num_attention_heads": 8, "num_hidden_layers": 3,
      "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.43.1",
      "use_cache": true, "use_sliding_window": false, "vocab_size": 300, "rope_scaling": null})");
}

// Shaped like Llama-3.2-1B's config.json (sizes shrunk).
json llama_config() {
    return json::parse(R"({
      "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false,
      "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 16,
      "hidden_act": "silu", "hidden_size": 96, "intermediate_size": 192, "max_position_embeddings": 131072,
      "mlp_bias": false, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1,
      "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
      "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"},
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 500})");
}

}  // namespace

TEST(ModelConfig, ParsesQwen2Config) {
    ModelArgs a = model_args_from_json(qwen_config().dump(), "qwen/config.json");
    EXPECT_EQ(a.family, ModelFamily::kQwen2);
    EXPECT_EQ(a.head, ModelHead::kCausalLM);
    EXPECT_EQ(a.vocab_size, 300);
    EXPECT_EQ(a.hidden_size, 64);
    EXPECT_EQ(a.intermediate_size, 160);
    EXPECT_EQ(a.num_hidden_layers, 3);
    EXPECT_EQ(a.num_attention_heads, 8);
    EXPECT_EQ(a.num_key_value_heads, 2);
    EXPECT_EQ(a.head_dim, 8);  // hidden / heads
    EXPECT_EQ(a.max_position_embeddings, 32768);
    EXPECT_DOUBLE_EQ(a.rope_theta, 1e6);
    EXPECT_DOUBLE_EQ(a.rms_norm_eps, 1e-6);
    EXPECT_TRUE(a.tie_word_embeddings);
    EXPECT_TRUE(a.qkv_bias);
    EXPECT_FALSE(a.o_proj_bias);
    EXPECT_FALSE(a.mlp_bias);
    EXPECT_EQ(a.bos_token_id, 151643);
    EXPECT_EQ(a.eos_token_ids, std::vector<int64_t>{151645});
    EXPECT_EQ(a.pad_token_id, -1);
    EXPECT_EQ(a.torch_dtype, "bfloat16");
    EXPECT_EQ(a.rope_scaling.type, RopeScalingType::kNone);
    EXPECT_EQ(a.architecture(), "Qwen2ForCausalLM");
}

TEST(ModelConfig, ParsesLlama3ConfigWithHeadDimEosListAndRopeScaling) {
    ModelArgs a = model_args_from_json(llama_config().dump(), "llama/config.json");
    EXPECT_EQ(a.family, ModelFamily::kLlama);
    EXPECT_EQ(a.head_dim, 16);  // explicit, not 96/4
    EXPECT_EQ(a.num_key_value_heads, 1);
    EXPECT_EQ(a.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
    EXPECT_FALSE(a.qkv_bias);
    EXPECT_EQ(a.rope_scaling.type, RopeScalingType::kLlama3);
    EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 32.0);
    EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, 8192);

    auto j = llama_config();
    j["attention_bias"] = true;
    j["mlp_bias"] = true;
    a = model_args_from_json(j.dump(), "x");
    EXPECT_TRUE(a.qkv_bias);
    EXPECT_TRUE(a.o_proj_bias);  // HF Llama puts a bias on o_proj too
    EXPECT_TRUE(a.mlp_bias);
}

TEST(ModelConfig, DefaultsWhenOptionalKeysAreAbsent) {
    json j = {{"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", 10},
              {"hidden_size", 8},
              {"intermediate_size", 16},
              {"num_hidden_layers", 1},
              {"num_attention_heads", 2}};
    ModelArgs a = model_args_from_json(j.dump(), "x");
    EXPECT_EQ(a.num_key_value_heads, 2);
    EXPECT_EQ(a.head_dim, 4);
    EXPECT_DOUBLE_EQ(a.rope_theta, 10000.0);
    EXPECT_FALSE(a.tie_word_embeddings);
    EXPECT_TRUE(a.eos_token_ids.empty());
    EXPECT_EQ(a.torch_dtype, "float32");
    j["dtype"] = "bfloat16";  // newer transformers write "dtype"
    EXPECT_EQ(model_args_from_json(j.dump(), "x").torch_dtype, "bfloat16");
}

TEST(ModelConfig, UnsupportedAndMalformedConfigsNameTheProblem) {
    auto with = [](json j, const std::string& key, json v) {
        j[key] = v;
        return j.dump();
    };
    auto without = [](json j, const std::string& key) {
        j.erase(key);
        return j.dump();
    };
    const auto q = qwen_config();
    expect_error<rlpt::ConfigError>(
        [&] { model_args_from_json(with(q, "architectures", {"MistralForCausalLM"}), "m/config.json"); },
        {"m/config.json", "architecture 'MistralForCausalLM' is not supported", "Qwen2ForCausalLM"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(without(q, "architectures"), "c"); }, {"architectures"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with(q, "hidden_act", "gelu"), "c"); },
                                    {"hidden_act 'gelu' is not supported"});
    expect_error<rlpt::ConfigError>(
        [&] {
            model_args_from_json(with(q, "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}), "c");
        },
        {"rope_scaling type 'linear' is not supported"});
    expect_error<rlpt::ConfigError>(
        [&] {
            model_args_from_json(with(q, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), "c");
        },
        {"'yarn' is not supported"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with(q, "use_sliding_window", true), "c"); },
                                    {"use_sliding_window"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(without(q, "vocab_size"), "c"); },
                                    {"missing required key \"vocab_size\""});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with(q, "hidden_size", "64"), "c"); },
                                    {"\"hidden_size\" must be an integer"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with(q, "num_key_value_heads", 3), "c"); },
                                    {"not a multiple of num_key_value_heads 3"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with(q, "model_type", "llama"), "c"); },
                                    {"model_type 'llama' does not match"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with(q, "torch_dtype", "float8"), "c"); },
                                    {"torch_dtype 'float8'"});
    auto l = llama_config();
    l["rope_scaling"].erase("low_freq_factor");
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(l.dump(), "c"); }, {"low_freq_factor"});
    expect_error<rlpt::IoError>([&] { model_args_from_json("{oops", "bad/config.json"); },
                                {"bad/config.json", "not valid JSON"});
    expect_error<rlpt::IoError>([&] { load_model_args("/nonexistent/dir"); }, {"/nonexistent/dir"});
    // Classification heads must have one label.
    auto v = q;
    v["architectures"] = {"Qwen2ForTokenClassification"};
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(v.dump(), "c"); }, {"num_labels must be 1", "got 2"});
    v["num_labels"] = 1;
    EXPECT_EQ(model_args_from_json(v.dump(), "c").head, ModelHead::kTokenClassification);
}

TEST(ModelConfig, WriteBackRoundTripsAndKeepsUnknownKeys) {
    rlpt::model::testing::TempDir dir("cfg");
    for (const json& src : {qwen_config(), llama_config()}) {
        ModelArgs a = model_args_from_json(src.dump(), "src");
        rlpt::model::save_model_args(a, dir.str());
        ModelArgs b = load_model_args(dir.str());
        EXPECT_EQ(model_args_to_json(a), model_args_to_json(b));
        EXPECT_EQ(b.architecture(), a.architecture());
        EXPECT_EQ(b.head_dim, a.head_dim);
        EXPECT_EQ(b.eos_token_ids, a.eos_token_ids);
        EXPECT_EQ(b.rope_scaling.type, a.rope_scaling.type);
        EXPECT_DOUBLE_EQ(b.rope_scaling.factor, a.rope_scaling.factor);
        auto written = json::parse(model_args_to_json(b));
        EXPECT_EQ(written["hidden_act"], "silu");
        if (src.contains("transformers_version")) EXPECT_EQ(written["transformers_version"], "4.43.1");
        if (src.contains("max_window_layers")) EXPECT_EQ(written["max_window_layers"], 21);
        EXPECT_EQ(written["eos_token_id"], src["eos_token_id"]);
    }
    // A value head gets HF's label maps; turning it back into a causal LM drops them.
    ModelArgs v = model_args_from_json(qwen_config().dump(), "src");
    v.head = ModelHead::kTokenClassification;
    auto vj = json::parse(model_args_to_json(v));
    EXPECT_EQ(vj["architectures"], json::array({"Qwen2ForTokenClassification"}));
    EXPECT_EQ(vj["num_labels"], 1);
    EXPECT_EQ(vj["id2label"], json({{"0", "LABEL_0"}}));
    v = model_args_from_json(vj.dump(), "v");
    v.head = ModelHead::kCausalLM;
    EXPECT_FALSE(json::parse(model_args_to_json(v)).contains("id2label"));
}

TEST(ModelConfig, TinyModelArgsAreValid) {
    auto q = rlpt::model::tiny_model_args(ModelFamily::kQwen2, 100);
    EXPECT_TRUE(q.tie_word_embeddings);
    EXPECT_TRUE(q.qkv_bias);
    EXPECT_EQ(q.head_dim * q.num_attention_heads, q.hidden_size);
    auto l = rlpt::model::tiny_model_args(ModelFamily::kLlama, 100);
    EXPECT_FALSE(l.tie_word_embeddings);
    EXPECT_FALSE(l.qkv_bias);
    l.num_key_value_heads = 3;
    expect_error<rlpt::ConfigError>([&] { l.validate(); }, {"num_key_value_heads 3"});
    q.o_proj_bias = true;
    expect_error<rlpt::ConfigError>([&] { q.validate(); }, {"Qwen2"});
}

// The config transformers 5 writes for the tiny Qwen3 fixture (scripts/make_hf_fixtures.py):
// rope_theta inside "rope_parameters", layer_types, head_dim 32 != hidden 64 / 4 heads.
TEST(ModelConfig, ParsesQwen3ConfigFromTransformers) {
    const std::string path = rlpt::model::testing::source_dir() + "/tests/fixtures/hf/qwen3_tiny";
    ModelArgs a = load_model_args(path);
    EXPECT_EQ(a.family, ModelFamily::kQwen3);
    EXPECT_EQ(a.architecture(), "Qwen3ForCausalLM");
    EXPECT_EQ(a.model_type(), "qwen3");
    EXPECT_TRUE(a.qk_norm);
    EXPECT_FALSE(a.qkv_bias);
    EXPECT_FALSE(a.o_proj_bias);
    EXPECT_TRUE(a.tie_word_embeddings);
    EXPECT_EQ(a.head_dim, 32);
    EXPECT_EQ(a.hidden_size, 64);
    EXPECT_DOUBLE_EQ(a.rope_theta, 1000000.0);
    EXPECT_EQ(a.rope_scaling.type, RopeScalingType::kNone);
    // Written back: rope_parameters kept (no top-level rope_theta), and read back the same.
    auto written = json::parse(model_args_to_json(a));
    EXPECT_FALSE(written.contains("rope_theta"));
    EXPECT_EQ(written["rope_parameters"]["rope_theta"], 1000000.0);
    EXPECT_EQ(written["attention_bias"], false);
    EXPECT_EQ(model_args_to_json(model_args_from_json(written.dump(), "w")), written.dump(2) + "\n");

    const json q = json::parse(model_args_to_json(a));
    auto with = [&](const std::string& key, json v) {
        json j = q;
        j[key] = v;
        return j.dump();
    };
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with("use_sliding_window", true), "c"); },
                                    {"use_sliding_window"});
    expect_error<rlpt::ConfigError>(
        [&] {
            model_args_from_json(with("layer_types", {"full_attention", "sliding_attention"}), "c");
        },
        {"layer_types", "sliding_attention"});
    expect_error<rlpt::ConfigError>(
        [&] {
            model_args_from_json(with("rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 1e6}}), "c");
        },
        {"rope_parameters type 'yarn' is not supported"});
    expect_error<rlpt::ConfigError>(
        [&] {
            model_args_from_json(with("rope_scaling", {{"rope_type", "llama3"}}), "c");
        },
        {"rope_parameters", "rope_scaling"});
    // attention_bias covers q/k/v and o_proj; the q/k norms belong to Qwen3 only.
    EXPECT_TRUE(model_args_from_json(with("attention_bias", true), "c").o_proj_bias);
    ModelArgs no_norm = a;
    no_norm.qk_norm = false;
    expect_error<rlpt::ConfigError>([&] { no_norm.validate(); }, {"Qwen3", "q/k norms"});
    auto l = rlpt::model::tiny_model_args(ModelFamily::kLlama, 100);
    l.qk_norm = true;
    expect_error<rlpt::ConfigError>([&] { l.validate(); }, {"LlamaForCausalLM", "q/k norms"});
    auto t = rlpt::model::tiny_model_args(ModelFamily::kQwen3, 100);
    EXPECT_TRUE(t.qk_norm && t.tie_word_embeddings && !t.qkv_bias);
}

// The config transformers 5 writes for the tiny Qwen3-MoE fixture: the expert fields read, written
// back and read back the same; the fields rlpt does not implement, and inconsistent ones, refused
// naming the field.
TEST(ModelConfig, ParsesQwen3MoeConfigFromTransformersAndRefusesWhatItDoesNotImplement) {
    const std::string path = rlpt::model::testing::source_dir() + "/tests/fixtures/hf/qwen3_moe_tiny";
    ModelArgs a = load_model_args(path);
    EXPECT_EQ(a.family, ModelFamily::kQwen3Moe);
    EXPECT_EQ(a.architecture(), "Qwen3MoeForCausalLM");
    EXPECT_EQ(a.model_type(), "qwen3_moe");
    EXPECT_TRUE(a.qk_norm);
    EXPECT_EQ(a.num_experts, 8);
    EXPECT_EQ(a.num_experts_per_tok, 2);
    EXPECT_EQ(a.moe_intermediate_size, 32);
    EXPECT_TRUE(a.norm_topk_prob);
    EXPECT_EQ(a.mlp_only_layers, (std::vector<int64_t>{1}));
    EXPECT_TRUE(a.is_moe_layer(0));
    EXPECT_FALSE(a.is_moe_layer(1));
    EXPECT_TRUE(a.is_moe_layer(2));
    EXPECT_EQ(a.num_moe_layers(), 2);
    auto written = json::parse(model_args_to_json(a));
    EXPECT_EQ(written["num_local_experts"], 8);  // the key transformers 5 wrote, kept
    EXPECT_FALSE(written.contains("num_experts"));
    EXPECT_EQ(written["mlp_only_layers"], json::array({1}));
    EXPECT_EQ(model_args_to_json(model_args_from_json(written.dump(), "w")), written.dump(2) + "\n");

    auto with = [&](const std::string& key, json v) {
        json j = written;
        j[key] = v;
        return j.dump();
    };
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with("shared_expert_intermediate_size", 64), "c"); },
                                    {"shared_expert_intermediate_size 64", "not supported"});
    // The Hub's configs say num_experts; both keys must agree.
    EXPECT_EQ(model_args_from_json(with("num_experts", 8), "c").num_experts, 8);
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with("num_experts", 6), "c"); },
                                    {"num_experts 6", "num_local_experts 8"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with("num_experts_per_tok", 9), "c"); },
                                    {"num_experts_per_tok 9", "num_experts 8"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with("mlp_only_layers", {5}), "c"); },
                                    {"mlp_only_layers entry 5"});
    expect_error<rlpt::ConfigError>([&] { model_args_from_json(with("use_sliding_window", true), "c"); },
                                    {"use_sliding_window"});
    // decoder_sparse_step 2: layers 1, 3, ... sparse (transformers' rule), minus mlp_only_layers.
    ModelArgs s = model_args_from_json(with("decoder_sparse_step", 2), "c");
    EXPECT_FALSE(s.is_moe_layer(0));
    EXPECT_FALSE(s.is_moe_layer(1));  // mlp_only
    EXPECT_FALSE(s.is_moe_layer(2));
    // Under tensor parallelism every expert's width is split too.
    expect_error<rlpt::ConfigError>(
        [&] { rlpt::model::tp_layout(model_args_from_json(with("moe_intermediate_size", 30), "c"), 4, 0); },
        {"moe_intermediate_size 30"});
    EXPECT_EQ(rlpt::model::tp_layout(a, 2, 1).moe_inter_first, 16);
    // A dense architecture with experts is refused.
    auto d = rlpt::model::tiny_model_args(ModelFamily::kQwen3, 100);
    d.num_experts = 4;
    expect_error<rlpt::ConfigError>([&] { d.validate(); }, {"num_experts 4"});
}
