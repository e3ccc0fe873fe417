#pragma once
// Argument checks shared by the algorithm implementations (private to src/algo).

#include <torch/torch.h>

#include <string>

#include "rlpt/core/error.h"

namespace rlpt::algo::detail {

inline std::string shape_str(const torch::Tensor& t) {
    if (!t.defined()) return "<undefined>";
    std::string s = "[";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
    return s + "]";
}

// `t` must be defined and floating point.
inline void check_float(const torch::Tensor& t, const char* where, const char* name) {
    RLPT_CHECK(t.defined(), "{}: tensor '{}' is required but was not given", where, name);
    RLPT_CHECK(t.is_floating_point(), "{}: tensor '{}' must be floating point, got {}", where, name,
               std::string(c10::toString(t.scalar_type())));
}

// `t` must be a defined B×T tensor.
inline void check_2d(const torch::Tensor& t, const char* where, const char* name) {
    RLPT_CHECK(t.defined(), "{}: tensor '{}' is required but was not given", where, name);
    RLPT_CHECK(t.dim() == 2, "{}: tensor '{}' must be 2-D (B x T), got shape {}", where, name, shape_str(t));
}

// `b` must be on `a`'s device: the inputs of one call meet in the same kernels, all on the host
// or all on one GPU (torch's own error names neither the tensors nor the function).
inline void check_same_device(const torch::Tensor& a, const char* a_name, const torch::Tensor& b, const char* b_name,
                              const char* where) {
    RLPT_CHECK(a.device() == b.device(), "{}: '{}' is on {} but '{}' is on {} (the inputs must be on one device)",
               where, b_name, b.device().str(), a_name, a.device().str());
}

// `b` must be defined, shaped like `a` and on `a`'s device.
inline void check_like(const torch::Tensor& a, const char* a_name, const torch::Tensor& b, const char* b_name,
                       const char* where) {
    RLPT_CHECK(b.defined(), "{}: tensor '{}' is required but was not given", where, b_name);
    RLPT_CHECK(a.sizes() == b.sizes(), "{}: '{}' has shape {} but '{}' has shape {}", where, a_name, shape_str(a),
               b_name, shape_str(b));
    check_same_device(a, a_name, b, b_name, where);
}

// Mask as a tensor of `like`'s dtype (bool/int masks become 0/1).
inline torch::Tensor mask_as(const torch::Tensor& mask, const torch::Tensor& like) {
    return mask.to(like.scalar_type());
}

}  // namespace rlpt::algo::detail
