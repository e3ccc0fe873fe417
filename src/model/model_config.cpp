#include "rlpt/model/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rlpt/core/error.h"
#include "rlpt/model/safetensors.h"

namespace rlpt::model {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct ArchName {
    const char* name;
    ModelFamily family;
    ModelHead head;
};
constexpr ArchName kArchitectures[] = {
    {"LlamaForCausalLM", ModelFamily::kLlama, ModelHead::kCausalLM},
    {"Qwen2ForCausalLM", ModelFamily::kQwen2, ModelHead::kCausalLM},
    {"Qwen3ForCausalLM", ModelFamily::kQwen3, ModelHead::kCausalLM},
    {"Qwen3MoeForCausalLM", ModelFamily::kQwen3Moe, ModelHead::kCausalLM},
    {"LlamaForTokenClassification", ModelFamily::kLlama, ModelHead::kTokenClassification},
    {"Qwen2ForTokenClassification", ModelFamily::kQwen2, ModelHead::kTokenClassification},
    {"Qwen3ForTokenClassification", ModelFamily::kQwen3, ModelHead::kTokenClassification},
    {"Qwen3MoeForTokenClassification", ModelFamily::kQwen3Moe, ModelHead::kTokenClassification},
    {"LlamaForSequenceClassification", ModelFamily::kLlama, ModelHead::kSequenceClassification},
    {"Qwen2ForSequenceClassification", ModelFamily::kQwen2, ModelHead::kSequenceClassification},
    {"Qwen3ForSequenceClassification", ModelFamily::kQwen3, ModelHead::kSequenceClassification},
    {"Qwen3MoeForSequenceClassification", ModelFamily::kQwen3Moe, ModelHead::kSequenceClassification},
};

// Typed field access with errors that name the key and the file.
class Fields {
  public:
    Fields(const json& j, const std::string& source) : j_(j), source_(source) {}

    bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

    int64_t integer(const char* key) const {
        RLPT_CHECK_KIND(ConfigError, has(key), "{}: missing required key \"{}\"", source_, key);
        return integer_value(key);
    }
    int64_t integer(const char* key, int64_t dflt) const { return has(key) ? integer_value(key) : dflt; }
    double number(const char* key, double dflt) const {
        if (!has(key)) return dflt;
        RLPT_CHECK_KIND(ConfigError, j_[key].is_number(), "{}: \"{}\" must be a number, got {}", source_, key,
                        j_[key].dump());
        return j_[key].get<double>();
    }
    bool boolean(const char* key, bool dflt) const {
        if (!has(key)) return dflt;
        RLPT_CHECK_KIND(ConfigError, j_[key].is_boolean(), "{}: \"{}\" must be true or false, got {}", source_, key,
                        j_[key].dump());
        return j_[key].get<bool>();
    }
    std::string string(const char* key, const std::string& dflt) const {
        if (!has(key)) return dflt;
        RLPT_CHECK_KIND(ConfigError, j_[key].is_string(), "{}: \"{}\" must be a string, got {}", source_, key,
                        j_[key].dump());
        return j_[key].get<std::string>();
    }

  private:
    int64_t integer_value(const char* key) const {
        RLPT_CHECK_KIND(ConfigError, j_[key].is_number_integer(), "{}: \"{}\" must be an integer, got {}", source_, key,
                        j_[key].dump());
        return j_[key].get<int64_t>();
    }
    const json& j_;
    const std::string& source_;
};

// `key` of j: "rope_scaling", or transformers 5's "rope_parameters" (which also holds rope_theta;
// its rope_type "default" is no scaling).
RopeScaling parse_rope_scaling(const json& j, const std::string& source, const char* key) {
    RopeScaling rs;
    if (!j.contains(key) || j[key].is_null()) return rs;
    const json& r = j[key];
    RLPT_CHECK_KIND(ConfigError, r.is_object(), "{}: \"{}\" must be null or an object", source, key);
    const std::string where = fmt::format("{} {}", source, key);
    Fields f(r, where);
    std::string type = f.string("rope_type", f.string("type", ""));
    if (type == "default") return rs;
    if (type != "llama3")
        RLPT_THROW(ConfigError, "{}: {} type '{}' is not supported (rlpt supports null, 'default' and 'llama3')",
                   source, key, type);
    rs.type = RopeScalingType::kLlama3;
    rs.factor = f.number("factor", 0.0);
    rs.low_freq_factor = f.number("low_freq_factor", 0.0);
    rs.high_freq_factor = f.number("high_freq_factor", 0.0);
    rs.original_max_position_embeddings = f.integer("original_max_position_embeddings");
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor"})
        RLPT_CHECK_KIND(ConfigError, f.has(k), "{}: llama3 {} needs \"{}\"", source, key, k);
    return rs;
}

}  // namespace

std::string ModelArgs::model_type() const {
    switch (family) {
        case ModelFamily::kLlama: return "llama";
        case ModelFamily::kQwen2: return "qwen2";
        case ModelFamily::kQwen3: return "qwen3";
        case ModelFamily::kQwen3Moe: return "qwen3_moe";
    }
    throw InternalError("ModelArgs: unknown model family", __FILE__, __LINE__);
}

std::string ModelArgs::architecture() const {
    for (const auto& a : kArchitectures)
        if (a.family == family && a.head == head) return a.name;
    throw InternalError("ModelArgs: no architecture name for this family/head", __FILE__, __LINE__);
}

bool ModelArgs::is_moe_layer(int64_t layer) const {
    return num_experts > 0 && (layer + 1) % decoder_sparse_step == 0 &&
           std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

int64_t ModelArgs::num_moe_layers() const {
    int64_t n = 0;
    for (int64_t i = 0; i < num_hidden_layers; ++i) n += is_moe_layer(i) ? 1 : 0;
    return n;
}

void ModelArgs::validate() const {
    const std::string m = architecture();
    auto positive = [&](int64_t v, const char* name) {
        RLPT_CHECK_KIND(ConfigError, v > 0, "{} config: {} must be positive, got {}", m, name, v);
    };
    positive(vocab_size, "vocab_size");
    positive(hidden_size, "hidden_size");
    positive(intermediate_size, "intermediate_size");
    positive(num_hidden_layers, "num_hidden_layers");
    positive(num_attention_heads, "num_attention_heads");
    positive(num_key_value_heads, "num_key_value_heads");
    positive(head_dim, "head_dim");
    positive(max_position_embeddings, "max_position_embeddings");
    RLPT_CHECK_KIND(ConfigError, num_attention_heads % num_key_value_heads == 0,
                    "{} config: num_attention_heads {} is not a multiple of num_key_value_heads {}", m,
                    num_attention_heads, num_key_value_heads);
    RLPT_CHECK_KIND(ConfigError, head_dim % 2 == 0, "{} config: head_dim {} must be even for rotary embeddings", m,
                    head_dim);
    RLPT_CHECK_KIND(ConfigError, rope_theta > 0, "{} config: rope_theta must be positive, got {}", m, rope_theta);
    RLPT_CHECK_KIND(ConfigError, rms_norm_eps > 0, "{} config: rms_norm_eps must be positive, got {}", m, rms_norm_eps);
    if (family == ModelFamily::kQwen2) {
        RLPT_CHECK_KIND(ConfigError, qkv_bias && !o_proj_bias && !mlp_bias,
                        "Qwen2 models have q/k/v biases and no o_proj/MLP biases");
        RLPT_CHECK_KIND(ConfigError, head_dim * num_attention_heads == hidden_size,
                        "Qwen2 config: head_dim {} x num_attention_heads {} must equal hidden_size {}", head_dim,
                        num_attention_heads, hidden_size);
    } else {
        RLPT_CHECK_KIND(ConfigError, qkv_bias == o_proj_bias,
                        "{} config: attention_bias covers q/k/v and o_proj alike (got qkv_bias={}, o_proj_bias={})", m,
                        qkv_bias, o_proj_bias);
    }
    // Qwen3 (and Qwen3-MoE) has the q/k norms and no MLP biases; Llama and Qwen2 have no q/k
    // norms (what rlpt exports must load in transformers).
    if (family == ModelFamily::kQwen3 || family == ModelFamily::kQwen3Moe) {
        RLPT_CHECK_KIND(ConfigError, qk_norm && !mlp_bias, "{} models have q/k norms and no MLP biases", m);
    } else {
        RLPT_CHECK_KIND(ConfigError, !qk_norm, "{} config: q/k norms are a Qwen3 layer", m);
    }
    if (family == ModelFamily::kQwen3Moe) {
        positive(num_experts, "num_experts");
        positive(moe_intermediate_size, "moe_intermediate_size");
        positive(decoder_sparse_step, "decoder_sparse_step");
        RLPT_CHECK_KIND(ConfigError, num_experts_per_tok >= 1 && num_experts_per_tok <= num_experts,
                        "{} config: num_experts_per_tok {} must be in [1, num_experts {}]", m, num_experts_per_tok,
                        num_experts);
        for (int64_t l : mlp_only_layers)
            RLPT_CHECK_KIND(ConfigError, l >= 0 && l < num_hidden_layers,
                            "{} config: mlp_only_layers entry {} is not a layer (num_hidden_layers {})", m, l,
                            num_hidden_layers);
    } else {
        RLPT_CHECK_KIND(ConfigError, num_experts == 0, "{} config: num_experts {} on a dense architecture", m,
                        num_experts);
    }
    if (rope_scaling.type == RopeScalingType::kLlama3) {
        RLPT_CHECK_KIND(ConfigError,
                        rope_scaling.factor > 0 && rope_scaling.low_freq_factor > 0 &&
                            rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
                            rope_scaling.original_max_position_embeddings > 0,
                        "{} config: llama3 rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor "
                        "and original_max_position_embeddings > 0",
                        m);
    }
    if (head != ModelHead::kCausalLM)
        RLPT_CHECK_KIND(ConfigError, num_labels == 1, "{} config: num_labels must be 1 for a value/reward head, got {}",
                        m, num_labels);
    RLPT_CHECK_KIND(ConfigError, torch_dtype == "float32" || torch_dtype == "bfloat16" || torch_dtype == "float16",
                    "{} config: torch_dtype '{}' is not one of float32, bfloat16, float16", m, torch_dtype);
}

ModelArgs model_args_from_json(const std::string& json_text, const std::string& source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception& e) {
        RLPT_THROW(IoError, "{}: not valid JSON: {}", source, e.what());
    }
    RLPT_CHECK_KIND(ConfigError, j.is_object(), "{}: config must be a JSON object", source);
    Fields f(j, source);
    ModelArgs a;
    a.source_json = j.dump();

    RLPT_CHECK_KIND(ConfigError,
                    f.has("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1 &&
                        j["architectures"][0].is_string(),
                    "{}: \"architectures\" must be a list with one name, got {}", source,
                    j.contains("architectures") ? j["architectures"].dump() : std::string("nothing"));
    const std::string arch = j["architectures"][0].get<std::string>();
    bool known = false;
    for (const auto& k : kArchitectures) {
        if (arch == k.name) {
            a.family = k.family;
            a.head = k.head;
            known = true;
        }
    }
    if (!known) {
        std::string names;
        for (const auto& k : kArchitectures) names += fmt::format("{}{}", names.empty() ? "" : ", ", k.name);
        RLPT_THROW(ConfigError, "{}: architecture '{}' is not supported (supported: {})", source, arch, names);
    }
    const std::string model_type = f.string("model_type", a.model_type());
    RLPT_CHECK_KIND(ConfigError, model_type == a.model_type(), "{}: model_type '{}' does not match architecture '{}'",
                    source, model_type, arch);

    const std::string act = f.string("hidden_act", "silu");
    RLPT_CHECK_KIND(ConfigError, act == "silu", "{}: hidden_act '{}' is not supported (only 'silu')", source, act);
    if (a.family != ModelFamily::kLlama) {
        RLPT_CHECK_KIND(ConfigError, !f.boolean("use_sliding_window", false),
                        "{}: use_sliding_window=true is not supported", source);
        if (f.has("layer_types")) {
            RLPT_CHECK_KIND(ConfigError, j["layer_types"].is_array(), "{}: \"layer_types\" must be a list, got {}",
                            source, j["layer_types"].dump());
            for (const auto& t : j["layer_types"])
                RLPT_CHECK_KIND(ConfigError, t == "full_attention",
                                "{}: layer_types entry {} is not supported (rlpt has full attention only)", source,
                                t.dump());
        }
    }

    a.vocab_size = f.integer("vocab_size");
    a.hidden_size = f.integer("hidden_size");
    a.intermediate_size = f.integer("intermediate_size");
    a.num_hidden_layers = f.integer("num_hidden_layers");
    a.num_attention_heads = f.integer("num_attention_heads");
    RLPT_CHECK_KIND(ConfigError, a.num_attention_heads > 0, "{}: num_attention_heads must be positive", source);
    a.num_key_value_heads = f.integer("num_key_value_heads", a.num_attention_heads);
    if (f.has("head_dim")) {
        a.head_dim = f.integer("head_dim");
    } else {
        RLPT_CHECK_KIND(ConfigError, a.hidden_size % a.num_attention_heads == 0,
                        "{}: hidden_size {} is not a multiple of num_attention_heads {}", source, a.hidden_size,
                        a.num_attention_heads);
        a.head_dim = a.hidden_size / a.num_attention_heads;
    }
    a.max_position_embeddings = f.integer(  // transformers' defaults
        "max_position_embeddings", a.family == ModelFamily::kLlama   ? 2048
                                   : a.family == ModelFamily::kQwen2 ? 32768
                                                                     : 40960);
    a.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
    if (f.has("rope_parameters")) {
        RLPT_CHECK_KIND(ConfigError, !f.has("rope_scaling"),
                        "{}: both \"rope_parameters\" and \"rope_scaling\" are set; rlpt reads one", source);
        a.rope_scaling = parse_rope_scaling(j, source, "rope_parameters");
        a.rope_theta = Fields(j["rope_parameters"], source + " rope_parameters").number("rope_theta", 10000.0);
    } else {
        a.rope_theta = f.number("rope_theta", 10000.0);
        a.rope_scaling = parse_rope_scaling(j, source, "rope_scaling");
    }
    a.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    if (a.family == ModelFamily::kQwen2) {
        a.qkv_bias = true;
    } else if (a.family == ModelFamily::kQwen3 || a.family == ModelFamily::kQwen3Moe) {
        a.qkv_bias = a.o_proj_bias = f.boolean("attention_bias", false);
        a.qk_norm = true;
    } else {
        a.qkv_bias = a.o_proj_bias = f.boolean("attention_bias", false);
        a.mlp_bias = f.boolean("mlp_bias", false);
    }
    if (a.family == ModelFamily::kQwen3Moe) {
        // transformers' Qwen3MoeConfig defaults for the keys a config may leave out.
        // "num_experts" (the Hub's Qwen3-MoE configs) or transformers 5's "num_local_experts".
        RLPT_CHECK_KIND(ConfigError,
                        !f.has("num_experts") || !f.has("num_local_experts") ||
                            f.integer("num_experts") == f.integer("num_local_experts"),
                        "{}: num_experts {} and num_local_experts {} differ", source, f.integer("num_experts", 0),
                        f.integer("num_local_experts", 0));
        a.num_experts = f.integer("num_experts", f.integer("num_local_experts", 128));
        a.num_experts_per_tok = f.integer("num_experts_per_tok", 8);
        a.moe_intermediate_size = f.integer("moe_intermediate_size", 768);
        a.decoder_sparse_step = f.integer("decoder_sparse_step", 1);
        a.norm_topk_prob = f.boolean("norm_topk_prob", false);
        if (f.has("mlp_only_layers")) {
            const json& l = j["mlp_only_layers"];
            RLPT_CHECK_KIND(ConfigError, l.is_array(), "{}: \"mlp_only_layers\" must be a list, got {}", source,
                            l.dump());
            for (const auto& v : l) {
                RLPT_CHECK_KIND(ConfigError, v.is_number_integer(),
                                "{}: mlp_only_layers entries must be integers, got {}", source, l.dump());
                a.mlp_only_layers.push_back(v.get<int64_t>());
            }
        }
        // Qwen2-MoE's always-on shared expert: not a Qwen3-MoE layer, and not implemented.
        RLPT_CHECK_KIND(ConfigError, f.integer("shared_expert_intermediate_size", 0) == 0,
                        "{}: shared_expert_intermediate_size {} (shared experts) is not supported", source,
                        f.integer("shared_expert_intermediate_size", 0));
    }
    a.bos_token_id = f.integer("bos_token_id", -1);
    a.pad_token_id = f.integer("pad_token_id", -1);
    if (f.has("eos_token_id")) {
        const json& e = j["eos_token_id"];
        if (e.is_array()) {
            for (const auto& v : e) {
                RLPT_CHECK_KIND(ConfigError, v.is_number_integer(), "{}: eos_token_id entries must be integers, got {}",
                                source, e.dump());
                a.eos_token_ids.push_back(v.get<int64_t>());
            }
        } else {
            a.eos_token_ids.push_back(f.integer("eos_token_id"));
        }
    }
    a.torch_dtype = f.string("torch_dtype", f.string("dtype", "float32"));
    a.initializer_range = f.number("initializer_range", 0.02);
    if (a.head != ModelHead::kCausalLM) {
        if (f.has("num_labels")) {
            a.num_labels = f.integer("num_labels");
        } else if (f.has("id2label") && j["id2label"].is_object()) {
            a.num_labels = static_cast<int64_t>(j["id2label"].size());
        } else {
            a.num_labels = 2;  // Hugging Face's default
        }
    }
    try {
        a.validate();
    } catch (const Error& e) {
        rethrow_with_context(source, e);
    }
    return a;
}

ModelArgs load_model_args(const std::string& path) {
    std::string file = fs::is_directory(path) ? (fs::path(path) / "config.json").string() : path;
    std::ifstream in(file, std::ios::binary);
    RLPT_CHECK_KIND(IoError, in.good(), "cannot open model config '{}'", file);
    std::stringstream ss;
    ss << in.rdbuf();
    return model_args_from_json(ss.str(), file);
}

std::string model_args_to_json(const ModelArgs& a) {
    a.validate();
    json j = a.source_json.empty() ? json::object() : json::parse(a.source_json);
    j["architectures"] = json::array({a.architecture()});
    j["model_type"] = a.model_type();
    j["vocab_size"] = a.vocab_size;
    j["hidden_size"] = a.hidden_size;
    j["intermediate_size"] = a.intermediate_size;
    j["num_hidden_layers"] = a.num_hidden_layers;
    j["num_attention_heads"] = a.num_attention_heads;
    j["num_key_value_heads"] = a.num_key_value_heads;
    j["head_dim"] = a.head_dim;
    j["max_position_embeddings"] = a.max_position_embeddings;
    j["rms_norm_eps"] = a.rms_norm_eps;
    j["hidden_act"] = "silu";
    j["tie_word_embeddings"] = a.tie_word_embeddings;
    if (a.family == ModelFamily::kLlama) {
        j["attention_bias"] = a.qkv_bias;
        j["mlp_bias"] = a.mlp_bias;
    } else {
        j["use_sliding_window"] = false;
        if (a.family != ModelFamily::kQwen2) j["attention_bias"] = a.qkv_bias;
    }
    if (a.family == ModelFamily::kQwen3Moe) {
        j[j.contains("num_local_experts") && !j.contains("num_experts") ? "num_local_experts" : "num_experts"] =
            a.num_experts;
        j["num_experts_per_tok"] = a.num_experts_per_tok;
        j["moe_intermediate_size"] = a.moe_intermediate_size;
        j["decoder_sparse_step"] = a.decoder_sparse_step;
        j["mlp_only_layers"] = a.mlp_only_layers;
        j["norm_topk_prob"] = a.norm_topk_prob;
    }
    json rope = nullptr;
    if (a.rope_scaling.type == RopeScalingType::kLlama3) {
        rope = {{"rope_type", "llama3"},
                {"factor", a.rope_scaling.factor},
                {"low_freq_factor", a.rope_scaling.low_freq_factor},
                {"high_freq_factor", a.rope_scaling.high_freq_factor},
                {"original_max_position_embeddings", a.rope_scaling.original_max_position_embeddings}};
    }
    if (j.contains("rope_parameters")) {  // transformers 5's layout, kept as read
        if (rope.is_null()) rope = {{"rope_type", "default"}};
        rope["rope_theta"] = a.rope_theta;
        j["rope_parameters"] = rope;
    } else {
        j["rope_theta"] = a.rope_theta;
        j["rope_scaling"] = rope;
    }
    j["bos_token_id"] = a.bos_token_id >= 0 ? json(a.bos_token_id) : json(nullptr);
    j["pad_token_id"] = a.pad_token_id >= 0 ? json(a.pad_token_id) : json(nullptr);
    if (a.eos_token_ids.empty()) {
        j["eos_token_id"] = nullptr;
    } else if (a.eos_token_ids.size() == 1) {
        j["eos_token_id"] = a.eos_token_ids[0];
    } else {
        j["eos_token_id"] = a.eos_token_ids;
    }
    j.erase("dtype");
    j["torch_dtype"] = a.torch_dtype;
    j["initializer_range"] = a.initializer_range;
    if (a.head == ModelHead::kCausalLM) {
        j.erase("id2label");
        j.erase("label2id");
        j.erase("num_labels");
    } else {
        json id2label = json::object(), label2id = json::object();
        for (int64_t i = 0; i < a.num_labels; ++i) {
            id2label[std::to_string(i)] = fmt::format("LABEL_{}", i);
            label2id[fmt::format("LABEL_{}", i)] = i;
        }
        j["id2label"] = id2label;
        j["label2id"] = label2id;
        j["num_labels"] = a.num_labels;
    }
    return j.dump(2) + "\n";
}

void save_model_args(const ModelArgs& args, const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    RLPT_CHECK_KIND(IoError, !ec && fs::is_directory(dir), "cannot create directory '{}': {}", dir, ec.message());
    write_file_atomic((fs::path(dir) / "config.json").string(), model_args_to_json(args));
}

ModelArgs tiny_model_args(ModelFamily family, int64_t vocab_size) {
    ModelArgs a;
    a.family = family;
    a.vocab_size = vocab_size;
    a.hidden_size = 64;
    a.intermediate_size = 128;
    a.num_hidden_layers = 2;
    a.num_attention_heads = 4;
    a.num_key_value_heads = 2;
    a.head_dim = 16;
    a.max_position_embeddings = 512;
    a.rope_theta = 10000.0;
    a.rms_norm_eps = 1e-6;
    a.tie_word_embeddings = family != ModelFamily::kLlama;
    a.qkv_bias = family == ModelFamily::kQwen2;
    a.qk_norm = family == ModelFamily::kQwen3 || family == ModelFamily::kQwen3Moe;
    if (family == ModelFamily::kQwen3Moe) {
        a.num_experts = 4;
        a.num_experts_per_tok = 2;
        a.moe_intermediate_size = 32;
        a.norm_topk_prob = true;
    }
    a.validate();
    return a;
}

ModelArgs builtin_model_args(const BuiltinModelConfig& b, int64_t vocab_size) {
    ModelArgs a = tiny_model_args(ModelFamily::kLlama, vocab_size);
    a.hidden_size = b.hidden_size;
    a.num_hidden_layers = b.num_layers;
    a.num_attention_heads = b.num_heads;
    a.num_key_value_heads = b.num_kv_heads;
    a.head_dim = b.hidden_size / b.num_heads;
    a.intermediate_size = b.intermediate_size;
    a.max_position_embeddings = b.max_position;
    a.rope_theta = b.rope_theta;
    a.tie_word_embeddings = b.tie_embeddings;
    a.validate();
    return a;
}

}  // namespace rlpt::model

namespace rlpt::model {

int64_t TpLayout::vocab_real() const { return std::max<int64_t>(0, std::min(vocab, vocab_size - vocab_first)); }

TpLayout tp_layout(const ModelArgs& args, int64_t tp, int64_t rank) {
    RLPT_CHECK_KIND(ConfigError, tp >= 1 && rank >= 0 && rank < tp, "tensor parallelism: rank {} of a block of {}",
                    rank, tp);
    const int64_t nh = args.num_attention_heads, nkv = args.num_key_value_heads, inter = args.intermediate_size;
    RLPT_CHECK_KIND(ConfigError, nh % tp == 0,
                    "tensor parallelism: model_parallel_size {} does not divide num_attention_heads {}", tp, nh);
    RLPT_CHECK_KIND(ConfigError, nkv % tp == 0 || tp % nkv == 0,
                    "tensor parallelism: num_key_value_heads {} is neither a multiple nor a divisor of "
                    "model_parallel_size {} (KV heads are split when tp divides them, replicated when they divide tp)",
                    nkv, tp);
    RLPT_CHECK_KIND(ConfigError, inter % tp == 0,
                    "tensor parallelism: model_parallel_size {} does not divide intermediate_size {}", tp, inter);
    const int64_t moe_inter = args.num_experts > 0 ? args.moe_intermediate_size : 0;
    RLPT_CHECK_KIND(ConfigError, moe_inter % tp == 0,
                    "tensor parallelism: model_parallel_size {} does not divide moe_intermediate_size {}", tp,
                    moe_inter);
    TpLayout l;
    l.tp = tp;
    l.rank = rank;
    l.heads = nh / tp;
    l.head_first = rank * l.heads;
    l.kv_replicated = nkv < tp;
    l.kv_heads = l.kv_replicated ? 1 : nkv / tp;
    l.kv_first = l.kv_replicated ? rank * nkv / tp : rank * l.kv_heads;
    l.inter = inter / tp;
    l.inter_first = rank * l.inter;
    l.moe_inter = moe_inter / tp;
    l.moe_inter_first = rank * l.moe_inter;
    l.vocab_size = args.vocab_size;
    l.vocab_padded = (args.vocab_size + tp - 1) / tp * tp;
    l.vocab = l.vocab_padded / tp;
    l.vocab_first = rank * l.vocab;
    l.head_dim = args.head_dim;
    l.num_kv_heads = nkv;
    RLPT_CHECK_KIND(ConfigError, args.vocab_size > (tp - 1) * l.vocab,
                    "tensor parallelism: vocab_size {} padded to {} leaves the last of {} ranks padding only",
                    args.vocab_size, l.vocab_padded, tp);
    return l;
}

}  // namespace rlpt::model
