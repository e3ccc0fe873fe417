#pragma once
// Shared helpers for the TrainEngine / policy-ops unit tests.
#include <gtest/gtest.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <vector>

#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/transformer.h"

namespace rlpt::engine::testing {

// A 2x3 matrix and a 3-vector: the smallest module with a decayed and an undecayed parameter.
struct TinyNet : torch::nn::Module {
    torch::Tensor w, b;
    explicit TinyNet(torch::Dtype dtype = torch::kFloat32) {
        w = register_parameter("w", torch::tensor({{1.0, -2.0, 0.5}, {0.25, 3.0, -1.0}}).to(dtype));
        b = register_parameter("b", torch::tensor({0.5, -0.5, 2.0}).to(dtype));
    }
    // Backward of sum(w * gw) + sum(b * gb): the gradients are exactly gw and gb.
    void set_grads(const torch::Tensor& gw, const torch::Tensor& gb) {
        ((w * gw.to(w.scalar_type())).sum() + (b * gb.to(b.scalar_type())).sum()).backward();
    }
};

// AdamW in double, one element vector at a time: the hand-written reference update.
struct RefAdam {
    std::vector<double> p, m, v;
    explicit RefAdam(std::vector<double> p0) : p(std::move(p0)), m(p.size(), 0.0), v(p.size(), 0.0) {}
    void step(const std::vector<double>& g, double lr, double b1, double b2, double eps, double wd, int step,
              double scale = 1.0) {
        for (size_t i = 0; i < p.size(); ++i) {
            const double gi = g[i] * scale;
            p[i] *= 1.0 - lr * wd;
            m[i] = b1 * m[i] + (1 - b1) * gi;
            v[i] = b2 * v[i] + (1 - b2) * gi * gi;
            const double mhat = m[i] / (1 - std::pow(b1, step));
            const double vhat = v[i] / (1 - std::pow(b2, step));
            p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
        }
    }
};

inline std::vector<double> to_vec(const torch::Tensor& t) {
    auto c = t.detach().to(torch::kFloat64).contiguous().view(-1);
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

inline model::ModelArgs tiny_args() {
    auto a = model::tiny_model_args(model::ModelFamily::kQwen2, 20);
    a.hidden_size = 32;
    a.intermediate_size = 48;
    a.num_attention_heads = 4;
    a.num_key_value_heads = 2;
    a.head_dim = 8;
    a.validate();
    return a;
}

// A rollout-shaped batch: left-padded prompts of width P, right-padded responses of width R.
inline SequenceBatch make_sequences(int64_t b, int64_t p, int64_t r, int64_t vocab, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    SequenceBatch s;
    s.input_ids = torch::randint(1, vocab, {b, p + r}, gen, torch::kInt64);
    s.attention_mask = torch::ones({b, p + r}, torch::kInt64);
    for (int64_t i = 0; i < b; ++i) {
        const int64_t pad_left = i % std::max<int64_t>(1, p - 1);  // prompts of varying length
        const int64_t pad_right = (i * 3) % r;                     // responses of varying length
        if (pad_left > 0) s.attention_mask[i].narrow(0, 0, pad_left).zero_();
        if (pad_right > 0) s.attention_mask[i].narrow(0, p + r - pad_right, pad_right).zero_();
    }
    s.input_ids.masked_fill_(s.attention_mask == 0, 0);
    s.position_ids = (s.attention_mask.cumsum(1) - 1).clamp_min(0);
    s.response_length = r;
    return s;
}

inline bool bitwise_equal(torch::nn::Module& a, torch::nn::Module& b) {
    auto pa = a.named_parameters(), pb = b.named_parameters();
    if (pa.size() != pb.size()) return false;
    for (const auto& item : pa) {
        const auto& other = pb[item.key()];
        if (!torch::equal(item.value(), other)) {
            ADD_FAILURE() << "parameter " << item.key() << " differs";
            return false;
        }
    }
    return true;
}

}  // namespace rlpt::engine::testing
