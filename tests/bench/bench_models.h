#pragma once
// Models the benchmarks share (built in code, random weights, no download).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "rlpt/core/error.h"
#include "rlpt/model/model_config.h"

namespace rlpt::bench {

// CPU time of the whole process (all threads), seconds.
inline double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Milliseconds of f(): one warm-up call, then the median of `iters` timed calls.
template <class F>
double median_ms(int iters, F&& f) {
    f();
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// ~100M Llama-style model: hidden 768, 12 layers, 12 heads (MHA), SwiGLU 2048, vocab 32000, tied
// embeddings, RMSNorm, RoPE (bench_train, bench_tp).
inline model::ModelArgs llama_100m() {
    auto a = model::tiny_model_args(model::ModelFamily::kLlama, 32000);
    a.hidden_size = 768;
    a.num_hidden_layers = 12;
    a.num_attention_heads = 12;
    a.num_key_value_heads = 12;
    a.head_dim = 64;
    a.intermediate_size = 2048;
    a.max_position_embeddings = 2048;
    a.tie_word_embeddings = true;
    a.validate();
    return a;
}

// A small Llama-style model for rollout workloads (bench_rollout, bench_agent): 4 heads (2 KV
// heads), SwiGLU 11/4 x hidden, HF's init scale 0.02 (near-uniform next-token distributions).
inline model::ModelArgs small_llama(int64_t vocab, int64_t hidden, int64_t layers, int64_t max_positions) {
    auto a = model::tiny_model_args(model::ModelFamily::kLlama, vocab);
    a.hidden_size = hidden;
    a.num_hidden_layers = layers;
    a.num_attention_heads = 4;
    a.num_key_value_heads = 2;
    a.head_dim = hidden / 4;
    a.intermediate_size = hidden * 11 / 4;
    a.max_position_embeddings = max_positions;
    a.initializer_range = 0.02;
    a.validate();
    return a;
}

// Reads "--name value" pairs of integer options into the listed fields (argv[1..]); ValueError
// naming `program` and the option for an unknown name.
inline void parse_int_options(int argc, char** argv, const char* program,
                              std::initializer_list<std::pair<const char*, int64_t*>> options) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        int64_t* field = nullptr;
        for (const auto& [name, f] : options)
            if (k == name) field = f;
        if (field == nullptr) RLPT_THROW(ValueError, "{}: unknown option {}", program, k);
        *field = std::stoll(argv[i + 1]);
    }
}

}  // namespace rlpt::bench
