#include "rlpt/model/chunked_head.h"

#include <algorithm>
#include <cmath>

#include "rlpt/core/error.h"
#include "rlpt/kernels/logprob.h"

namespace rlpt::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool float_or_bf16(const torch::Tensor& t) {
    return t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16;
}

// TF32 in cuBLAS while it lives (kTf32 on CUDA), the previous setting restored after.
class Tf32Scope {
  public:
    explicit Tf32Scope(bool on) : on_(on) {
        if (!on_) return;
        previous_ = at::globalContext().allowTF32CuBLAS();
        at::globalContext().setAllowTF32CuBLAS(true);
    }
    ~Tf32Scope() {
        if (on_) at::globalContext().setAllowTF32CuBLAS(previous_);
    }
    Tf32Scope(const Tf32Scope&) = delete;
    Tf32Scope& operator=(const Tf32Scope&) = delete;

  private:
    bool on_, previous_ = false;
};

// One chunk's fp32 logits: the same mm as CausalLM::local_logits_fp32 (matmul of 2-D operands is mm).
torch::Tensor chunk_logits(const torch::Tensor& hidden_op, const torch::Tensor& weight_op, HeadPrecision p) {
    return head_mm(hidden_op, weight_op.t(), p);
}

// out (float32 [M, N]) = a · b, or += a · b, at precision p (head_operand()s a and b).
void head_mm_into(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, HeadPrecision p, bool add) {
    if (a.scalar_type() == torch::kFloat32) {
        // The operand orders of autograd's mm backward (see the backward): kFp32 bit for bit.
        const Tf32Scope tf32(p == HeadPrecision::kTf32 && a.is_cuda());
        if (add) {
            out.addmm_(a, b);
        } else if (out.defined()) {
            torch::mm_out(out, a, b);
        } else {
            out = a.mm(b);
        }
        return;
    }
    auto prod = head_mm(a, b, p);  // bf16 operands on CUDA: float32 out
    if (add) {
        out.add_(prod);
    } else if (out.defined()) {
        out.copy_(prod);
    } else {
        out = prod;
    }
}

class ChunkedHeadFunction : public torch::autograd::Function<ChunkedHeadFunction> {
  public:
    // Outputs: logp, then entropy if with_entropy, then sum_pi_squared if with_spp (non-differentiable).
    static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& labels, double temperature, bool with_entropy, bool with_spp,
                                 int64_t rows, int64_t precision_id) {
        const auto precision = static_cast<HeadPrecision>(precision_id);
        const int64_t n = hidden.size(0);
        const auto opts = hidden.options().dtype(torch::kFloat32);
        auto logp = torch::empty({n}, opts), lse = torch::empty({n}, opts);
        torch::Tensor entropy = with_entropy ? torch::empty({n}, opts) : torch::Tensor();
        torch::Tensor spp = with_spp ? torch::empty({n}, opts) : torch::Tensor();
        {
            // Transient V·H·4 bytes for a bf16 head at kFp32 (V·H·2 at kBf16 on CUDA).
            const auto weight_op = head_operand(weight, precision);
            for (int64_t s = 0; s < n; s += rows) {
                const int64_t m = std::min(rows, n - s);
                auto logits = chunk_logits(head_operand(hidden.narrow(0, s, m), precision), weight_op, precision);
                kernels::logprob_forward_out(logits, labels.narrow(0, s, m), temperature, logp.narrow(0, s, m),
                                             with_entropy ? entropy.narrow(0, s, m) : torch::Tensor(),
                                             lse.narrow(0, s, m), /*labels_checked=*/true);
                if (with_spp) {
                    // Σ_v π_v² = exp(LSE(2z) − 2·LSE(z)), the formula (and ops) of the unchunked path.
                    auto z = logits / std::max(temperature, 1e-8);
                    spp.narrow(0, s, m).copy_(
                        torch::exp(torch::logsumexp(2.0 * z, -1) - 2.0 * torch::logsumexp(z, -1)));
                }
            }
        }
        ctx->save_for_backward({hidden, weight, labels, lse, entropy});
        ctx->saved_data["temperature"] = temperature;
        ctx->saved_data["rows"] = rows;
        ctx->saved_data["precision"] = precision_id;
        ctx->set_materialize_grads(false);
        variable_list out{logp};
        if (with_entropy) out.push_back(entropy);
        if (with_spp) {
            ctx->mark_non_differentiable({spp});
            out.push_back(spp);
        }
        return out;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const torch::Tensor &hidden = saved[0], &weight = saved[1], &labels = saved[2], &lse = saved[3],
                            &entropy = saved[4];
        const double temperature = ctx->saved_data["temperature"].toDouble();
        const int64_t rows = ctx->saved_data["rows"].toInt();
        const auto precision = static_cast<HeadPrecision>(ctx->saved_data["precision"].toInt());
        const torch::Tensor grad_logp = grads[0];
        // grads[1] is the entropy's when the forward computed it, else sum_pi_squared's (no gradient).
        const torch::Tensor grad_entropy = entropy.defined() && grads.size() > 1 ? grads[1] : torch::Tensor();
        const bool need_h = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
        variable_list out(8);
        if ((!grad_logp.defined() && !grad_entropy.defined()) || (!need_h && !need_w)) return out;

        const int64_t n = hidden.size(0), v = weight.size(0);
        const auto f32 = hidden.options().dtype(torch::kFloat32);
        const auto weight_op = head_operand(weight, precision);
        torch::Tensor grad_h = need_h ? torch::empty({n, hidden.size(1)}, f32) : torch::Tensor();
        torch::Tensor grad_w;  // fp32 [V, H], from the first chunk on
        torch::Tensor grad_logits_buf = torch::empty({std::min(rows, n), v}, f32);
        auto part = [](const torch::Tensor& t, int64_t s, int64_t m) {
            return t.defined() ? t.narrow(0, s, m) : torch::Tensor();
        };
        for (int64_t s = 0; s < n; s += rows) {
            const int64_t m = std::min(rows, n - s);
            const auto hidden_op = head_operand(hidden.narrow(0, s, m), precision);
            auto logits = chunk_logits(hidden_op, weight_op, precision);
            auto g = grad_logits_buf.narrow(0, 0, m);
            kernels::logprob_backward_out(logits, labels.narrow(0, s, m), lse.narrow(0, s, m),
                                          grad_entropy.defined() ? entropy.narrow(0, s, m) : torch::Tensor(),
                                          part(grad_logp, s, m), part(grad_entropy, s, m), temperature, g,
                                          /*labels_checked=*/true);
            logits = torch::Tensor();  // free before the gradient matmuls
            // The operand orders of autograd's mm backward for mm(h, W.t()) (mm_mat1/mat2_backward), so a
            // single chunk reproduces the unchunked gradients bit for bit (kFp32).
            const auto g_op = head_operand(g, precision);
            if (need_h) {
                auto grad_h_rows = grad_h.narrow(0, s, m);
                head_mm_into(grad_h_rows, g_op, weight_op, precision, /*add=*/false);
            }
            if (need_w) head_mm_into(grad_w, g_op.t(), hidden_op, precision, /*add=*/grad_w.defined());
        }
        if (need_h) out[0] = grad_h.to(hidden.scalar_type());
        if (need_w) out[1] = grad_w.defined() ? grad_w.to(weight.scalar_type()) : torch::zeros_like(weight);
        return out;
    }
};

}  // namespace

HeadPrecision head_precision_from_name(const std::string& name) {
    if (name == "fp32") return HeadPrecision::kFp32;
    if (name == "tf32") return HeadPrecision::kTf32;
    if (name == "bf16") return HeadPrecision::kBf16;
    RLPT_THROW(ValueError, "head precision '{}' is not one of fp32, tf32, bf16", name);
}

const char* head_precision_name(HeadPrecision p) {
    switch (p) {
        case HeadPrecision::kFp32: return "fp32";
        case HeadPrecision::kTf32: return "tf32";
        case HeadPrecision::kBf16: return "bf16";
    }
    return "?";
}

torch::Tensor head_operand(const torch::Tensor& t, HeadPrecision p) {
    if (p != HeadPrecision::kBf16) return t.to(torch::kFloat32);
    const auto b = t.to(torch::kBFloat16);
    return t.is_cuda() ? b : b.to(torch::kFloat32);
}

torch::Tensor head_mm(const torch::Tensor& a, const torch::Tensor& b, HeadPrecision p) {
    if (a.scalar_type() == torch::kBFloat16) return at::mm(a, b, torch::kFloat32);  // CUDA: kBf16's operands
    const Tf32Scope tf32(p == HeadPrecision::kTf32 && a.is_cuda());
    return torch::mm(a, b);
}

int64_t head_chunk_rows(int64_t n, int64_t v, int64_t budget_bytes) {
    RLPT_CHECK(budget_bytes > 0, "head_chunk_rows: budget_bytes must be > 0, got {}", budget_bytes);
    RLPT_CHECK(v >= 1 && n >= 0, "head_chunk_rows: need V >= 1 and N >= 0, got V = {}, N = {}", v, n);
    const int64_t rows = std::max<int64_t>(1, budget_bytes / (v * int64_t{4}));
    return std::max<int64_t>(1, std::min(rows, n));
}

ChunkedHeadLogProbs chunked_head_logprob(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& labels, const ChunkedHeadOptions& options) {
    RLPT_CHECK(hidden.defined() && hidden.dim() == 2 && float_or_bf16(hidden),
               "chunked_head_logprob: hidden must be [N, H] float32|bfloat16, got {} {}",
               hidden.defined() ? c10::str(hidden.sizes()) : "undefined",
               hidden.defined() ? c10::toString(hidden.scalar_type()) : "");
    RLPT_CHECK(weight.defined() && weight.dim() == 2 && float_or_bf16(weight) && weight.size(1) == hidden.size(1),
               "chunked_head_logprob: weight must be [V, H = {}] float32|bfloat16, got {}", hidden.size(1),
               weight.defined() ? c10::str(weight.sizes()) : "undefined");
    RLPT_CHECK(labels.defined() && labels.dim() == 1 && labels.size(0) == hidden.size(0) &&
                   labels.scalar_type() == torch::kInt64,
               "chunked_head_logprob: labels must be [N = {}] int64, got {}", hidden.size(0),
               labels.defined() ? c10::str(labels.sizes()) : "undefined");
    RLPT_CHECK(weight.device() == hidden.device() && labels.device() == hidden.device(),
               "chunked_head_logprob: hidden ({}), weight ({}) and labels ({}) must be on one device",
               hidden.device().str(), weight.device().str(), labels.device().str());
    RLPT_CHECK(std::isfinite(options.temperature) && options.temperature > 0.0,
               "chunked_head_logprob: temperature must be finite and > 0, got {}", options.temperature);
    RLPT_CHECK(options.chunk_rows >= 0, "chunked_head_logprob: chunk_rows must be >= 0, got {}", options.chunk_rows);
    const int64_t n = hidden.size(0);
    const int64_t rows = options.chunk_rows > 0 ? std::max<int64_t>(1, std::min(options.chunk_rows, n))
                                                : head_chunk_rows(n, weight.size(0), options.budget_bytes);
    kernels::check_label_range(labels, weight.size(0));  // once per call: the chunks skip it
    const auto outs =
        ChunkedHeadFunction::apply(hidden, weight, labels, options.temperature, options.with_entropy,
                                   options.with_sum_pi_squared, rows, static_cast<int64_t>(options.precision));
    ChunkedHeadLogProbs res;
    res.logp = outs[0];
    size_t k = 1;
    if (options.with_entropy) res.entropy = outs[k++];
    if (options.with_sum_pi_squared) res.sum_pi_squared = outs[k];
    return res;
}

}  // namespace rlpt::model
