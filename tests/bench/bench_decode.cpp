// Rollout decode throughput against this machine's ceilings and against the plain BLAS path,
// measured in the same run.
//
//   ceilings: memory bandwidth = bytes read + written by a 512 MiB tensor copy / time;
//             matmul rate = best GFLOP/s of torch::mm on square fp32 matrices (1024, 2048, 4096).
//   per model and batch: decode tokens/s = B * (N - 1) / (t(generate N tokens) - t(generate 1 token)),
//             i.e. the steady decode rate with the prefill taken out; measured with the decode
//             kernels (kernels::small_matmul, the default) and with them switched off
//             (CausalLM::use_decode_kernels(false): every Linear through torch::linear / OpenBLAS,
//             what PyTorch eager does), alternating the two so machine load hits both alike.
//   bound per decode step: bytes = weights read once (all Linear layers + the [V, H] head, in
//             the model dtype) + the K/V cache read at the mean cached length; FLOPs = 2 * B *
//             (those weights) + 4 * B * L * n_heads * head_dim * layers (scores and values). Step
//             time >= max(bytes / bandwidth, FLOPs / fp32 matmul rate); "achieved" is that bound
//             over the measured step time.
//   head_ms / sample_ms: the LM head (gathered_logits) and the sampler for B rows, per step.
// Correctness first: greedy rollout log-probs must equal a full forward's (else exit 1).
// The ~125M Llama's weights: random (seed 1), or with --hf-dir DIR loaded from that Hugging Face
// directory (written there first, from the random weights, when DIR has no config.json) so that
// scripts/bench_decode.sh runs PyTorch eager on the very same checkpoint.
// Output: one JSON line per measurement (scripts/bench_decode.sh turns them into a table).
// Usage: rlpt_bench_decode [--threads N] [--quick] [--batches 1,16,64] [--hf-dir DIR [--write-hf-only]]
//                          [--models tiny,fp32,bf16] [--no-blas]
//        [--baseline blas|unfused]
//        (default 1 thread and all three models; --no-blas: only the decode kernels, no BLAS-path
//        rows (blas_tokens_per_s 0), which halves the run; --baseline unfused: the second path is
//        the decode kernels without the fused decode step (Backbone::use_fused_decode(false):
//        each layer's LibTorch forward around the same kernels, the path before the fused step)
//        instead of the BLAS path; --write-hf-only: write DIR's checkpoint when missing, then exit without measuring,
//        so that scripts/bench_decode.sh can convert it for llama.cpp before the first round)
#include <dlfcn.h>
#include <torch/torch.h>

#include <filesystem>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "rlpt/build_config.h"
#include "rlpt/kernels/small_matmul.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double best_seconds(int reps, F&& f) {
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = Clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
}

std::string blas_core() {
    using CoreNameFn = char* (*)();
    auto fn = reinterpret_cast<CoreNameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const char* env = std::getenv("OPENBLAS_CORETYPE");
    std::string s = fn ? std::string("OpenBLAS ") + fn() : std::string("not OpenBLAS");
    return s + " (OPENBLAS_CORETYPE=" + (env ? env : "unset") + ")";
}

struct ModelSpec {
    const char* name;
    rlpt::model::ModelArgs args;
    int64_t new_tokens;
    torch::Dtype dtype;
    bool from_hf_dir = false;  // loaded from --hf-dir when given
};

// The spec's model: random weights (seed 1), or `hf_dir`'s checkpoint for the specs that take it
// (saved there from the fp32 random weights first if the directory holds no model).
std::shared_ptr<rlpt::model::CausalLM> make_model(const ModelSpec& spec, const std::string& hf_dir) {
    if (hf_dir.empty() || !spec.from_hf_dir) return rlpt::model::make_random_causal_lm(spec.args, 1, spec.dtype);
    if (!std::filesystem::exists(std::filesystem::path(hf_dir) / "config.json"))
        rlpt::model::save_pretrained(*rlpt::model::make_random_causal_lm(spec.args, 1, torch::kFloat32), hf_dir);
    return rlpt::model::load_pretrained(hf_dir, spec.dtype);
}

ModelSpec tiny_spec() {
    auto a = rlpt::model::tiny_model_args(rlpt::model::ModelFamily::kQwen2, 20);
    a.hidden_size = 128;
    a.num_attention_heads = 4;
    a.num_key_value_heads = 2;
    a.head_dim = 32;
    a.intermediate_size = 384;
    a.validate();
    return {"tiny (H128 L2 V20)", a, 64, torch::kFloat32};
}

// The ~125M Llama of issue #12: 100M streamed weights (layers + untied head) + a 24.6M embedding.
ModelSpec llama125m_spec(torch::Dtype dtype) {
    auto a = rlpt::model::tiny_model_args(rlpt::model::ModelFamily::kLlama, 32000);
    a.hidden_size = 768;
    a.num_hidden_layers = 12;
    a.num_attention_heads = 12;
    a.num_key_value_heads = 4;
    a.head_dim = 64;
    a.intermediate_size = 2048;
    a.max_position_embeddings = 2048;
    a.tie_word_embeddings = false;
    a.validate();
    return {dtype == torch::kFloat32 ? "125M Llama fp32" : "125M Llama bf16", a, 32, dtype, true};
}

// Weights a decode step reads (every Linear of every layer + the output head), in elements.
int64_t streamed_weights(const rlpt::model::ModelArgs& a) {
    const int64_t h = a.hidden_size, q = a.num_attention_heads * a.head_dim, kv = a.num_key_value_heads * a.head_dim;
    const int64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * a.intermediate_size + 2 * h;
    return a.num_hidden_layers * per_layer + a.vocab_size * h + h;
}

std::vector<std::vector<int64_t>> random_prompts(int64_t b, int64_t len, int64_t vocab) {
    auto t = torch::randint(0, vocab, {b, len}, torch::kInt64);
    std::vector<std::vector<int64_t>> out;
    for (int64_t i = 0; i < b; ++i) {
        auto r = t[i].contiguous();
        out.emplace_back(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + len);
    }
    return out;
}

double check_against_full_forward(rlpt::model::CausalLM& m) {
    auto prompts = random_prompts(4, 12, m.args().vocab_size);
    prompts[1].resize(5);
    rlpt::rollout::SamplingParams p;
    p.greedy = true;
    p.max_new_tokens = 8;
    auto out = rlpt::rollout::generate(m, prompts, {0, 1, 2, 3}, p);
    torch::NoGradGuard ng;
    auto logits = m.forward_logits(out.input_ids, out.attention_mask, out.position_ids);
    const int64_t pl = out.prompts.size(1), r = out.responses.size(1);
    auto lp = torch::log_softmax(logits.narrow(1, pl - 1, r), -1).gather(2, out.responses.unsqueeze(-1)).squeeze(-1);
    return (lp - out.rollout_log_probs).mul(out.response_mask).abs().max().item<double>();
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 1;
    bool quick = false;
    std::vector<int64_t> batches{1, 16, 64};
    std::string hf_dir;
    bool write_hf_only = false;
    bool with_blas = true;
    std::string baseline = "blas";
    std::string models = "tiny,fp32,bf16";
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = std::max(1, std::atoi(argv[++i]));
        } else if (!std::strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!std::strcmp(argv[i], "--hf-dir") && i + 1 < argc) {
            hf_dir = argv[++i];
        } else if (!std::strcmp(argv[i], "--write-hf-only")) {
            write_hf_only = true;
        } else if (!std::strcmp(argv[i], "--no-blas")) {
            with_blas = false;
        } else if (!std::strcmp(argv[i], "--baseline") && i + 1 < argc &&
                   (!std::strcmp(argv[i + 1], "blas") || !std::strcmp(argv[i + 1], "unfused"))) {
            baseline = argv[++i];
        } else if (!std::strcmp(argv[i], "--models") && i + 1 < argc) {
            models = argv[++i];
        } else if (!std::strcmp(argv[i], "--batches") && i + 1 < argc) {
            batches.clear();
            std::stringstream list(argv[++i]);
            for (std::string item; std::getline(list, item, ',');)
                batches.push_back(std::max(1, std::atoi(item.c_str())));
        } else {
            std::fprintf(stderr,
                         "usage: %s [--threads N] [--quick] [--batches 1,16,64] [--hf-dir DIR [--write-hf-only]] "
                         "[--models tiny,fp32,bf16] [--no-blas] [--baseline blas|unfused]\n",
                         argv[0]);
            return 2;
        }
    }
    if (write_hf_only) {
        if (hf_dir.empty()) {
            std::fprintf(stderr, "%s: --write-hf-only needs --hf-dir DIR\n", argv[0]);
            return 2;
        }
        make_model(llama125m_spec(torch::kFloat32), hf_dir);
        return 0;
    }
    torch::set_num_threads(threads);
    torch::manual_seed(0);
    const std::string blas = blas_core();

    // ---- ceilings ----
    double bw_gbs = 0, mm_gflops = 0;
    {
        const int64_t n = (quick ? 64 : 128) << 20;  // floats: 256 / 512 MiB
        auto src = torch::rand({n});
        auto dst = torch::empty({n});
        dst.copy_(src);
        const double t = best_seconds(5, [&] { dst.copy_(src); });
        bw_gbs = 2.0 * static_cast<double>(n) * 4 / t / 1e9;
        for (int64_t s : {1024, 2048, 4096}) {
            if (quick && s > 2048) break;
            auto a = torch::randn({s, s}), b = torch::randn({s, s});
            auto c = torch::mm(a, b);
            const double tm = best_seconds(s >= 4096 ? 1 : 3, [&] { c = torch::mm(a, b); });
            mm_gflops = std::max(mm_gflops, 2.0 * s * s * s / tm / 1e9);
        }
    }
    std::printf("{\"kind\":\"ceiling\",\"git_sha\":\"%s\",\"threads\":%d,\"blas\":\"%s\",\"kernel_isa\":\"%s\","
                "\"kernel_threads\":%d,\"copy_GBps\":%.2f,\"mm_GFLOPs\":%.1f}\n",
                RLPT_GIT_SHA, threads, blas.c_str(), rlpt::kernels::small_matmul_isa_name(),
                rlpt::kernels::decode_kernel_threads(), bw_gbs, mm_gflops);
    std::fflush(stdout);

    // ---- decode ----
    const int64_t prompt_len = 16;
    models = "," + models + ",";
    const std::vector<int> paths = with_blas ? std::vector<int>{1, 0} : std::vector<int>{1};  // kernels on / baseline
    const bool unfused = baseline == "unfused";
    auto use_path = [&](rlpt::model::CausalLM& m, int on) {
        m.use_decode_kernels(on == 1 || unfused);
        m.backbone().use_fused_decode(on == 1);
    };
    for (const ModelSpec& spec : {tiny_spec(), llama125m_spec(torch::kFloat32), llama125m_spec(torch::kBFloat16)}) {
        const char* key = spec.args.vocab_size != 32000 ? "tiny" : spec.dtype == torch::kFloat32 ? "fp32" : "bf16";
        if (models.find("," + std::string(key) + ",") == std::string::npos) continue;
        auto m = make_model(spec, hf_dir);
        const double err = check_against_full_forward(*m);
        const double tolerance = spec.dtype == torch::kFloat32 ? 1e-3 : 0.2;
        if (!(err < tolerance)) {
            std::fprintf(stderr, "%s: rollout log-probs differ from the full forward by %g\n", spec.name, err);
            return 1;
        }
        const auto& a = spec.args;
        const int64_t n_new = quick ? spec.new_tokens / 2 : spec.new_tokens;
        for (int64_t b : batches) {
            auto prompts = random_prompts(b, prompt_len, a.vocab_size);
            std::vector<uint64_t> seeds;
            for (int64_t i = 0; i < b; ++i) seeds.push_back(rlpt::rollout::sample_seed(1, 0, i));
            rlpt::rollout::SamplingParams p;  // temperature 1, no top-k/top-p, no EOS: every row runs N steps
            p.max_new_tokens = n_new;
            auto p1 = p;
            p1.max_new_tokens = 1;
            const int reps = b * a.hidden_size >= 32 * 768 ? 2 : 3;
            // Best time of each of (kernels, BLAS) x (N tokens, 1 token), the four interleaved.
            double t_full[2] = {1e30, 1e30}, t_pre[2] = {1e30, 1e30};
            for (int on : paths) {  // warm-up
                use_path(*m, on);
                rlpt::rollout::generate(*m, prompts, seeds, p1, b);
            }
            for (int r = 0; r < reps; ++r) {
                for (int on : paths) {
                    use_path(*m, on);
                    t_full[on] = std::min(t_full[on],
                                          best_seconds(1, [&] { rlpt::rollout::generate(*m, prompts, seeds, p, b); }));
                    t_pre[on] = std::min(t_pre[on],
                                         best_seconds(1, [&] { rlpt::rollout::generate(*m, prompts, seeds, p1, b); }));
                }
            }
            use_path(*m, 1);
            double tok_s[2] = {0, 0};
            for (int on : paths)
                tok_s[on] = static_cast<double>(b) * static_cast<double>(n_new - 1) / (t_full[on] - t_pre[on]);
            const double step_s = static_cast<double>(b) / tok_s[1];
            // The LM head and the sampler alone for b rows.
            double head_s, sample_s;
            {
                torch::NoGradGuard ng;
                auto hidden = torch::randn({b, a.hidden_size}).to(spec.dtype);
                head_s = best_seconds(5, [&] { m->gathered_logits(hidden); });
                auto logits = m->gathered_logits(hidden);
                std::vector<double> u(static_cast<size_t>(b), 0.5);
                sample_s = best_seconds(5, [&] { rlpt::rollout::choose_tokens(logits, p, u); });
            }

            const double mean_len = static_cast<double>(prompt_len) + static_cast<double>(n_new) / 2;
            const double w = static_cast<double>(streamed_weights(a));
            const double kv_elems = 2.0 * a.num_hidden_layers * b * mean_len * a.num_key_value_heads * a.head_dim;
            const double elem_bytes = spec.dtype == torch::kFloat32 ? 4.0 : 2.0;
            const double bytes = elem_bytes * (w + kv_elems);
            const double flops =
                2.0 * b * w + 4.0 * b * mean_len * a.num_attention_heads * a.head_dim * a.num_hidden_layers;
            const double t_bw = bytes / (bw_gbs * 1e9), t_fl = flops / (mm_gflops * 1e9);
            const double bound = std::max(t_bw, t_fl);
            std::printf(
                "{\"kind\":\"decode\",\"model\":\"%s\",\"threads\":%d,\"batch\":%lld,\"new_tokens\":%lld,"
                "\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"blas_tokens_per_s\":%.1f,\"vs_blas\":%.2f,"
                "\"bw_bound_ms\":%.3f,\"flop_bound_ms\":%.3f,\"binding\":\"%s\",\"ceiling_tokens_per_s\":%.1f,"
                "\"achieved\":%.3f,\"head_ms\":%.3f,\"sample_ms\":%.3f,\"prefill_ms\":%.2f,\"check_max_abs\":%.2e,"
                "\"baseline\":\"%s\"}\n",
                spec.name, threads, static_cast<long long>(b), static_cast<long long>(n_new), step_s * 1e3, tok_s[1],
                tok_s[0], with_blas ? tok_s[1] / tok_s[0] : 0.0, t_bw * 1e3, t_fl * 1e3,
                t_bw >= t_fl ? "bandwidth" : "matmul", b / bound, bound / step_s, head_s * 1e3, sample_s * 1e3,
                t_pre[1] * 1e3, err, baseline.c_str());
            std::fflush(stdout);
        }
        if (spec.dtype != torch::kFloat32) continue;
        // Sampler cost per step at batch 64 next to the forward: no filter vs top-p 0.9 + top-k 50.
        auto logits = torch::randn({64, a.vocab_size}) * 3;
        std::vector<double> u(64);
        for (size_t i = 0; i < u.size(); ++i) u[i] = rlpt::rollout::uniform_draw(3, static_cast<int64_t>(i));
        rlpt::rollout::SamplingParams plain, filtered, greedy;
        filtered.top_p = 0.9;
        filtered.top_k = 50;
        greedy.greedy = true;
        const double t_plain = best_seconds(5, [&] { rlpt::rollout::choose_tokens(logits, plain, u); });
        const double t_filt = best_seconds(5, [&] { rlpt::rollout::choose_tokens(logits, filtered, u); });
        rlpt::rollout::SamplingParams nucleus;
        nucleus.top_p = 0.9;
        const double t_nuc = best_seconds(5, [&] { rlpt::rollout::choose_tokens(logits, nucleus, u); });
        const double t_greedy = best_seconds(5, [&] { rlpt::rollout::choose_tokens(logits, greedy, u); });
        std::printf("{\"kind\":\"sampler\",\"model\":\"%s\",\"threads\":%d,\"batch\":64,\"greedy_ms\":%.3f,"
                    "\"plain_ms\":%.3f,\"top_p_ms\":%.3f,\"top_p_top_k_ms\":%.3f}\n",
                    spec.name, threads, t_greedy * 1e3, t_plain * 1e3, t_nuc * 1e3, t_filt * 1e3);
        std::fflush(stdout);
    }
    return 0;
}
