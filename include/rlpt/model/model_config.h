#pragma once
// Model hyper-parameters read from / written to a Hugging Face config.json (Llama, Qwen2, Qwen3
// dense and Qwen3-MoE families). Torch-free.
//
// Supported: architectures LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM /
// Qwen3MoeForCausalLM (policies) and {Llama,Qwen2,Qwen3,Qwen3Moe}For{Token,Sequence}Classification
// with num_labels 1 (critics / reward models),
// hidden_act "silu", rope_scaling null or {"rope_type": "llama3", ...} (Llama 3.1+ style), the
// rotary settings either top-level (rope_theta, rope_scaling) or in transformers 5's
// "rope_parameters" object. Anything else is a ConfigError naming the file and the key: other
// architectures, activations, rope scaling types, Qwen2/Qwen3 sliding-window attention
// (use_sliding_window true, a "sliding_attention" entry in layer_types), shared experts
// (shared_expert_intermediate_size > 0, Qwen2-MoE's). An unreadable file or invalid JSON is an
// IoError.

#include <cstdint>
#include <string>
#include <vector>

namespace rlpt {

// The built-in tiny model's architecture (the config's model.builtin section, which includes this
// header; the roles receive it in their settings). A Llama-family model: builtin_model_args.
struct BuiltinModelConfig {
    int64_t hidden_size = 128;
    int64_t num_layers = 2;
    int64_t num_heads = 4;
    int64_t num_kv_heads = 2;
    int64_t intermediate_size = 384;
    int64_t max_position = 128;
    double rope_theta = 10000.0;
    bool tie_embeddings = true;
    int64_t init_seed = 1234;
    // Every field, for the roles' settings on the wire (rlpt/protocol/args.h).
    template <typename V>
    void visit(V& v) {
        v("hidden_size", hidden_size);
        v("num_layers", num_layers);
        v("num_heads", num_heads);
        v("num_kv_heads", num_kv_heads);
        v("intermediate_size", intermediate_size);
        v("max_position", max_position);
        v("rope_theta", rope_theta);
        v("tie_embeddings", tie_embeddings);
        v("init_seed", init_seed);
    }
};

}  // namespace rlpt

namespace rlpt::model {

enum class ModelFamily { kLlama, kQwen2, kQwen3, kQwen3Moe };

// Which head sits on the backbone. HF's *ForTokenClassification has `score.weight` [L,H] and
// `score.bias` [L]; *ForSequenceClassification has `score.weight` only (same per-token math).
enum class ModelHead { kCausalLM, kTokenClassification, kSequenceClassification };

enum class RopeScalingType { kNone, kLlama3 };

struct RopeScaling {
    RopeScalingType type = RopeScalingType::kNone;
    // llama3 parameters (HF names), used only when type == kLlama3.
    double factor = 8.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int64_t original_max_position_embeddings = 8192;
};

struct ModelArgs {
    ModelFamily family = ModelFamily::kQwen2;
    ModelHead head = ModelHead::kCausalLM;
    int64_t num_labels = 1;  // classification heads only; rlpt supports 1

    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;  // divides num_attention_heads
    int64_t head_dim = 0;             // even; config "head_dim" or hidden/heads
    int64_t max_position_embeddings = 2048;
    double rope_theta = 10000.0;
    double rms_norm_eps = 1e-6;
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    bool qkv_bias = false;     // q/k/v_proj.bias: always for Qwen2, `attention_bias` for Llama
    bool o_proj_bias = false;  // o_proj.bias: `attention_bias` for Llama, never for Qwen2
    bool mlp_bias = false;     // gate/up/down_proj.bias: `mlp_bias` (Llama)
    // An RMSNorm over head_dim on every query and key head after the projections, before RoPE
    // (self_attn.q_norm.weight, k_norm.weight [head_dim], shared by the heads): Qwen3, always.
    bool qk_norm = false;
    // Mixture of experts (Qwen3-MoE; num_experts 0 = every layer dense). A sparse layer replaces
    // the MLP by a router (mlp.gate.weight [E, H]: softmax over the E experts in fp32, the top
    // num_experts_per_tok kept, renormalised to sum 1 when norm_topk_prob) and E SwiGLU experts of
    // width moe_intermediate_size (mlp.experts.{e}.{gate,up,down}_proj.weight); layer i is sparse
    // when (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers (transformers' rule).
    int64_t num_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;
    int64_t decoder_sparse_step = 1;
    std::vector<int64_t> mlp_only_layers;
    bool norm_topk_prob = false;
    int64_t bos_token_id = -1;            // -1: absent
    int64_t pad_token_id = -1;            // -1: absent
    std::vector<int64_t> eos_token_ids;   // config "eos_token_id", an int or a list
    std::string torch_dtype = "float32";  // "float32", "bfloat16", "float16"
    double initializer_range = 0.02;

    // The config.json object this was read from (JSON text, empty for built-in models); keys
    // rlpt doesn't interpret are written back unchanged.
    std::string source_json;

    std::string model_type() const;    // "llama" | "qwen2" | "qwen3" | "qwen3_moe"
    std::string architecture() const;  // e.g. "Qwen2ForCausalLM", from family + head
    // Whether decoder layer `layer` is a mixture-of-experts layer (see num_experts), and how many
    // of the layers are.
    bool is_moe_layer(int64_t layer) const;
    int64_t num_moe_layers() const;

    // Consistency checks (positive sizes, head divisibility, even head_dim, supported rope
    // scaling, num_labels 1 for classification heads). ConfigError naming the field.
    void validate() const;
};

// How one rank of a tensor-parallel block of `tp` ranks holds a model (Megatron-LM layout):
// query heads, the MLP's intermediate columns and the (padded) vocabulary are split into `tp`
// contiguous slices; key/value heads are split when tp divides them and replicated otherwise
// (each rank keeps the one KV head its query heads use, as vLLM does for GQA with few KV heads).
// Torch-free so configuration checks can use it.
struct TpLayout {
    int64_t tp = 1, rank = 0;
    int64_t head_dim = 0, num_kv_heads = 0;      // of the full model
    int64_t heads = 0, head_first = 0;           // query heads of this rank: [head_first, +heads)
    int64_t kv_heads = 0, kv_first = 0;          // KV heads held: [kv_first, +kv_heads)
    bool kv_replicated = false;                  // tp > num_key_value_heads: tp / nkv ranks share a head
    int64_t inter = 0, inter_first = 0;          // intermediate columns [inter_first, +inter)
    int64_t moe_inter = 0, moe_inter_first = 0;  // every expert's columns [moe_inter_first, +moe_inter)
    // The vocabulary is padded to a multiple of tp (Megatron pads too); padded rows are zero in
    // the embedding and the LM head, and their logits are -inf (see transformer.h).
    int64_t vocab_size = 0;                                // the real vocabulary (args.vocab_size)
    int64_t vocab_padded = 0, vocab = 0, vocab_first = 0;  // this rank's rows [vocab_first, +vocab)
    // Real (not padding) rows of this rank's vocabulary slice.
    int64_t vocab_real() const;
};

// The layout of `rank` in a block of `tp` ranks. ConfigError naming the numbers when tp cannot
// split this model: tp < 1, num_attention_heads, intermediate_size or (MoE) moe_intermediate_size
// not divisible by tp,
// num_key_value_heads neither a multiple nor a divisor of tp, a vocabulary so small that the
// last rank's slice would be padding only.
TpLayout tp_layout(const ModelArgs& args, int64_t tp, int64_t rank);

// Parses a config.json text. `source` names the file in error messages.
ModelArgs model_args_from_json(const std::string& json_text, const std::string& source);
// Reads `path`, or `path`/config.json when `path` is a directory.
ModelArgs load_model_args(const std::string& path);

// config.json text for `args` (source_json's other keys kept, "architectures" from
// args.architecture(); classification heads get id2label/label2id/num_labels, a causal LM
// drops them).
std::string model_args_to_json(const ModelArgs& args);
// Writes dir/config.json atomically.
void save_model_args(const ModelArgs& args, const std::string& dir);

// A small model for built-in tasks and tests (no HF directory). Qwen2 family: q/k/v biases and
// tied embeddings, like Qwen2.5-0.5B; Qwen3: q/k norms, no biases, tied embeddings, like
// Qwen3-0.6B; Qwen3-MoE: Qwen3's attention, 4 experts of width 32, top 2, norm_topk_prob, every
// layer sparse; Llama family: no biases, untied lm_head. Defaults: hidden
// 64, 2 layers, 4 heads, 2 KV heads (GQA), intermediate 128, max positions 512, rope_theta
// 10000, eps 1e-6. Adjust fields afterwards as needed and call validate().
ModelArgs tiny_model_args(ModelFamily family, int64_t vocab_size);

// The Llama-family model a config's model.builtin section describes (roles build it when
// model.path is empty; benchmarks use it too), validated; torch_dtype stays "float32".
ModelArgs builtin_model_args(const BuiltinModelConfig& builtin, int64_t vocab_size);

}  // namespace rlpt::model
