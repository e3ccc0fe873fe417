// rlpt's side of scripts/bench_gpu.sh (issue 28, "GPU speed"): rollout, training step and
// log-prob pass of a random-weight Qwen2.5-shaped model on one device, one JSON line per
// measurement. The script runs scripts/bench_gpu_peers.py on the same shapes in the same run
// and prints the table with the ratios.
//
//   ceiling   this device's copy bandwidth (bytes read + written by a tensor copy / time) and
//             matmul rate (torch::mm of square matrices in the model dtype), best of a few.
//   rollout   rollout::generate (continuous batching, the trainer's rollout) on B random
//             prompts of --prompt tokens, --new new tokens each, EOS ignored (eos_id -1, no stop
//             ids), temperature 1, no top-k/top-p, B slots. tokens/s = B·new / wall of the whole
//             call (prefill included, as HF generate is timed; best of --rollout-reps after a
//             4-token warm-up call); ms per decode step = (t(new tokens) − t(1 token)) / (new − 1).
//             Bound per decode step: bytes = every
//             weight the step streams (all Linear layers + the [V, H] head, model dtype; the
//             embedding lookup reads B rows only) + the K/V cache read at the mean cached
//             length (prompt + new/2); FLOPs = 2·B·(those weights) + 4·B·L·heads·head_dim·layers.
//             Checked: every row generated exactly `new` tokens.
//   train     TrainEngine steps of B × T random tokens: zero_grad, forward + backward of the SFT
//             token NLL (engine::sft_token_nll_sum, fp32 head), engine.step() (AdamW, no
//             clipping). Parameters in --dtype (bfloat16: fp32 gradients, master weights and
//             moments, i.e. the peer's fp32 weights + bf16 autocast). One warm-up step, then the
//             median of --train-steps. TFLOP/s = 6·N·tokens/s (N: every parameter, tied
//             embeddings once). Checked: no step skipped, every loss finite.
//   logprob   engine::compute_log_probs under NoGradGuard (the old-log-prob / reference pass)
//             on B × T random tokens, log-probs of the T − 1 tokens after the first, no entropy,
//             temperature 1. TFLOP/s = 2·N·tokens/s. Checked: every log-prob finite and <= 0.
// A measurement that fails (out of memory, a failed check) prints {"kind":"error","what":...,
// "reason":...}; the next one still runs and the exit code is 1.
// Peak memory: on CUDA the caching allocator's peak allocated bytes (torch.cuda's
// max_memory_allocated) since a reset right before the measurement; on the CPU the process's
// VmHWM since a reset (/proc/self/clear_refs), i.e. peak RSS.
//
// --write-grpo DIR writes what scripts/bench_gpu.sh's GRPO step trains on, then exits:
// DIR/model (the same shape with random weights as a Hugging Face folder plus a character
// tokenizer; the model's vocabulary stays the full size, ids the tokenizer lacks decode to
// nothing) and DIR/train.jsonl (--prompts prompts of --prompt random characters, answer "0").
//
// Usage: rlpt_bench_gpu [--device cuda|cpu] [--model 0.5b|1.5b|tiny] [--what rollout,train,logprob]
//                       [--batches 64,256] [--prompt 128] [--new 256] [--train-batch 16]
//                       [--train-seq 1024] [--train-steps 3] [--logprob-iters 3] [--rollout-reps 1]
//                       [--dtype bfloat16|float32] [--threads N]
//        rlpt_bench_gpu --write-grpo DIR [--model ...] [--prompts 64] [--prompt 128] [--new 256]
#include <ATen/DeviceAccelerator.h>
#include <malloc.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/tokenizer/char_tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
    std::string device = "cuda", model = "0.5b", what = "rollout,train,logprob", dtype = "bfloat16";
    std::string write_grpo;
    std::vector<int64_t> batches{64, 256};
    int64_t prompt = 128, new_tokens = 256;
    int64_t train_batch = 16, train_seq = 1024, train_steps = 3;
    int64_t logprob_iters = 3, rollout_reps = 1, prompts = 64, threads = 0;
};

int64_t to_int(const std::string& key, const std::string& v, int64_t min) {
    int64_t x = 0;
    const char* end = v.data() + v.size();
    const auto r = std::from_chars(v.data(), end, x);
    RLPT_CHECK(r.ec == std::errc() && r.ptr == end && x >= min, "bench_gpu: {} wants an integer >= {}, got '{}'", key,
               min, v);
    return x;
}

Args parse(int argc, char** argv) {
    Args a;
    const std::map<std::string, std::string*> text{{"--device", &a.device},
                                                   {"--model", &a.model},
                                                   {"--what", &a.what},
                                                   {"--dtype", &a.dtype},
                                                   {"--write-grpo", &a.write_grpo}};
    const std::map<std::string, std::pair<int64_t*, int64_t>> ints{{"--prompt", {&a.prompt, 1}},
                                                                   {"--new", {&a.new_tokens, 2}},
                                                                   {"--train-batch", {&a.train_batch, 1}},
                                                                   {"--train-seq", {&a.train_seq, 2}},
                                                                   {"--train-steps", {&a.train_steps, 1}},
                                                                   {"--logprob-iters", {&a.logprob_iters, 1}},
                                                                   {"--rollout-reps", {&a.rollout_reps, 1}},
                                                                   {"--prompts", {&a.prompts, 1}},
                                                                   {"--threads", {&a.threads, 0}}};
    RLPT_CHECK(argc % 2 == 1, "bench_gpu: every option takes one value");
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (const auto t = text.find(k); t != text.end()) {
            *t->second = v;
        } else if (const auto n = ints.find(k); n != ints.end()) {
            *n->second.first = to_int(k, v, n->second.second);
        } else if (k == "--batches") {  // comma-separated
            a.batches.clear();
            for (size_t p = 0, q = 0; p <= v.size(); p = q + 1) {
                q = std::min(v.find(',', p), v.size());
                a.batches.push_back(to_int(k, v.substr(p, q - p), 1));
            }
        } else {
            RLPT_THROW(ValueError,
                       "bench_gpu: unknown option {} (the usage is at the top of tests/bench/bench_gpu.cpp)", k);
        }
    }
    RLPT_CHECK(a.device == "cuda" || a.device == "cpu", "bench_gpu: --device cuda or cpu, got '{}'", a.device);
    RLPT_CHECK(a.dtype == "bfloat16" || a.dtype == "float32", "bench_gpu: --dtype bfloat16 or float32, got '{}'",
               a.dtype);
    return a;
}

// Qwen2.5 shapes (Hugging Face config.json of Qwen/Qwen2.5-0.5B and -1.5B: GQA with 2 KV heads,
// q/k/v biases, tied embeddings, rope_theta 1e6), and a tiny one of the same family for --quick.
// scripts/bench_gpu_peers.py builds the same three.
rlpt::model::ModelArgs qwen_shape(const std::string& name) {
    using namespace rlpt::model;
    auto a = tiny_model_args(ModelFamily::kQwen2, 151936);
    a.rope_theta = 1e6;
    a.max_position_embeddings = 4096;
    a.tie_word_embeddings = true;
    if (name == "0.5b") {
        a.hidden_size = 896, a.num_hidden_layers = 24, a.num_attention_heads = 14, a.num_key_value_heads = 2;
        a.intermediate_size = 4864;
    } else if (name == "1.5b") {
        a.hidden_size = 1536, a.num_hidden_layers = 28, a.num_attention_heads = 12, a.num_key_value_heads = 2;
        a.intermediate_size = 8960;
    } else if (name == "tiny") {
        a.vocab_size = 512, a.hidden_size = 64, a.num_hidden_layers = 2, a.num_attention_heads = 4;
        a.num_key_value_heads = 2, a.intermediate_size = 128;
    } else {
        RLPT_THROW(ValueError, "bench_gpu: unknown --model '{}' (0.5b, 1.5b, tiny)", name);
    }
    a.head_dim = a.hidden_size / a.num_attention_heads;
    a.validate();
    return a;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Wall time of f() with the device drained before and after.
template <class F>
double timed(const torch::Device& dev, F&& f) {
    if (dev.is_cuda()) torch::cuda::synchronize();
    const auto t0 = Clock::now();
    f();
    if (dev.is_cuda()) torch::cuda::synchronize();
    return seconds_since(t0);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Peak memory of one measurement: the CUDA caching allocator's peak allocated bytes, or the
// process's peak RSS (VmHWM) on the CPU; reset() starts a new window.
class PeakMemory {
  public:
    explicit PeakMemory(torch::Device dev) : dev_(dev) {}
    void reset() {
        if (dev_.is_cuda()) {
            at::accelerator::resetPeakStats(dev_.index());
            return;
        }
        malloc_trim(0);
        std::ofstream f("/proc/self/clear_refs");
        f << "5";
    }
    double gib() const {
        if (dev_.is_cuda()) {
            const auto s = at::accelerator::getDeviceStats(dev_.index());
            return static_cast<double>(
                       s.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak) /
                   (1 << 30);
        }
        std::ifstream f("/proc/self/status");
        for (std::string line; std::getline(f, line);)
            if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1 << 20);  // kB
        return -1;
    }
    const char* kind() const { return dev_.is_cuda() ? "cuda_max_allocated" : "peak_rss"; }

  private:
    torch::Device dev_;
};

// Token ids drawn uniformly from [3, vocab): clear of the low ids tokenizers keep for pad/bos/eos
// (as the peers draw them).
torch::Tensor random_ids(int64_t rows, int64_t cols, int64_t vocab, uint64_t seed) {
    torch::manual_seed(seed);
    return torch::randint(3, vocab, {rows, cols}, torch::kInt64);
}

double num_params(rlpt::model::CausalLM& m) {
    double n = 0;
    for (const auto& p : m.parameters()) n += static_cast<double>(p.numel());
    return n;
}

// The parameter count of `a` without building it (the measurements check it against the model's).
double count_params(const rlpt::model::ModelArgs& a) {
    const int64_t h = a.hidden_size, q = a.num_attention_heads * a.head_dim, kv = a.num_key_value_heads * a.head_dim;
    const int64_t attn = h * q + 2 * h * kv + q * h + (a.qkv_bias ? q + 2 * kv : 0) + (a.o_proj_bias ? h : 0);
    const int64_t mlp = 3 * h * a.intermediate_size + (a.mlp_bias ? 2 * a.intermediate_size + h : 0);
    const int64_t head = a.tie_word_embeddings ? 0 : a.vocab_size * h;
    return static_cast<double>(a.vocab_size * h + a.num_hidden_layers * (attn + mlp + 2 * h) + h + head);
}

// Weights one decode step reads: every parameter (a tied embedding is the head, read in full),
// less an untied embedding, of which the lookup reads only B rows.
double streamed_weights(const rlpt::model::ModelArgs& a) {
    return count_params(a) - (a.tie_word_embeddings ? 0.0 : static_cast<double>(a.vocab_size * a.hidden_size));
}

void print_ceilings(const torch::Device& dev, torch::Dtype dtype, const std::string& model, double params) {
    const bool cuda = dev.is_cuda();
    const int64_t n = (cuda ? 512 : 64) << 20;  // fp32 elements: 2 GiB / 256 MiB
    auto src = torch::rand({n}, torch::TensorOptions().device(dev));
    auto dst = torch::empty_like(src);
    double t_copy = 1e30;
    for (int i = 0; i < 6; ++i) t_copy = std::min(t_copy, timed(dev, [&] { dst.copy_(src); }));
    src = dst = torch::Tensor();
    const int64_t s = cuda ? 8192 : 1024;
    auto a = torch::randn({s, s}, torch::TensorOptions().device(dev).dtype(dtype));
    auto b = torch::randn({s, s}, torch::TensorOptions().device(dev).dtype(dtype));
    double t_mm = 1e30;
    for (int i = 0; i < 6; ++i) t_mm = std::min(t_mm, timed(dev, [&] { (void)torch::mm(a, b); }));
    a = b = torch::Tensor();
    if (cuda) at::accelerator::emptyCache();
    std::printf(
        "{\"kind\":\"setup\",\"git_sha\":\"%s\",\"torch\":\"%s\",\"device\":\"%s\",\"model\":\"%s\","
        "\"params\":%.0f,\"dtype\":\"%s\",\"threads\":%d,\"copy_GBps\":%.1f,\"mm_TFLOPs\":%.2f,\"mm_n\":%lld}\n",
        RLPT_GIT_SHA, RLPT_TORCH_VERSION, cuda ? "cuda" : "cpu", model.c_str(), params,
        rlpt::model::dtype_name(dtype).c_str(), torch::get_num_threads(),
        2.0 * static_cast<double>(n) * 4 / t_copy / 1e9, 2.0 * static_cast<double>(s * s * s) / t_mm / 1e12,
        static_cast<long long>(s));
    std::fflush(stdout);
}

void run_rollout(const Args& args, const rlpt::model::ModelArgs& ma, torch::Device dev, torch::Dtype dtype) {
    using namespace rlpt;
    auto m = model::make_random_causal_lm(ma, 1, dtype, dev);
    const double w = streamed_weights(ma);
    RLPT_CHECK(num_params(*m) == count_params(ma), "bench_gpu: the model has {} parameters, count_params says {}",
               num_params(*m), count_params(ma));
    PeakMemory mem(dev);
    for (int64_t b : args.batches) {
        auto ids = random_ids(b, args.prompt, ma.vocab_size, 100 + static_cast<uint64_t>(b));
        std::vector<std::vector<int64_t>> prompts;
        for (int64_t i = 0; i < b; ++i)
            prompts.emplace_back(ids[i].data_ptr<int64_t>(), ids[i].data_ptr<int64_t>() + args.prompt);
        std::vector<uint64_t> seeds;
        for (int64_t i = 0; i < b; ++i) seeds.push_back(rollout::sample_seed(1, 0, i));
        rollout::SamplingParams p;  // temperature 1, no top-k / top-p, eos_id -1: every row runs `new` steps
        p.max_new_tokens = args.new_tokens;
        auto p_warm = p, p_one = p;
        p_warm.max_new_tokens = std::min<int64_t>(4, args.new_tokens);
        p_one.max_new_tokens = 1;
        const rollout::BatchLimits limits(b);
        (void)rollout::generate(*m, prompts, seeds, p_warm, limits);
        double t_full = 1e30, t_one = 1e30;
        int64_t generated = 0;
        mem.reset();
        for (int64_t r = 0; r < args.rollout_reps; ++r) {
            t_one = std::min(t_one, timed(dev, [&] { (void)rollout::generate(*m, prompts, seeds, p_one, limits); }));
            t_full = std::min(t_full, timed(dev, [&] {
                                  auto out = rollout::generate(*m, prompts, seeds, p, limits);
                                  generated = out.response_mask.sum().item<int64_t>();
                              }));
        }
        RLPT_CHECK(generated == b * args.new_tokens, "bench_gpu: rollout generated {} tokens, expected {} x {}",
                   generated, b, args.new_tokens);
        const double step_s = (t_full - t_one) / static_cast<double>(args.new_tokens - 1);
        const double mean_len = static_cast<double>(args.prompt) + static_cast<double>(args.new_tokens) / 2;
        const double kv =
            2.0 * static_cast<double>(ma.num_hidden_layers * b * ma.num_key_value_heads * ma.head_dim) * mean_len;
        const double elem = dtype == torch::kFloat32 ? 4.0 : 2.0;
        const double flops =
            2.0 * static_cast<double>(b) * w +
            4.0 * static_cast<double>(b * ma.num_attention_heads * ma.head_dim * ma.num_hidden_layers) * mean_len;
        std::printf(
            "{\"kind\":\"rollout\",\"batch\":%lld,\"prompt\":%lld,\"new\":%lld,\"wall_s\":%.4f,\"prefill_s\":%.4f,"
            "\"tokens_per_s\":%.1f,\"step_ms\":%.4f,\"bytes_per_step\":%.0f,\"flops_per_step\":%.0f,"
            "\"peak_gib\":%.3f,\"peak_kind\":\"%s\",\"reps\":%lld}\n",
            static_cast<long long>(b), static_cast<long long>(args.prompt), static_cast<long long>(args.new_tokens),
            t_full, t_one, static_cast<double>(b * args.new_tokens) / t_full, step_s * 1e3, elem * (w + kv), flops,
            mem.gib(), mem.kind(), static_cast<long long>(args.rollout_reps));
        std::fflush(stdout);
    }
}

struct Tokens {
    torch::Tensor ids, mask, pos;
};

Tokens random_tokens(int64_t b, int64_t t, int64_t vocab, torch::Device dev) {
    Tokens x;
    x.ids = random_ids(b, t, vocab, 7).to(dev);
    x.mask = torch::ones({b, t}, torch::TensorOptions().dtype(torch::kInt64).device(dev));
    x.pos = torch::arange(t, torch::TensorOptions().dtype(torch::kInt64).device(dev))
                .unsqueeze(0)
                .expand({b, t})
                .contiguous();
    return x;
}

void run_train(const Args& args, const rlpt::model::ModelArgs& ma, torch::Device dev, torch::Dtype dtype) {
    using namespace rlpt;
    auto m = model::make_random_causal_lm(ma, 1, dtype, dev);
    PeakMemory mem(dev);
    mem.reset();  // before the engine: parameters, gradients, optimizer state and activations all count
    engine::OptimOptions o;
    o.lr = 1e-6;
    o.clip_grad = 0;                  // the peer's recipe: AdamW without clipping
    const comm::Communicator single;  // invalid: a one-process engine, no collectives
    engine::TrainEngine eng(m, single, o, 0);
    const int64_t b = args.train_batch, t = args.train_seq;
    const auto x = random_tokens(b, t, ma.vocab_size, dev);
    auto loss_mask = x.mask.clone();
    loss_mask.select(1, 0).zero_();
    const double n_loss = static_cast<double>(b * (t - 1));
    std::vector<double> times, losses;
    for (int64_t i = 0; i <= args.train_steps; ++i) {
        engine::StepResult r;
        torch::Tensor loss;
        const double s = timed(dev, [&] {
            eng.zero_grad();
            loss = engine::sft_token_nll_sum(*m, x.ids, x.mask, x.pos, loss_mask) / n_loss;
            loss.backward();
            r = eng.step();
        });
        RLPT_CHECK(!r.skipped && std::isfinite(loss.item<double>()), "bench_gpu: training step {} failed (loss {}, {})",
                   i, loss.item<double>(), r.skipped ? "skipped: non-finite gradient norm" : "not skipped");
        losses.push_back(loss.item<double>());
        if (i > 0) times.push_back(s);  // step 0 warms up
    }
    const double step_s = median(times), params = static_cast<double>(eng.num_parameters());
    const double tok_s = static_cast<double>(b * t) / step_s;
    std::printf("{\"kind\":\"train\",\"batch\":%lld,\"seq\":%lld,\"steps\":%lld,\"step_s\":%.4f,\"tokens_per_s\":%.1f,"
                "\"params\":%.0f,\"tflops\":%.3f,\"peak_gib\":%.3f,\"peak_kind\":\"%s\",\"loss_first\":%.4f,"
                "\"loss_last\":%.4f,\"dtype\":\"%s\"}\n",
                static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(args.train_steps), step_s,
                tok_s, params, 6.0 * params * tok_s / 1e12, mem.gib(), mem.kind(), losses.front(), losses.back(),
                model::dtype_name(dtype).c_str());
    std::fflush(stdout);
}

void run_logprob(const Args& args, const rlpt::model::ModelArgs& ma, torch::Device dev, torch::Dtype dtype) {
    using namespace rlpt;
    auto m = model::make_random_causal_lm(ma, 1, dtype, dev);
    const int64_t b = args.train_batch, t = args.train_seq;
    const auto x = random_tokens(b, t, ma.vocab_size, dev);
    const engine::SequenceBatch seq{x.ids, x.mask, x.pos, t - 1};
    torch::NoGradGuard no_grad;
    PeakMemory mem(dev);
    torch::Tensor lp;
    (void)engine::compute_log_probs(*m, seq, 1.0, false);  // warm-up
    mem.reset();
    std::vector<double> times;
    for (int64_t i = 0; i < args.logprob_iters; ++i)
        times.push_back(timed(dev, [&] { lp = engine::compute_log_probs(*m, seq, 1.0, false).log_probs; }));
    const double worst = lp.max().item<double>();
    RLPT_CHECK(torch::isfinite(lp).all().item<bool>() && worst <= 1e-4,
               "bench_gpu: log-probs not finite or above 0 (max {})", worst);
    const double s = median(times), params = num_params(*m), tok_s = static_cast<double>(b * t) / s;
    std::printf(
        "{\"kind\":\"logprob\",\"batch\":%lld,\"seq\":%lld,\"iters\":%lld,\"pass_s\":%.4f,\"tokens_per_s\":%.1f,"
        "\"params\":%.0f,\"tflops\":%.3f,\"peak_gib\":%.3f,\"peak_kind\":\"%s\"}\n",
        static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(args.logprob_iters), s, tok_s,
        params, 2.0 * params * tok_s / 1e12, mem.gib(), mem.kind());
    std::fflush(stdout);
}

// The GRPO step's model folder and prompts (see the header comment).
void write_grpo(const Args& args, rlpt::model::ModelArgs ma) {
    namespace fs = std::filesystem;
    using rlpt::tokenizer::CharTokenizer;
    const std::string charset = "abcdefghijklmnopqrstuvwxyz0123456789 ";
    const CharTokenizer tok(charset);
    const fs::path dir(args.write_grpo), model_dir = dir / "model";
    fs::create_directories(model_dir);
    ma.bos_token_id = CharTokenizer::kBosId;
    ma.pad_token_id = CharTokenizer::kPadId;
    ma.eos_token_ids = {CharTokenizer::kEosId};
    ma.max_position_embeddings = std::max(ma.max_position_embeddings, args.prompt + args.new_tokens);
    ma.torch_dtype = "bfloat16";
    auto m = rlpt::model::make_random_causal_lm(ma, 1, torch::kBFloat16);
    rlpt::model::save_pretrained(*m, model_dir.string());
    tok.save(model_dir.string());
    std::ofstream out(dir / "train.jsonl");
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<size_t> pick(0, charset.size() - 1);
    for (int64_t i = 0; i < args.prompts; ++i) {
        std::string p;
        for (int64_t c = 0; c < args.prompt; ++c) p += charset[pick(rng)];
        out << "{\"prompt\": \"" << p << "\", \"answer\": \"0\", \"data_source\": \"bench_gpu\"}\n";
    }
    RLPT_CHECK_KIND(IoError, out.good(), "bench_gpu: cannot write {}", (dir / "train.jsonl").string());
    std::printf("{\"kind\":\"grpo_data\",\"dir\":\"%s\",\"params\":%.0f,\"prompts\":%lld,\"prompt_chars\":%lld}\n",
                dir.c_str(), num_params(*m), static_cast<long long>(args.prompts), static_cast<long long>(args.prompt));
}

// Runs one measurement; a failure (out of memory, a failed check) becomes a JSON line
// {"kind": "error", "what": ..., "reason": ...} and the next measurement still runs.
template <class F>
bool measure(const char* what, const torch::Device& dev, F&& f) {
    try {
        f();
        return true;
    } catch (const std::exception& e) {
        std::string reason = e.what();
        reason = reason.substr(0, reason.find('\n'));
        std::replace_if(
            reason.begin(), reason.end(),
            [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; }, '\'');
        std::fprintf(stderr, "bench_gpu: %s failed: %s\n", what, e.what());
        std::printf("{\"kind\":\"error\",\"what\":\"%s\",\"reason\":\"%s\"}\n", what, reason.c_str());
        std::fflush(stdout);
        if (dev.is_cuda()) at::accelerator::emptyCache();
        return false;
    }
}

bool wants(const Args& a, const char* what) {
    return ("," + a.what + ",").find(std::string(",") + what + ",") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);  // freed large blocks go back at once: RSS follows the tensors
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
    try {
        const Args args = parse(argc, argv);
        if (args.threads > 0) torch::set_num_threads(static_cast<int>(args.threads));
        const auto ma = qwen_shape(args.model);
        if (!args.write_grpo.empty()) {
            write_grpo(args, ma);
            return 0;
        }
        RLPT_CHECK(args.device == "cpu" || torch::cuda::is_available(),
                   "bench_gpu: --device cuda but LibTorch sees no CUDA device (this build: {}); use --device cpu",
                   RLPT_TORCH_CUDA);
        RLPT_CHECK(args.prompt + args.new_tokens <= ma.max_position_embeddings &&
                       args.train_seq <= ma.max_position_embeddings,
                   "bench_gpu: sequences longer than the model's {} positions", ma.max_position_embeddings);
        const torch::Device dev = args.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
        const torch::Dtype dtype = rlpt::model::dtype_from_name(args.dtype);
        print_ceilings(dev, dtype, args.model, count_params(ma));
        bool ok = true;
        for (const auto& [what, run] :
             {std::pair{"rollout", &run_rollout}, std::pair{"logprob", &run_logprob}, std::pair{"train", &run_train}}) {
            if (wants(args, what)) ok = measure(what, dev, [&, run = run] { run(args, ma, dev, dtype); }) && ok;
        }
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gpu: %s\n", e.what());
        return 1;
    }
}
