// Learning-rate schedules, as verl's get_constant_schedule_with_warmup and
// get_cosine_schedule_with_warmup (verl/utils/torch_functional.py) compute them for LambdaLR:
// the lr of scheduler step k (0-based) is lr · lambda(k).
//   constant: k < warmup ? k / max(1, warmup) : 1
//   cosine:   k < warmup ? min_lr_ratio + (1 − min_lr_ratio) · k / max(1, warmup)
//             else max(min_lr_ratio, min_lr_ratio + (1 − min_lr_ratio) · (1 + cos(2π · num_cycles · progress)) / 2)
//             progress = min(1, (k − warmup) / max(1, total_steps − warmup)).
// The constant schedule's warm-up starts at 0, the cosine one's at min_lr_ratio (verl's choice).
// Two deliberate differences from verl, both outside its intended use: (1) progress is capped at 1,
// so steps past total_steps hold the final lr (verl's cosine climbs back up there); (2) the
// cosine is written min + (1 − min)·(1 + x)/2 instead of verl's coef·x + intercept (equal up to
// rounding), so that the last step's lr is exactly lr · min_lr_ratio.
#include <cmath>

#include "rlpt/core/error.h"
#include "rlpt/engine/train_engine.h"

namespace rlpt::engine {

void validate_optim_options(const OptimOptions& o) {
    RLPT_CHECK(std::isfinite(o.lr) && o.lr >= 0, "optim: lr must be finite and >= 0, got {}", o.lr);
    RLPT_CHECK(o.beta1 >= 0 && o.beta1 < 1, "optim: beta1 must be in [0, 1), got {}", o.beta1);
    RLPT_CHECK(o.beta2 >= 0 && o.beta2 < 1, "optim: beta2 must be in [0, 1), got {}", o.beta2);
    RLPT_CHECK(std::isfinite(o.eps) && o.eps > 0, "optim: eps must be finite and > 0, got {}", o.eps);
    RLPT_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "optim: weight_decay must be >= 0, got {}",
               o.weight_decay);
    RLPT_CHECK(o.warmup_steps >= 0, "optim: warmup_steps must be >= 0, got {}", o.warmup_steps);
    RLPT_CHECK(o.scheduler == "constant" || o.scheduler == "cosine",
               "optim: scheduler must be 'constant' or 'cosine', got '{}'", o.scheduler);
    RLPT_CHECK(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1, "optim: min_lr_ratio must be in [0, 1], got {}",
               o.min_lr_ratio);
    RLPT_CHECK(std::isfinite(o.num_cycles) && o.num_cycles >= 0, "optim: num_cycles must be >= 0, got {}",
               o.num_cycles);
    RLPT_CHECK(o.total_steps >= 1, "optim: total_steps must be >= 1, got {}", o.total_steps);
    RLPT_CHECK(std::isfinite(o.clip_grad), "optim: clip_grad must be finite, got {}", o.clip_grad);
    RLPT_CHECK(o.zero_stage >= 0 && o.zero_stage <= 3, "optim: zero_stage must be 0, 1, 2 or 3, got {}", o.zero_stage);
    RLPT_CHECK(o.grad_bucket_bytes >= 4, "optim: grad_bucket_bytes must be >= 4, got {}", o.grad_bucket_bytes);
}

double scheduled_lr(const OptimOptions& o, int64_t step) {
    validate_optim_options(o);
    RLPT_CHECK(step >= 0, "scheduled_lr: step must be >= 0, got {}", step);
    const double k = static_cast<double>(step);
    const double warmup = static_cast<double>(o.warmup_steps);
    double factor = 1.0;
    if (o.scheduler == "constant") {
        if (step < o.warmup_steps) factor = k / std::max(1.0, warmup);
    } else {
        const double r = o.min_lr_ratio;
        if (step < o.warmup_steps) {
            factor = r + (1.0 - r) * (k / std::max(1.0, warmup));
        } else {
            const double progress =
                std::min(1.0, (k - warmup) / std::max(1.0, static_cast<double>(o.total_steps) - warmup));
            const double x = std::cos(M_PI * o.num_cycles * 2.0 * progress);
            factor = std::max(r, r + (1.0 - r) * 0.5 * (1.0 + x));
        }
    }
    return o.lr * factor;
}

}  // namespace rlpt::engine
