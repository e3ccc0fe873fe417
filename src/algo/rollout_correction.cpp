#include "rlpt/algo/rollout_correction.h"

#include <cmath>

#include "algo/checks.h"

namespace rlpt::algo {
namespace {

using torch::Tensor;
constexpr double kSafetyBound = 20.0;  // verl's SAFETY_BOUND: exponents clamped to [-20, 20]
constexpr const char* kWhere = "rollout_correction";

double num(const Tensor& t) { return t.item<double>(); }
// Masked mean over the whole batch (verl's masked_mean, +1e-8 in the count).
double masked_avg(const Tensor& x, const Tensor& m) { return num((x * m).sum() / (m.sum() + 1e-8)); }
// Per-row masked mean [B]; an empty row gives 0.
Tensor row_mean(const Tensor& x, const Tensor& m) { return (x * m).sum(1) / (m.sum(1) + 1e-8); }
double unbiased_std(const Tensor& v) { return v.numel() > 1 ? num(v.std(/*unbiased=*/true)) : 0.0; }
double mean_of(const Tensor& b) { return num(b.to(torch::kFloat64).mean()); }
// std over valid tokens of clamp(v, lo, hi); 0 with at most one valid token.
double clamped_std(const Tensor& v, const Tensor& m, double lo, double hi) {
    if (num(m.sum()) <= 1) return 0.0;
    const Tensor c = v.clamp(lo, hi);
    const double a = masked_avg(c * c, m), b = masked_avg(c, m);
    return std::sqrt(std::max(0.0, a - b * b));
}

void is_metrics(const RolloutCorrectionParams& p, const Tensor& seq_lr, const Tensor& w_raw, const Tensor& w,
                const Tensor& m, std::map<std::string, double>& out) {
    const std::string k = "rollout_corr/rollout_is_";
    const double U = p.is_threshold.upper, L = p.is_threshold.lower;
    const bool token = *p.rollout_is == "token";
    const Tensor valid = m > 0;
    out[k + "mean"] = masked_avg(w, m);
    if (token) {
        const Tensor wv = w.masked_select(valid);
        out[k + "max"] = num(wv.max());
        out[k + "min"] = num(wv.min());
        out[k + "ratio_fraction_high"] = masked_avg((w_raw > U).to(torch::kFloat64), m);
        out[k + "ratio_fraction_low"] = masked_avg((w_raw < L).to(torch::kFloat64), m);
    } else {
        out[k + "max"] = std::exp(std::min(num(seq_lr.max()), kSafetyBound));
        out[k + "min"] = std::exp(num(seq_lr.min()));
        out[k + "ratio_fraction_high"] = mean_of(seq_lr > std::log(U));
        out[k + "ratio_fraction_low"] = mean_of(seq_lr < std::log(L));
    }
    out[k + "std"] = clamped_std(w, m, 0.0, U);
    const Tensor c = w.clamp(0.0, U);
    out[k + "eff_sample_size"] = 1.0 / masked_avg((c / (masked_avg(c, m) + 1e-8)).pow(2), m);
    const Tensor s = row_mean(w, m);
    out[k + "seq_mean"] = num(s.mean());
    out[k + "seq_std"] = unbiased_std(s);
    out[k + "seq_max"] = num(s.max());
    out[k + "seq_min"] = num(s.min());
    out[k + "seq_max_deviation"] = num((s - 1.0).abs().max());
    const Tensor raw_rows = row_mean(w_raw, m);
    out[k + "seq_fraction_high"] = mean_of(raw_rows > U);
    out[k + "seq_fraction_low"] = mean_of(raw_rows < L);
    if (p.is_threshold.icepop) out[k + "oob_ratio"] = masked_avg(((w_raw < L) | (w_raw > U)).to(torch::kFloat64), m);
}

// One rejection-sampling option: its keep mask [B, T] (0/1 float64) and its metrics.
Tensor rs_option(const RsOption& o, const Tensor& x, const Tensor& m, std::map<std::string, double>& out) {
    const Tensor tok = o.stat == RsStat::kK1 ? -x : o.stat == RsStat::kK2 ? 0.5 * x * x : x.exp() - 1.0 - x;
    const bool k1 = o.stat == RsStat::kK1, seq = o.level != RsLevel::kToken;
    const double hi = k1 ? std::log(o.upper) : o.upper, lo = k1 ? std::log(o.lower) : 0.0;
    const Tensor valid = m > 0, valid_rows = m.sum(1) > 0;
    Tensor row;
    if (o.level == RsLevel::kSeqSum) row = (tok * m).sum(1);
    else if (o.level == RsLevel::kSeqMean) row = row_mean(tok, m);
    else if (o.level == RsLevel::kSeqMax)
        row = torch::where(valid_rows, torch::where(valid, tok, torch::full_like(tok, -INFINITY)).amax(1),
                           torch::zeros_like(valid_rows, tok.options()));
    const Tensor v = seq ? row.unsqueeze(1).expand_as(tok) : tok;
    const Tensor keep = (k1 ? (v >= lo) & (v <= hi) : (v <= hi)).to(torch::kFloat64);
    const std::string k = "rollout_corr/rollout_rs_" + o.name + "_";
    out[k + "mean"] = masked_avg(v, m);
    const Tensor pooled = seq ? row.masked_select(valid_rows) : v.masked_select(valid);
    out[k + "max"] = num(pooled.max());
    out[k + "min"] = num(pooled.min());
    out[k + "fraction_high"] = seq ? mean_of(pooled > hi) : masked_avg((v > hi).to(torch::kFloat64), m);
    out[k + "fraction_low"] = !k1 ? 0.0 : seq ? mean_of(pooled < lo) : masked_avg((v < lo).to(torch::kFloat64), m);
    out[k + "std"] = clamped_std(v, m, lo, hi);
    const Tensor per_row = (seq ? row : row_mean(v, m)).masked_select(valid_rows);
    out[k + "seq_mean"] = num(per_row.mean());
    out[k + "seq_std"] = unbiased_std(per_row);
    out[k + "seq_max"] = num(per_row.max());
    out[k + "seq_min"] = num(per_row.min());
    out[k + "seq_max_deviation"] = num(per_row.abs().max());
    out[k + "seq_fraction_high"] = mean_of(per_row > hi);
    if (k1) out[k + "seq_fraction_low"] = mean_of(per_row < lo);
    out[k + "masked_fraction"] = masked_avg(1.0 - keep, m);
    const Tensor rejected_rows = ((1.0 - keep) * m).sum(1) > 0;
    out[k + "seq_masked_fraction"] = mean_of(rejected_rows.masked_select(valid_rows));
    return keep;
}

// verl's off-policy diagnostics (always computed).
void diagnostics(const Tensor& old, const Tensor& ro, const Tensor& lr, const Tensor& seq_lr, const Tensor& m,
                 std::map<std::string, double>& out) {
    const std::string k = "rollout_corr/";
    const Tensor l_old = row_mean(old, m), l_ro = row_mean(ro, m);
    out[k + "training_ppl"] = num((-l_old).exp().mean());
    out[k + "training_log_ppl"] = num((-l_old).mean());
    out[k + "rollout_ppl"] = num((-l_ro).exp().mean());
    out[k + "rollout_log_ppl"] = num((-l_ro).mean());
    out[k + "kl"] = masked_avg(ro - old, m);
    out[k + "k3_kl"] = masked_avg(lr.exp() - lr - 1.0, m);
    const Tensor diff = l_ro - l_old;
    out[k + "log_ppl_diff"] = num(diff.mean());
    out[k + "log_ppl_abs_diff"] = num(diff.abs().mean());
    out[k + "log_ppl_diff_max"] = num(diff.max());
    out[k + "log_ppl_diff_min"] = num(diff.min());
    out[k + "ppl_ratio"] = num(diff.exp().mean());
    out[k + "chi2_token"] = masked_avg((2.0 * lr.clamp(-kSafetyBound, kSafetyBound)).exp(), m) - 1.0;
    out[k + "chi2_seq"] = num((2.0 * seq_lr.clamp(-kSafetyBound, kSafetyBound)).exp().mean()) - 1.0;
}

}  // namespace

RolloutCorrectionOutput compute_rollout_correction(const Tensor& old_log_prob, const Tensor& rollout_log_prob,
                                                   const Tensor& response_mask, const RolloutCorrectionParams& p) {
    detail::check_float(old_log_prob, kWhere, "old_log_prob");
    detail::check_float(rollout_log_prob, kWhere, "rollout_log_prob");
    detail::check_2d(old_log_prob, kWhere, "old_log_prob");
    detail::check_like(old_log_prob, "old_log_prob", rollout_log_prob, "rollout_log_prob", kWhere);
    detail::check_like(old_log_prob, "old_log_prob", response_mask, "response_mask", kWhere);
    RLPT_CHECK(!p.rollout_is || *p.rollout_is == "token" || *p.rollout_is == "sequence",
               "{}: rollout_is must be token, sequence or null, got '{}'", kWhere, *p.rollout_is);
    RolloutCorrectionOutput out;
    out.response_mask = response_mask;
    if (old_log_prob.size(0) == 0) return out;
    torch::NoGradGuard no_grad;
    const Tensor m = (response_mask != 0).to(torch::kFloat64);
    RLPT_CHECK(num(m.sum()) > 0, "{}: the response mask has no valid token in the whole batch", kWhere);
    const Tensor old = old_log_prob.detach().to(torch::kFloat64), ro = rollout_log_prob.detach().to(torch::kFloat64);
    const Tensor lr = (old - ro) * m;  // padding may hold anything: only valid tokens count
    const Tensor seq_lr = lr.sum(1);
    diagnostics(old, ro, lr, seq_lr, m, out.metrics);

    if (p.rollout_is) {
        const Tensor expo = *p.rollout_is == "token" ? lr : seq_lr.unsqueeze(1).expand_as(lr);
        const Tensor w_raw = expo.clamp(-kSafetyBound, kSafetyBound).exp() * m;
        const double U = p.is_threshold.upper, L = p.is_threshold.lower;
        Tensor w = p.is_threshold.icepop ? torch::where((w_raw >= L) & (w_raw <= U), w_raw, torch::zeros_like(w_raw))
                                         : w_raw.clamp_max(U);
        is_metrics(p, seq_lr, w_raw, w, m, out.metrics);
        if (p.batch_normalize) {
            const double mean =
                *p.rollout_is == "token" ? masked_avg(w, m) : num(row_mean(w, m).masked_select(m.sum(1) > 0).mean());
            const bool apply = mean > 1e-8;
            if (apply) w = w / mean;
            out.metrics["rollout_corr/rollout_is_batch_norm_factor"] = apply ? mean : 1.0;
        }
        out.rollout_is_weights = w.to(old_log_prob.scalar_type());
    }

    if (!p.rs.empty()) {
        const Tensor x = lr.clamp(-kSafetyBound, kSafetyBound);
        Tensor keep = torch::ones_like(m);
        for (const auto& o : p.rs) keep = keep * rs_option(o, x, m, out.metrics);
        out.metrics["rollout_corr/rollout_rs_masked_fraction"] = masked_avg(1.0 - keep, m);
        out.metrics["rollout_corr/rollout_rs_seq_masked_fraction"] = mean_of(((1.0 - keep) * m).sum(1) > 0);
        out.response_mask = (response_mask.to(torch::kFloat64) * keep).to(response_mask.scalar_type());
    }
    return out;
}

}  // namespace rlpt::algo
