// The agent loop (agent/tool_agent.h) with scripted model turns: tool calls and their masked
// observations, bad calls as error observations, the token budget, MCP tools (server-everything),
// environments (scripts/examples/retry_env.py, one that exits); and the masking contract: tokens
// with response_mask 0 change no loss, gradient, entropy or KL.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "unit/agent_test_util.h"
#include "rlpt/agent/tool_agent.h"
#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/policy_loss.h"
#include "rlpt/algo/value_loss.h"
#include "rlpt/build_config.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/transformer.h"
#include "rlpt/tokenizer/char_tokenizer.h"

namespace rlpt::agent {
namespace {

using rollout::FinishReason;
using rollout::GenerationOutput;

const std::string kCharset = "0123456789+-*/() <>_{}\":,.abcdefghijklmnopqrstuvwxyzAEFIJNOSUW'[]";

// Scripted turns: sample k (identified by its prompt's first id) says script[k][t] at its turn t;
// a text ending in "<eos>" finishes with kEos.
struct Script {
    const tokenizer::Tokenizer& tok;
    std::map<int64_t, std::vector<std::string>> turns;
    std::map<int64_t, size_t> next;
    std::vector<std::vector<int64_t>> seen_prompts;
    GenerationOutput operator()(const std::vector<std::vector<int64_t>>& prompts, const std::vector<uint64_t>&,
                                const rollout::SamplingParams& p) {
        std::vector<std::vector<int64_t>> out;
        GenerationOutput g;
        int64_t R = 0;
        for (const auto& pr : prompts) {
            seen_prompts.push_back(pr);
            const auto& s = turns.at(pr[0]);
            auto ids = tok.encode(s.at(next[pr[0]]++), true);
            const bool eos = !ids.empty() && ids.back() == tokenizer::CharTokenizer::kEosId;
            if (static_cast<int64_t>(ids.size()) > p.max_new_tokens) ids.resize(static_cast<size_t>(p.max_new_tokens));
            g.finish_reasons.push_back(eos && ids.back() == tokenizer::CharTokenizer::kEosId ? FinishReason::kEos
                                                                                            : FinishReason::kLength);
            R = std::max<int64_t>(R, static_cast<int64_t>(ids.size()));
            out.push_back(ids);
        }
        const auto B = static_cast<int64_t>(prompts.size());
        g.responses = torch::zeros({B, R}, torch::kInt64);
        g.response_mask = torch::zeros({B, R}, torch::kInt64);
        g.rollout_log_probs = torch::zeros({B, R});
        for (int64_t i = 0; i < B; ++i)
            for (size_t k = 0; k < out[static_cast<size_t>(i)].size(); ++k) {
                g.responses[i][static_cast<int64_t>(k)] = out[static_cast<size_t>(i)][k];
                g.response_mask[i][static_cast<int64_t>(k)] = 1;
                g.rollout_log_probs[i][static_cast<int64_t>(k)] = -0.5;
            }
        return g;
    }
};

std::vector<int64_t> row(const torch::Tensor& t, int64_t i) {
    auto r = t[i].contiguous();
    return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

struct Fixture {
    tokenizer::CharTokenizer tok{kCharset};
    Config config;
    rollout::GeneratorContext ctx;
    Fixture() {
        config.rollout.multi_turn.builtin_tools = {"calculator"};
        ctx.config = &config;
        ctx.tokenizer = &tok;
    }
    rollout::SamplingParams params(int64_t R) {
        rollout::SamplingParams p;
        p.max_new_tokens = R;
        p.eos_id = tokenizer::CharTokenizer::kEosId;
        return p;
    }
    std::string response_text(const GenerationOutput& g, int64_t i, int64_t mask_value) {
        std::vector<int64_t> ids;
        auto r = row(g.responses, i), m = row(g.response_mask, i);
        for (size_t k = 0; k < r.size(); ++k)
            if (m[k] == mask_value && (mask_value == 1 || r[k] != 0)) ids.push_back(r[k]);
        return tok.decode(ids, false);
    }
};

TEST(AgentLoop, ToolCallsObservationsAndErrorsWithScriptedTurns) {
    Fixture f;
    Script s{f.tok, {}, {}, {}};
    const std::string call = "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*(3+4)\"}}</tool_call><eos>";
    s.turns[3] = {call, "84<eos>"};
    s.turns[4] = {"<tool_call>{oops</tool_call><eos>", "x<eos>"};
    s.turns[5] = {"<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call><eos>", "y<eos>"};
    s.turns[6] = {"<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": 5}}</tool_call><eos>", "z<eos>"};
    s.turns[7] = {"42<eos>"};
    std::vector<std::vector<int64_t>> prompts{{3, 10}, {4, 10}, {5, 10}, {6, 10}, {7, 10}};
    auto g = run_agent_loop(std::ref(s), prompts, {1, 2, 3, 4, 5}, f.params(200), f.ctx);
    ASSERT_EQ(g.responses.size(0), 5);
    // The model's own tokens (mask 1) are its two turns; the observation (mask 0) sits between them.
    EXPECT_EQ(f.response_text(g, 0, 1), call + "84<eos>");
    EXPECT_EQ(f.response_text(g, 0, 0), "<tool_response>84</tool_response>");
    EXPECT_EQ(f.tok.decode(row(g.responses, 0), false).substr(0, call.size() + 33), call + "<tool_response>84</tool_response>");
    // The second turn was generated from prompt ++ turn 1 ++ observation.
    bool found = false;
    for (const auto& p : s.seen_prompts)
        found = found || f.tok.decode(p, false) == f.tok.decode(prompts[0], false) + call + "<tool_response>84</tool_response>";
    EXPECT_TRUE(found);
    // Observation tokens: rollout log-prob 0; model tokens keep theirs; attention 1 on both.
    auto m = g.response_mask[0], lp = g.rollout_log_probs[0];
    EXPECT_TRUE(torch::all(lp.masked_select(m == 0) == 0).item<bool>());
    const int64_t P = g.prompts.size(1), n0 = static_cast<int64_t>(f.tok.encode(call + "<tool_response>84</tool_response>84<eos>", true).size());
    EXPECT_EQ(g.attention_mask[0].slice(0, P, P + n0).sum().item<int64_t>(), n0);
    EXPECT_NE(f.response_text(g, 1, 0).find("not a JSON object"), std::string::npos) << f.response_text(g, 1, 0);
    EXPECT_NE(f.response_text(g, 2, 0).find("Unknown function 'add'. Available tools: [calculator]"), std::string::npos);
    EXPECT_NE(f.response_text(g, 3, 0).find("Invalid arguments for 'calculator': argument 'expression': expected string, got integer"),
              std::string::npos) << f.response_text(g, 3, 0);
    EXPECT_EQ(f.response_text(g, 4, 0), "");
    const auto& v = f.ctx.sample_values;
    EXPECT_EQ(v.at("num_turns"), (std::vector<double>{4, 4, 4, 4, 2}));  // assistant + user turns + 1
    EXPECT_EQ(v.at("tool_call_counts"), (std::vector<double>{1, 1, 1, 1, 0}));
    EXPECT_EQ(v.at("tool_errors"), (std::vector<double>{0, 1, 1, 1, 0}));
    EXPECT_EQ(v.at("model_tokens")[4], 3.0);
    EXPECT_EQ(v.at("observation_tokens")[0], static_cast<double>(f.tok.encode("<tool_response>84</tool_response>", false).size()));
    for (auto r : g.finish_reasons) EXPECT_EQ(r, FinishReason::kEos);
}

TEST(AgentLoop, BudgetAndTurnLimits) {
    Fixture f;
    const std::string call = "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1+1\"}}</tool_call><eos>";
    const auto n_call = static_cast<int64_t>(f.tok.encode(call, true).size());
    {  // The observation would reach the budget: not appended, the response ends on model tokens.
        Script s{f.tok, {{3, {call, "2<eos>"}}}, {}, {}};
        auto g = run_agent_loop(std::ref(s), {{3}}, {1}, f.params(n_call + 5), f.ctx);
        EXPECT_EQ(g.responses.size(1), n_call);
        EXPECT_EQ(g.response_mask.sum().item<int64_t>(), n_call);
        EXPECT_EQ(g.finish_reasons[0], FinishReason::kLength);
    }
    {  // max_assistant_turns = 1: the call is not run.
        f.config.rollout.multi_turn.max_assistant_turns = 1;
        Script s{f.tok, {{3, {call, "2<eos>"}}}, {}, {}};
        auto g = run_agent_loop(std::ref(s), {{3}}, {1}, f.params(500), f.ctx);
        EXPECT_EQ(g.responses.size(1), n_call);
        EXPECT_EQ(f.ctx.sample_values.at("tool_call_counts")[0], 0.0);
        f.config.rollout.multi_turn.max_assistant_turns = 0;
    }
    {  // A model turn cut by the budget ends the sample with kLength.
        Script s{f.tok, {{3, {call, "2<eos>"}}}, {}, {}};
        auto g = run_agent_loop(std::ref(s), {{3}}, {1}, f.params(10), f.ctx);
        EXPECT_EQ(g.responses.size(1), 10);
        EXPECT_EQ(g.finish_reasons[0], FinishReason::kLength);
    }
}

using testing::everything_server;

TEST(AgentLoop, McpToolsOfDifferentSamplesRunTogether) {
    const std::string server = everything_server();
    if (server.empty()) GTEST_SKIP() << "@modelcontextprotocol/server-everything is not installed (run scripts/fetch_test_assets.sh)";
    Fixture f;
    f.config.rollout.multi_turn.builtin_tools.clear();
    f.config.rollout.multi_turn.mcp_servers = {server};
    Script s{f.tok, {}, {}, {}};
    for (int64_t k = 0; k < 4; ++k)
        s.turns[3 + k] = {fmt::format("<tool_call>{{\"name\": \"get-sum\", \"arguments\": {{\"a\": {}, \"b\": 2}}}}</tool_call><eos>", k),
                          "<eos>"};
    s.turns[7] = {"<tool_call>{\"name\": \"get-sum\", \"arguments\": {\"a\": \"x\", \"b\": 2}}</tool_call><eos>", "<eos>"};
    auto g = run_agent_loop(std::ref(s), {{3}, {4}, {5}, {6}, {7}}, {1, 2, 3, 4, 5}, f.params(400), f.ctx);
    for (int64_t k = 0; k < 4; ++k) {
        // The char vocabulary has no 'T' or 'h': those characters are dropped from the observation.
        EXPECT_NE(f.response_text(g, k, 0).find(fmt::format("sum of {} and 2 is {}.", k, k + 2)), std::string::npos)
            << f.response_text(g, k, 0);
    }
    // Arguments failing the server's input schema are refused before the call.
    EXPECT_NE(f.response_text(g, 4, 0).find("Invalid arguments for 'get-sum': argument 'a': expected number"), std::string::npos);
    EXPECT_EQ(f.ctx.sample_values.at("tool_errors"), (std::vector<double>{0, 0, 0, 0, 1}));
    EXPECT_GT(f.ctx.sample_values.at("tool_latency_s")[0], 0.0);
}

TEST(AgentLoop, EnvironmentRewardsAndAnEnvironmentThatExits) {
    Fixture f;
    f.config.rollout.multi_turn.builtin_tools.clear();
    f.config.rollout.multi_turn.env_command = fmt::format("python3 {}/scripts/examples/retry_env.py", RLPT_SOURCE_DIR);
    f.ctx.ground_truth = {"7", "7", "7"};
    f.ctx.sample_index = {10, 11, 12};
    Script s{f.tok, {{3, {"5<eos>", "7<eos>"}}, {4, {"7<eos>"}}, {5, {"1<eos>", "2<eos>"}}}, {}, {}};
    auto g = run_agent_loop(std::ref(s), {{3}, {4}, {5}}, {1, 2, 3}, f.params(100), f.ctx);
    EXPECT_EQ(f.ctx.sample_values.at("env_reward"), (std::vector<double>{0.5, 1.0, 0.0}));
    EXPECT_EQ(f.response_text(g, 0, 0), "wrong, try again");
    EXPECT_EQ(f.ctx.sample_values.at("num_turns"), (std::vector<double>{4, 2, 4}));

    Fixture bad;
    bad.config.rollout.multi_turn.builtin_tools.clear();
    bad.config.rollout.multi_turn.env_command = "exit 3";
    bad.ctx.sample_index = {17};
    Script s2{bad.tok, {{3, {"5<eos>"}}}, {}, {}};
    auto g2 = run_agent_loop(std::ref(s2), {{3}}, {1}, bad.params(100), bad.ctx);
    EXPECT_EQ(bad.ctx.sample_values.at("env_errors")[0], 1.0);
    EXPECT_EQ(g2.responses.size(1), 0);  // reset failed: the sample ends before its first turn
}

// Loss, gradient, entropy and KL see only response_mask-1 tokens: changing the tokens and every
// per-token input at mask-0 positions (observations at the end of the response, where no model
// token attends to them; old/ref log-probs and advantages anywhere) changes none of them. The
// same change at mask-1 positions does (the check can fail).
TEST(AgentLoop, ObservationTokensChangeNoLossGradientEntropyOrKl) {
    auto args = model::tiny_model_args(model::ModelFamily::kQwen2, 40);
    auto net = model::make_random_causal_lm(args, 3, torch::kFloat32);
    const int64_t B = 2, P = 3, R = 8;
    torch::manual_seed(0);
    auto ids = torch::randint(3, 40, {B, P + R}, torch::kInt64);
    // response: 3 model tokens, 2 observation tokens, 1 model token, 2 observation tokens (end).
    auto mask = torch::tensor({1, 1, 1, 0, 0, 1, 0, 0}, torch::kInt64).repeat({B, 1});
    auto old_lp = -torch::rand({B, R}), ref_lp = -torch::rand({B, R}), adv = torch::randn({B, R});

    struct Out {
        double loss, entropy, kl;
        std::vector<torch::Tensor> grads;
    };
    auto run = [&](const torch::Tensor& x, const torch::Tensor& old, const torch::Tensor& ref, const torch::Tensor& a,
                   const torch::Tensor& m) {
        net->zero_grad();
        engine::SequenceBatch seq{x, torch::ones_like(x), torch::arange(P + R).repeat({B, 1}), R};
        auto lp = engine::compute_log_probs(*net, seq, 1.0, true);
        algo::ActorLossInputs li;
        li.policy.log_prob = lp.log_probs;
        li.policy.old_log_prob = old;
        li.policy.advantages = a;
        li.policy.response_mask = m;
        li.entropy = lp.entropy;
        li.ref_log_prob = ref;
        algo::ActorLossConfig lc;
        lc.entropy_coeff = 0.01;
        lc.use_kl_loss = true;
        lc.kl_loss_coef = 0.1;
        lc.kl_loss_type = "low_var_kl";
        lc.policy.global_batch_info.batch_num_tokens = m.sum().item<double>();
        lc.policy.global_batch_info.global_batch_size = B;
        lc.policy.global_batch_info.loss_scale_factor = static_cast<double>(R);
        auto out = algo::compute_actor_loss(li, lc);
        out.loss.backward();
        Out o{out.loss.item<double>(),
              algo::agg_loss(lp.entropy.detach(), m.to(torch::kFloat32), algo::AggMode::kTokenMean, {}).item<double>(),
              out.metrics.count("actor/kl_loss") ? out.metrics.at("actor/kl_loss") : std::nan("")};
        for (auto& p : net->parameters()) o.grads.push_back(p.grad().clone());
        return o;
    };
    auto base = run(ids, old_lp, ref_lp, adv, mask);
    // Change everything at mask-0 positions: the trailing observation tokens and every per-token input.
    auto obs = mask == 0;
    auto ids2 = ids.clone();
    ids2.slice(1, P + 6, P + 8).fill_(39);
    auto changed = run(ids2, torch::where(obs, old_lp - 3, old_lp), torch::where(obs, ref_lp + 2, ref_lp),
                       torch::where(obs, adv * 5 + 1, adv), mask);
    EXPECT_DOUBLE_EQ(changed.loss, base.loss);
    EXPECT_DOUBLE_EQ(changed.entropy, base.entropy);
    EXPECT_DOUBLE_EQ(changed.kl, base.kl);
    for (size_t k = 0; k < base.grads.size(); ++k) EXPECT_TRUE(torch::equal(changed.grads[k], base.grads[k])) << k;
    // Control: the same change counted as model tokens (mask 1) moves the loss.
    auto all = torch::ones_like(mask);
    auto c1 = run(ids, old_lp, ref_lp, adv, all);
    auto c2 = run(ids2, torch::where(obs, old_lp - 3, old_lp), torch::where(obs, ref_lp + 2, ref_lp),
                  torch::where(obs, adv * 5 + 1, adv), all);
    EXPECT_NE(c1.loss, c2.loss);
    EXPECT_NE(c1.entropy, c2.entropy);
}

}  // namespace
}  // namespace rlpt::agent
