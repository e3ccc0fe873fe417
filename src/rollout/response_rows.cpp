#include "rlpt/rollout/response_rows.h"

#include <algorithm>

#include "rlpt/core/error.h"

namespace rlpt::rollout {

GenerationOutput assemble_rows(const std::vector<std::vector<int64_t>>& prompts, const std::vector<ResponseRow>& rows,
                               int64_t pad_id, bool with_texts) {
    RLPT_ASSERT(prompts.size() == rows.size());
    const int64_t b = static_cast<int64_t>(prompts.size());
    int64_t p_len = 0, r_len = 0;
    for (const auto& p : prompts) p_len = std::max<int64_t>(p_len, static_cast<int64_t>(p.size()));
    for (const auto& r : rows) r_len = std::max<int64_t>(r_len, static_cast<int64_t>(r.tokens.size()));

    GenerationOutput out;
    out.prompts = torch::full({b, p_len}, pad_id, torch::kInt64);
    out.responses = torch::full({b, r_len}, pad_id, torch::kInt64);
    auto prompt_mask = torch::zeros({b, p_len}, torch::kInt64);
    auto response_attn = torch::zeros({b, r_len}, torch::kInt64);
    out.response_mask = torch::zeros({b, r_len}, torch::kInt64);
    out.rollout_log_probs = torch::zeros({b, r_len}, torch::kFloat32);
    auto* pp = out.prompts.data_ptr<int64_t>();
    auto* pm = prompt_mask.data_ptr<int64_t>();
    auto* rp = out.responses.data_ptr<int64_t>();
    auto* ra = response_attn.data_ptr<int64_t>();
    auto* rm = out.response_mask.data_ptr<int64_t>();
    auto* lp = out.rollout_log_probs.data_ptr<float>();
    for (int64_t i = 0; i < b; ++i) {
        const auto& pr = prompts[static_cast<size_t>(i)];
        const auto& row = rows[static_cast<size_t>(i)];
        const int64_t n = static_cast<int64_t>(row.tokens.size());
        RLPT_ASSERT(row.log_probs.size() == row.tokens.size());
        RLPT_ASSERT(row.trained.empty() || row.trained.size() == row.tokens.size());
        const int64_t off = p_len - static_cast<int64_t>(pr.size());
        std::copy(pr.begin(), pr.end(), pp + i * p_len + off);
        std::fill(pm + i * p_len + off, pm + (i + 1) * p_len, int64_t{1});
        std::copy(row.tokens.begin(), row.tokens.end(), rp + i * r_len);
        std::fill(ra + i * r_len, ra + i * r_len + n, int64_t{1});
        for (int64_t j = 0; j < n; ++j) {
            const bool trained = row.trained.empty() || row.trained[static_cast<size_t>(j)] != 0;
            rm[i * r_len + j] = trained ? 1 : 0;
            lp[i * r_len + j] = trained ? row.log_probs[static_cast<size_t>(j)] : 0.0f;
        }
        out.finish_reasons.push_back(row.finish);
        if (with_texts) out.texts.push_back(row.text);
    }
    out.input_ids = torch::cat({out.prompts, out.responses}, 1);
    out.attention_mask = torch::cat({prompt_mask, response_attn}, 1);
    out.position_ids = (out.attention_mask.cumsum(1) - 1).clamp_min(0);
    // Routes: position j of row i's prompt ++ response sits at column (P - prompt length) + j.
    for (int64_t i = 0; i < b; ++i) {
        const auto& routes = rows[static_cast<size_t>(i)].routes;
        if (!routes.defined()) continue;
        if (!out.routed_experts.defined())
            out.routed_experts = torch::full({b, p_len + r_len, routes.size(1), routes.size(2)}, -1, torch::kInt64);
        const int64_t off = p_len - static_cast<int64_t>(prompts[static_cast<size_t>(i)].size());
        const int64_t n = std::min(routes.size(0), p_len + r_len - off);
        out.routed_experts[i].narrow(0, off, n).copy_(routes.narrow(0, 0, n));
    }
    return out;
}

void check_prompts(const std::vector<std::vector<int64_t>>& prompts, int64_t vocab) {
    for (size_t i = 0; i < prompts.size(); ++i) {
        RLPT_CHECK(!prompts[i].empty(), "generate: prompt {} is empty (at least one token is needed)", i);
        for (size_t j = 0; j < prompts[i].size(); ++j)
            RLPT_CHECK(prompts[i][j] >= 0 && prompts[i][j] < vocab,
                       "generate: prompt {} token {} is {}, outside the vocabulary [0, {})", i, j, prompts[i][j],
                       vocab);
    }
}

}  // namespace rlpt::rollout
