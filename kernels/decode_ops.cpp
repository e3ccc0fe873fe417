// Element-wise decode-step kernels (rlpt/kernels/decode_ops.h): tensor checks and the loops.

#include "rlpt/kernels/decode_ops.h"

#include <fmt/ranges.h>

#include <cmath>

#include "decode_ops_ref.h"
#include "rlpt/core/error.h"

namespace rlpt::kernels {
namespace {

bool float_rows(const torch::Tensor& t, int64_t cols) {
    return t.defined() && t.dim() == 2 && t.scalar_type() == torch::kFloat32 && t.is_cpu() && t.size(1) == cols &&
           (cols <= 1 || t.stride(1) == 1) && (t.size(0) <= 1 || t.stride(0) >= cols);
}

int64_t row_stride(const torch::Tensor& t) { return t.size(0) > 1 ? t.stride(0) : t.size(1); }

void check_norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& out) {
    const int64_t h = x.defined() && x.dim() == 2 ? x.size(1) : -1;
    RLPT_CHECK(float_rows(x, h) && w.defined() && w.dim() == 1 && w.size(0) == h && w.is_contiguous() &&
                   w.scalar_type() == torch::kFloat32 && w.is_cpu() && float_rows(out, h) && out.size(0) == x.size(0),
               "rms_norm_into: x and out must be float32 CPU [M, H] with contiguous rows and w [H] float32, got x {} "
               "w {} out {}",
               x.defined() ? x.sizes() : torch::IntArrayRef{}, w.defined() ? w.sizes() : torch::IntArrayRef{},
               out.defined() ? out.sizes() : torch::IntArrayRef{});
}

void check_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, int64_t hd) {
    const int64_t width = x.defined() && x.dim() == 2 ? x.size(1) : -1;
    RLPT_CHECK(hd > 0 && hd % 2 == 0 && width >= 0 && width % hd == 0 && float_rows(x, width) && float_rows(cos, hd) &&
                   float_rows(sin, hd) && cos.size(0) == x.size(0) && sin.size(0) == x.size(0),
               "rotary_inplace: x must be float32 CPU [M, heads * {}] and cos, sin [M, {}] (head_dim even), got x {} "
               "cos {} sin {}",
               hd, hd, x.defined() ? x.sizes() : torch::IntArrayRef{},
               cos.defined() ? cos.sizes() : torch::IntArrayRef{}, sin.defined() ? sin.sizes() : torch::IntArrayRef{});
}

}  // namespace

void rms_norm_into(const torch::Tensor& x, const torch::Tensor& w, double eps, const torch::Tensor& out) {
    check_norm(x, w, out);
    const int64_t m = x.size(0), h = x.size(1), ldx = row_stride(x), ldo = row_stride(out);
    const float* wp = w.data_ptr<float>();
    for (int64_t i = 0; i < m; ++i) {
        const float* xr = x.data_ptr<float>() + i * ldx;
        float* o = out.data_ptr<float>() + i * ldo;
        double acc[8] = {};
        int64_t e = 0;
        for (; e + 8 <= h; e += 8)
            for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(xr[e + l]) * xr[e + l];
        double ss = 0;
        for (; e < h; ++e) ss += static_cast<double>(xr[e]) * xr[e];
        for (double a : acc) ss += a;
        const auto r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
        for (e = 0; e < h; ++e) o[e] = wp[e] * (xr[e] * r);
    }
}

void rms_norm_into_reference(const torch::Tensor& x, const torch::Tensor& w, double eps, const torch::Tensor& out) {
    check_norm(x, w, out);
    detail::rms_norm_ref(x.data_ptr<float>(), row_stride(x), w.data_ptr<float>(), eps, x.size(0), x.size(1),
                         out.data_ptr<float>(), row_stride(out));
}

void rotary_inplace(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, int64_t head_dim) {
    check_rotary(x, cos, sin, head_dim);
    const int64_t m = x.size(0), width = x.size(1), half = head_dim / 2, ldx = row_stride(x);
    for (int64_t i = 0; i < m; ++i) {
        const float* c = cos.data_ptr<float>() + i * row_stride(cos);
        const float* s = sin.data_ptr<float>() + i * row_stride(sin);
        for (int64_t h0 = 0; h0 < width; h0 += head_dim) {
            float* v = x.data_ptr<float>() + i * ldx + h0;
            for (int64_t e = 0; e < half; ++e) {
                const float a = v[e], b = v[e + half];
                // x * cos + rotate_half(x) * sin, each product rounded as LibTorch rounds it.
                const float lo = a * c[e], lo_rot = -b * s[e];
                const float hi = b * c[e + half], hi_rot = a * s[e + half];
                v[e] = lo + lo_rot;
                v[e + half] = hi + hi_rot;
            }
        }
    }
}

void rotary_inplace_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                              int64_t head_dim) {
    check_rotary(x, cos, sin, head_dim);
    detail::rotary_ref(x.data_ptr<float>(), row_stride(x), x.size(0), x.size(1), cos.data_ptr<float>(), row_stride(cos),
                       sin.data_ptr<float>(), row_stride(sin), head_dim);
}

}  // namespace rlpt::kernels
