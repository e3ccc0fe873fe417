// Tensor-level glue of the fused log-prob / entropy kernels: argument checks, dispatch to the CPU
// reference or the CUDA launchers, and the autograd Function.

#include "rlpt/kernels/logprob.h"

#include <cmath>

#include "logprob_cuda.h"
#include "logprob_ref.h"
#include "rlpt/build_config.h"
#include "rlpt/core/error.h"

#if RLPT_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace rlpt::kernels {
namespace {

// ---- CUDA dispatch: the one place that depends on RLPT_HAVE_CUDA -----------------------------
// (logprob_cuda.h only declares the launchers; their definitions exist with CUDA only.)
#if RLPT_HAVE_CUDA
// Each launch makes the tensors' device current for its duration (c10::cuda::CUDAGuard): the
// autograd engine may run the backward on a thread whose current device is another, and the
// guard restores the previous device without creating a context on it.
template <typename T>
const T* ptr_or_null(const torch::Tensor& t) {
    return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

void forward_cuda(const torch::Tensor& x, const torch::Tensor& y, float inv_t, float* logp, float* entropy,
                  float* lse) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int device = x.device().index();
    if (x.scalar_type() == torch::kFloat) {
        detail::logprob_forward_cuda(device, x.data_ptr<float>(), y.data_ptr<int64_t>(), x.size(0), x.size(1), inv_t,
                                     logp, entropy, lse);
    } else {
        detail::logprob_forward_cuda(device, static_cast<const uint16_t*>(x.data_ptr()), y.data_ptr<int64_t>(),
                                     x.size(0), x.size(1), inv_t, logp, entropy, lse);
    }
}

void backward_cuda(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& lse,
                   const torch::Tensor& entropy, const torch::Tensor& grad_logp, const torch::Tensor& grad_entropy,
                   float inv_t, const torch::Tensor& out) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int device = x.device().index();
    if (x.scalar_type() == torch::kFloat) {
        detail::logprob_backward_cuda(device, x.data_ptr<float>(), y.data_ptr<int64_t>(), lse.data_ptr<float>(),
                                      ptr_or_null<float>(entropy), ptr_or_null<float>(grad_logp),
                                      ptr_or_null<float>(grad_entropy), x.size(0), x.size(1), inv_t,
                                      out.data_ptr<float>());
    } else {
        detail::logprob_backward_cuda(device, static_cast<const uint16_t*>(x.data_ptr()), y.data_ptr<int64_t>(),
                                      lse.data_ptr<float>(), ptr_or_null<float>(entropy), ptr_or_null<float>(grad_logp),
                                      ptr_or_null<float>(grad_entropy), x.size(0), x.size(1), inv_t,
                                      static_cast<uint16_t*>(out.data_ptr()));
    }
}
#else
[[noreturn]] void no_cuda() {
    RLPT_THROW(ValueError, "logprob: got CUDA tensors, but this rlpt build has no CUDA kernels "
                           "(configured without CUDA: RLPT_HAVE_CUDA=0)");
}
void forward_cuda(const torch::Tensor&, const torch::Tensor&, float, float*, float*, float*) { no_cuda(); }
void backward_cuda(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                   const torch::Tensor&, const torch::Tensor&, float, const torch::Tensor&) {
    no_cuda();
}
#endif
// -----------------------------------------------------------------------------------------------

std::string shape_of(const torch::Tensor& t) { return c10::str(t.sizes()); }

struct Dims {
    int64_t n;
    int64_t v;
};

// Validates logits/labels/temperature (everything but the label range) and returns [N, V].
Dims check_inputs(const torch::Tensor& logits, const torch::Tensor& labels, double temperature) {
    RLPT_CHECK(logits.defined(), "logprob: logits tensor is undefined");
    RLPT_CHECK(labels.defined(), "logprob: labels tensor is undefined");
    RLPT_CHECK(logits.dim() == 2, "logprob: logits must be 2-D [N, V], got shape {}", shape_of(logits));
    RLPT_CHECK(logits.scalar_type() == torch::kFloat || logits.scalar_type() == torch::kBFloat16,
               "logprob: logits dtype must be float32 or bfloat16, got {}", c10::toString(logits.scalar_type()));
    RLPT_CHECK(logits.is_cpu() || logits.is_cuda(), "logprob: logits on unsupported device {}", logits.device().str());
    const int64_t n = logits.size(0);
    const int64_t v = logits.size(1);
    RLPT_CHECK(v >= 1, "logprob: vocabulary size V must be >= 1, got logits shape {}", shape_of(logits));
    RLPT_CHECK(labels.scalar_type() == torch::kLong, "logprob: labels dtype must be int64, got {}",
               c10::toString(labels.scalar_type()));
    RLPT_CHECK(labels.dim() == 1 && labels.size(0) == n,
               "logprob: labels must be [N] = [{}] to match logits {}, got shape {}", n, shape_of(logits),
               shape_of(labels));
    RLPT_CHECK(labels.device() == logits.device(), "logprob: labels on {} but logits on {}", labels.device().str(),
               logits.device().str());
    RLPT_CHECK(std::isfinite(temperature) && temperature > 0.0, "logprob: temperature must be finite and > 0, got {}",
               temperature);
    return {n, v};
}

// An optional [N] float32 tensor (grad or saved value): undefined stays undefined.
torch::Tensor check_vec(const char* what, const torch::Tensor& t, int64_t n, const torch::Device& device) {
    if (!t.defined()) return t;
    RLPT_CHECK(t.scalar_type() == torch::kFloat, "logprob: {} must be float32, got {}", what,
               c10::toString(t.scalar_type()));
    RLPT_CHECK(t.dim() == 1 && t.size(0) == n, "logprob: {} must be [N] = [{}], got shape {}", what, n, shape_of(t));
    RLPT_CHECK(t.device() == device, "logprob: {} on {} but logits on {}", what, t.device().str(), device.str());
    return t.contiguous();
}

void check_out(const char* what, const torch::Tensor& t, torch::IntArrayRef sizes, torch::ScalarType dtype,
               const torch::Device& device) {
    RLPT_CHECK(t.defined(), "logprob: output {} is undefined", what);
    RLPT_CHECK(t.sizes() == sizes, "logprob: output {} must have shape {}, got {}", what, c10::str(sizes), shape_of(t));
    RLPT_CHECK(t.scalar_type() == dtype, "logprob: output {} must be {}, got {}", what, c10::toString(dtype),
               c10::toString(t.scalar_type()));
    RLPT_CHECK(t.device() == device, "logprob: output {} on {} but logits on {}", what, t.device().str(), device.str());
    RLPT_CHECK(t.is_contiguous(), "logprob: output {} must be contiguous", what);
}

}  // namespace

// Every label must index the vocabulary; the kernels do not bounds-check.
void check_label_range(const torch::Tensor& labels, int64_t v) {
    const int64_t n = labels.numel();
    if (n == 0) return;
    if (labels.is_cpu()) {
        const int64_t* y = labels.data_ptr<int64_t>();
        for (int64_t i = 0; i < n; ++i) {
            RLPT_CHECK(y[i] >= 0 && y[i] < v, "logprob: labels[{}] = {} is outside [0, {})", i, y[i], v);
        }
        return;
    }
    const torch::Tensor bad = labels.lt(0).logical_or(labels.ge(v));
    if (bad.any().item<bool>()) {
        const int64_t i = bad.nonzero().select(1, 0)[0].item<int64_t>();
        RLPT_THROW(ValueError, "logprob: labels[{}] = {} is outside [0, {})", i, labels[i].item<int64_t>(), v);
    }
}

void logprob_forward_out(const torch::Tensor& logits, const torch::Tensor& labels, double temperature,
                         const torch::Tensor& logp_out, const torch::Tensor& entropy_out, const torch::Tensor& lse_out,
                         bool labels_checked) {
    const Dims d = check_inputs(logits, labels, temperature);
    check_out("logp", logp_out, {d.n}, torch::kFloat, logits.device());
    check_out("lse", lse_out, {d.n}, torch::kFloat, logits.device());
    if (entropy_out.defined()) {
        check_out("entropy", entropy_out, {d.n}, torch::kFloat, logits.device());
    }
    const torch::Tensor y = labels.contiguous();
    if (!labels_checked) check_label_range(y, d.v);
    if (d.n == 0) return;
    const torch::Tensor x = logits.contiguous();
    const float inv_t = float(1.0 / temperature);
    float* logp = logp_out.data_ptr<float>();
    float* entropy = entropy_out.defined() ? entropy_out.data_ptr<float>() : nullptr;
    float* lse = lse_out.data_ptr<float>();
    if (x.is_cuda()) {
        forward_cuda(x, y, inv_t, logp, entropy, lse);
    } else if (x.scalar_type() == torch::kFloat) {
        detail::logprob_forward_ref(x.data_ptr<float>(), y.data_ptr<int64_t>(), d.n, d.v, inv_t, logp, entropy, lse);
    } else {
        detail::logprob_forward_ref(static_cast<const uint16_t*>(x.data_ptr()), y.data_ptr<int64_t>(), d.n, d.v, inv_t,
                                    logp, entropy, lse);
    }
}

LogProbForward logprob_forward(const torch::Tensor& logits, const torch::Tensor& labels, double temperature,
                               bool with_entropy) {
    check_inputs(logits, labels, temperature);
    const auto opts = logits.options().dtype(torch::kFloat);
    const int64_t n = logits.size(0);
    LogProbForward out;
    out.logp = torch::empty({n}, opts);
    out.lse = torch::empty({n}, opts);
    if (with_entropy) out.entropy = torch::empty({n}, opts);
    logprob_forward_out(logits, labels, temperature, out.logp, out.entropy, out.lse);
    return out;
}

void logprob_backward_out(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& lse,
                          const torch::Tensor& entropy, const torch::Tensor& grad_logp,
                          const torch::Tensor& grad_entropy, double temperature, const torch::Tensor& grad_logits_out,
                          bool labels_checked) {
    const Dims d = check_inputs(logits, labels, temperature);
    const torch::Device dev = logits.device();
    RLPT_CHECK(lse.defined(), "logprob backward: lse (from the forward) is undefined");
    RLPT_CHECK(!grad_entropy.defined() || entropy.defined(),
               "logprob backward: grad_entropy given but the forward's entropy is undefined "
               "(forward ran with with_entropy=false)");
    const torch::Tensor lse_c = check_vec("lse", lse, d.n, dev);
    const torch::Tensor gl = check_vec("grad_logp", grad_logp, d.n, dev);
    const torch::Tensor gh = check_vec("grad_entropy", grad_entropy, d.n, dev);
    const torch::Tensor h = gh.defined() ? check_vec("entropy", entropy, d.n, dev) : torch::Tensor();
    check_out("grad_logits", grad_logits_out, {d.n, d.v}, logits.scalar_type(), dev);
    const torch::Tensor y = labels.contiguous();
    if (!labels_checked) check_label_range(y, d.v);
    if (d.n == 0) return;
    const torch::Tensor x = logits.contiguous();
    const float inv_t = float(1.0 / temperature);
    if (x.is_cuda()) {
        backward_cuda(x, y, lse_c, h, gl, gh, inv_t, grad_logits_out);
        return;
    }
    const float* h_ptr = h.defined() ? h.data_ptr<float>() : nullptr;
    const float* gl_ptr = gl.defined() ? gl.data_ptr<float>() : nullptr;
    const float* gh_ptr = gh.defined() ? gh.data_ptr<float>() : nullptr;
    if (x.scalar_type() == torch::kFloat) {
        detail::logprob_backward_ref(x.data_ptr<float>(), y.data_ptr<int64_t>(), lse_c.data_ptr<float>(), h_ptr, gl_ptr,
                                     gh_ptr, d.n, d.v, inv_t, grad_logits_out.data_ptr<float>());
    } else {
        detail::logprob_backward_ref(static_cast<const uint16_t*>(x.data_ptr()), y.data_ptr<int64_t>(),
                                     lse_c.data_ptr<float>(), h_ptr, gl_ptr, gh_ptr, d.n, d.v, inv_t,
                                     static_cast<uint16_t*>(grad_logits_out.data_ptr()));
    }
}

torch::Tensor logprob_backward(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& lse,
                               const torch::Tensor& entropy, const torch::Tensor& grad_logp,
                               const torch::Tensor& grad_entropy, double temperature) {
    check_inputs(logits, labels, temperature);
    torch::Tensor out = torch::empty(logits.sizes(), logits.options());
    logprob_backward_out(logits, labels, lse, entropy, grad_logp, grad_entropy, temperature, out);
    return out;
}

namespace {

class LogProbEntropyFunction : public torch::autograd::Function<LogProbEntropyFunction> {
  public:
    static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                                                  const torch::Tensor& labels, double temperature, bool with_entropy) {
        LogProbForward f = logprob_forward(logits, labels, temperature, with_entropy);
        ctx->save_for_backward({logits, labels, f.lse, f.entropy});
        ctx->saved_data["temperature"] = temperature;
        ctx->set_materialize_grads(false);
        if (with_entropy) return {f.logp, f.entropy};
        return {f.logp};
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const double temperature = ctx->saved_data["temperature"].toDouble();
        const torch::Tensor& gl = grads[0];
        const torch::Tensor gh = grads.size() > 1 ? grads[1] : torch::Tensor();
        torch::Tensor grad_logits;
        if (gl.defined() || gh.defined()) {
            grad_logits = logprob_backward(saved[0], saved[1], saved[2], saved[3], gl, gh, temperature);
        }
        return {grad_logits, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
};

}  // namespace

LogProbEntropy logprob_entropy(const torch::Tensor& logits, const torch::Tensor& labels, double temperature,
                               bool with_entropy) {
    RLPT_CHECK(logits.defined() && labels.defined(), "logprob: logits or labels is undefined");
    RLPT_CHECK(logits.dim() >= 1, "logprob: logits must be [..., V], got a 0-dim tensor");
    const int64_t v = logits.size(-1);
    RLPT_CHECK(v >= 1, "logprob: vocabulary size V must be >= 1, got logits shape {}", shape_of(logits));
    RLPT_CHECK(labels.sizes() == logits.sizes().slice(0, logits.dim() - 1),
               "logprob: labels shape {} must equal the leading dims of logits {}", shape_of(labels), shape_of(logits));
    const auto outs =
        LogProbEntropyFunction::apply(logits.reshape({-1, v}), labels.reshape({-1}), temperature, with_entropy);
    LogProbEntropy r;
    r.logp = outs[0].view(labels.sizes());
    if (with_entropy) r.entropy = outs[1].view(labels.sizes());
    return r;
}

bool logprob_cuda_built() { return RLPT_HAVE_CUDA != 0; }

}  // namespace rlpt::kernels
