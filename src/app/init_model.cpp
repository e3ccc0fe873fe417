// `rlpt init-model`: a model from scratch as a Hugging Face folder, so any task can start
// without a pre-trained model and without writing model files by hand.
#include "init_model.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rlpt/app/job.h"
#include "rlpt/config/config.h"
#include "rlpt/core/error.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/transformer.h"
#include "rlpt/tokenizer/char_tokenizer.h"

namespace rlpt::app {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    RLPT_CHECK_KIND(IoError, in.good(), "cannot open '{}'", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void collect_strings(const nlohmann::json& j, std::vector<std::string>& out) {
    if (j.is_string()) out.push_back(j.get<std::string>());
    else if (j.is_structured())
        for (const auto& v : j) collect_strings(v, out);
}

// The texts of a file whose characters the vocabulary must cover: the string values of every
// record of a .jsonl / .json file (not its keys or JSON syntax), or the whole text otherwise.
std::vector<std::string> texts_of(const std::string& path) {
    const std::string text = read_file(path);
    const auto ext = fs::path(path).extension().string();
    std::vector<std::string> out;
    if (ext != ".jsonl" && ext != ".json") {
        out.push_back(text);
        return out;
    }
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (ext == ".json" && first != std::string::npos && text[first] == '[') {
        try {
            collect_strings(nlohmann::json::parse(text), out);
        } catch (const nlohmann::json::exception& e) {
            RLPT_THROW(IoError, "{}: bad JSON: {}", path, e.what());
        }
        return out;
    }
    std::istringstream in(text);
    int64_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        try {
            collect_strings(nlohmann::json::parse(line), out);
        } catch (const nlohmann::json::exception& e) {
            RLPT_THROW(IoError, "{}:{}: bad JSON: {}", path, line_no, e.what());
        }
    }
    return out;
}

// Copies a tokenizer (a tokenizer.json file, or a folder holding one) into `dir`.
void copy_tokenizer(const std::string& from, const std::string& dir) {
    const fs::path src(from);
    const bool is_dir = fs::is_directory(src);
    const fs::path folder = is_dir ? src : src.parent_path();
    RLPT_CHECK_KIND(IoError, fs::is_regular_file(is_dir ? src / "tokenizer.json" : src),
                    "--tokenizer: no tokenizer.json at '{}'", from);
    fs::copy_file(is_dir ? src / "tokenizer.json" : src, fs::path(dir) / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
    for (const char* extra : {"tokenizer_config.json", "special_tokens_map.json"}) {
        if (fs::is_regular_file(folder / extra))
            fs::copy_file(folder / extra, fs::path(dir) / extra, fs::copy_options::overwrite_existing);
    }
}

// The architectures `--arch` names, the single place a new one is added: the name, and how the
// model's hyper-parameters follow from the options. Every maker starts from the built-in (Llama)
// model of the same sizes.
struct InitOptions {
    BuiltinModelConfig sizes;  // --hidden-size, --layers, --heads, --kv-heads, --intermediate-size, ...
    int64_t head_dim = 0;      // --head-dim; 0: hidden / heads
    double rope_theta = 0;     // --rope-theta; 0: the architecture's default
    // qwen3_moe only: --experts, --experts-per-tok, --moe-intermediate-size (0: intermediate / 4)
    int64_t experts = 8, experts_per_tok = 2, moe_intermediate_size = 0;
};

model::ModelArgs llama_args(const InitOptions& o, int64_t vocab) {
    BuiltinModelConfig b = o.sizes;
    if (o.rope_theta > 0) b.rope_theta = o.rope_theta;
    model::ModelArgs a = model::builtin_model_args(b, vocab);
    if (o.head_dim > 0) a.head_dim = o.head_dim;
    return a;
}

// Qwen3 (dense), as Qwen3-0.6B is built: per-head q/k RMSNorm, no attention biases, tied
// embeddings, rope_theta 1e6 unless --rope-theta says otherwise.
model::ModelArgs qwen3_args(const InitOptions& o, int64_t vocab) {
    InitOptions q = o;
    if (q.rope_theta <= 0) q.rope_theta = 1e6;
    model::ModelArgs a = llama_args(q, vocab);
    a.family = model::ModelFamily::kQwen3;
    a.qk_norm = true;
    a.qkv_bias = false;
    a.o_proj_bias = false;
    a.mlp_bias = false;
    return a;
}

// Qwen3-MoE, as Qwen3-30B-A3B is built: Qwen3's attention, every layer sparse (--experts SwiGLU
// experts of --moe-intermediate-size, the top --experts-per-tok renormalised, norm_topk_prob).
model::ModelArgs qwen3_moe_args(const InitOptions& o, int64_t vocab) {
    model::ModelArgs a = qwen3_args(o, vocab);
    a.family = model::ModelFamily::kQwen3Moe;
    a.num_experts = o.experts;
    a.num_experts_per_tok = o.experts_per_tok;
    a.moe_intermediate_size = o.moe_intermediate_size > 0 ? o.moe_intermediate_size : a.intermediate_size / 4;
    a.norm_topk_prob = true;
    a.validate();
    return a;
}

struct InitArch {
    const char* name;
    model::ModelArgs (*make)(const InitOptions&, int64_t vocab);
};

constexpr InitArch kInitArchs[] = {
    {"llama", llama_args},
    {"qwen3", qwen3_args},
    {"qwen3_moe", qwen3_moe_args},
};

// The row `--arch` names; ConfigError for an unknown name.
const InitArch& find_arch(const std::string& arch) {
    std::string names;
    for (const auto& a : kInitArchs) {
        if (arch == a.name) return a;
        names += std::string(names.empty() ? "" : ", ") + a.name;
    }
    RLPT_THROW(ConfigError, "--arch: unknown architecture '{}' (choices: {})", arch, names);
}

}  // namespace

int init_model_command(int argc, char** argv) {
    std::string out_dir, tokenizer_path;
    std::vector<std::string> char_files;
    InitOptions opt;
    BuiltinModelConfig& b = opt.sizes;  // the built-in model's defaults
    std::string arch = "llama";
    CLI::App app{"Write a randomly initialised model (Hugging Face folder: config.json, model.safetensors, "
                 "tokenizer) to start training from scratch. No MPI.",
                 "rlpt init-model"};
    app.add_option("--out", out_dir, "folder to write (created; existing model files are replaced)")->required();
    auto* o_chars = app.add_option("--chars-from", char_files,
                                   "files whose characters form a character vocabulary (for .jsonl/.json: every "
                                   "string value of every record), e.g. your train and validation files");
    auto* o_tok = app.add_option("--tokenizer", tokenizer_path, "an existing tokenizer.json (or a folder with one)");
    o_chars->excludes(o_tok);
    app.add_option("--hidden-size", b.hidden_size, "model width (default 128)");
    app.add_option("--layers", b.num_layers, "transformer layers (default 2)");
    app.add_option("--heads", b.num_heads, "attention heads (default 4)");
    app.add_option("--kv-heads", b.num_kv_heads, "key/value heads, dividing --heads (default 2)");
    app.add_option("--intermediate-size", b.intermediate_size, "MLP width (default 384)");
    app.add_option("--max-position", b.max_position, "longest prompt + response in tokens (default 128)");
    app.add_option("--seed", b.init_seed, "weight initialisation seed (default 1234)");
    app.add_option("--arch", arch,
                   "llama (default) | qwen3 (Qwen3ForCausalLM: q/k norms, no biases, tied embeddings) | "
                   "qwen3_moe (Qwen3MoeForCausalLM: Qwen3 with mixture-of-experts MLPs)");
    app.add_option("--head-dim", opt.head_dim, "attention head size (default hidden-size / heads)");
    app.add_option("--rope-theta", opt.rope_theta, "rotary embedding base (default: llama 10000, qwen3 1000000)");
    auto* o_experts = app.add_option("--experts", opt.experts, "qwen3_moe: experts per sparse layer (default 8)");
    auto* o_topk = app.add_option("--experts-per-tok", opt.experts_per_tok,
                                  "qwen3_moe: experts each token is routed to (default 2)");
    auto* o_moe_inter = app.add_option("--moe-intermediate-size", opt.moe_intermediate_size,
                                       "qwen3_moe: each expert's MLP width (default intermediate-size / 4)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "rlpt init-model: %s (see rlpt init-model --help)\n", e.what());
        return kExitConfig;
    }
    try {
        RLPT_CHECK_KIND(ConfigError, o_chars->count() + o_tok->count() > 0,
                        "give the vocabulary: --chars-from FILE... (a character tokenizer) or --tokenizer PATH");
        const InitArch& architecture = find_arch(arch);
        for (const auto* o : {o_experts, o_topk, o_moe_inter})
            RLPT_CHECK_KIND(ConfigError, o->count() == 0 || arch == "qwen3_moe", "{} applies to --arch qwen3_moe only",
                            o->get_name());
        fs::create_directories(out_dir);
        std::unique_ptr<tokenizer::Tokenizer> tok;
        if (!char_files.empty()) {
            std::vector<std::string> texts;
            for (const auto& f : char_files) {
                auto t = texts_of(f);
                texts.insert(texts.end(), std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
            }
            std::vector<std::string_view> views(texts.begin(), texts.end());
            tok = std::make_unique<tokenizer::CharTokenizer>(tokenizer::charset_of(views));
            tok->save(out_dir);
        } else {
            copy_tokenizer(tokenizer_path, out_dir);
            tok = tokenizer::load_tokenizer(out_dir);
        }
        model::ModelArgs a = architecture.make(opt, tok->vocab_size());
        const auto sp = tok->special_ids();
        a.bos_token_id = sp.bos;
        a.pad_token_id = sp.pad;
        if (sp.eos >= 0) a.eos_token_ids = {sp.eos};
        auto m = model::make_random_causal_lm(a, static_cast<uint64_t>(b.init_seed));
        model::save_pretrained(*m, out_dir);
        int64_t params = 0;
        for (const auto& p : m->parameters()) params += p.numel();
        std::printf("rlpt init-model: wrote %s (%s tokenizer, vocabulary %lld; hidden %lld, %lld layers, %lld heads, "
                    "%.2fM parameters, seed %lld)\n  train from it with model.path=%s\n",
                    out_dir.c_str(), std::string(tok->kind()).c_str(), static_cast<long long>(tok->vocab_size()),
                    static_cast<long long>(b.hidden_size), static_cast<long long>(b.num_layers),
                    static_cast<long long>(b.num_heads), static_cast<double>(params) / 1e6,
                    static_cast<long long>(b.init_seed), out_dir.c_str());
        if (a.num_experts > 0)
            std::printf("  %lld of %lld layers sparse: %lld experts of width %lld, top %lld\n",
                        static_cast<long long>(a.num_moe_layers()), static_cast<long long>(a.num_hidden_layers),
                        static_cast<long long>(a.num_experts), static_cast<long long>(a.moe_intermediate_size),
                        static_cast<long long>(a.num_experts_per_tok));
        return kExitOk;
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "rlpt init-model: %s\n", e.what());
        return kExitConfig;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rlpt init-model: %s\n", e.what());
        return kExitError;
    }
}

}  // namespace rlpt::app
