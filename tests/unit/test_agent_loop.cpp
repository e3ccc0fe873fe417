// The agent loop (agent/tool_agent.h) with scripted model turns: tool calls and their masked
// observations, bad calls as error observations, the token budget, MCP tools (server-everything),
// environments (scripts/examples/retry_env.py, one that exits); and the masking contract: tokens
// with response_mask 0 change no loss, gradient, entropy or KL. Scripts drive the conversations
// (agent::ConversationSource) at the source level, through the turn-by-turn schedule
// (unit/turn_by_turn.h); a model whose next token is a function of the last one scripts them on
// the rollout engine itself; random-weight models compare the engine with the turn-by-turn
// schedule.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "unit/agent_macro_tokenizer.h"
#include "unit/agent_test_util.h"
#include "unit/turn_by_turn.h"
#include "rlpt/agent/line_process.h"
#include "rlpt/agent/tool_agent.h"
#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/policy_loss.h"
#include "rlpt/algo/value_loss.h"
#include "rlpt/build_config.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"
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

// The conversations of one call with the script's turns (source level, turn by turn).
GenerationOutput run_scripted(Script& script, const std::vector<std::vector<int64_t>>& prompts,
                              const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                              rollout::GeneratorContext& ctx) {
    auto conversations = open_conversations(prompts, seeds, params, ctx);
    rollout::testing::run_turn_by_turn(*conversations, std::ref(script), params);
    return conversations->finish();
}

std::vector<int64_t> row(const torch::Tensor& t, int64_t i) {
    auto r = t[i].contiguous();
    return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

// Row i's response tokens with response_mask == mask_value (padding left out), as text.
std::string masked_text(const tokenizer::Tokenizer& tok, const GenerationOutput& g, int64_t i, int64_t mask_value) {
    std::vector<int64_t> ids;
    auto r = row(g.responses, i), m = row(g.response_mask, i);
    for (size_t k = 0; k < r.size(); ++k)
        if (m[k] == mask_value && (mask_value == 1 || r[k] != 0)) ids.push_back(r[k]);
    return tok.decode(ids, false);
}

struct Fixture {
    tokenizer::CharTokenizer tok{kCharset};
    rollout::GeneratorContext ctx;
    Fixture() {
        ctx.args.multi_turn.builtin_tools = {"calculator"};
        ctx.tokenizer = &tok;
    }
    rollout::SamplingParams params(int64_t R) {
        rollout::SamplingParams p;
        p.max_new_tokens = R;
        p.eos_id = tokenizer::CharTokenizer::kEosId;
        return p;
    }
    std::string response_text(const GenerationOutput& g, int64_t i, int64_t mask_value) {
        return masked_text(tok, g, i, mask_value);
    }
};

TEST(AgentLoop, ToolCallsObservationsAndErrorsWithScriptedTurns) {
    Fixture f;
    Script s{f.tok, {}, {}, {}};
    const std::string call =
        "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*(3+4)\"}}</tool_call><eos>";
    s.turns[3] = {call, "84<eos>"};
    s.turns[4] = {"<tool_call>{oops</tool_call><eos>", "x<eos>"};
    s.turns[5] = {"<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call><eos>", "y<eos>"};
    s.turns[6] = {"<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": 5}}</tool_call><eos>",
                  "z<eos>"};
    s.turns[7] = {"42<eos>"};
    std::vector<std::vector<int64_t>> prompts{{3, 10}, {4, 10}, {5, 10}, {6, 10}, {7, 10}};
    auto g = run_scripted(s, prompts, {1, 2, 3, 4, 5}, f.params(200), f.ctx);
    ASSERT_EQ(g.responses.size(0), 5);
    // The model's own tokens (mask 1) are its two turns; the observation (mask 0) sits between them.
    EXPECT_EQ(f.response_text(g, 0, 1), call + "84<eos>");
    EXPECT_EQ(f.response_text(g, 0, 0), "<tool_response>84</tool_response>");
    EXPECT_EQ(f.tok.decode(row(g.responses, 0), false).substr(0, call.size() + 33),
              call + "<tool_response>84</tool_response>");
    // The second turn was generated from prompt ++ turn 1 ++ observation.
    bool found = false;
    for (const auto& p : s.seen_prompts)
        found = found ||
                f.tok.decode(p, false) == f.tok.decode(prompts[0], false) + call + "<tool_response>84</tool_response>";
    EXPECT_TRUE(found);
    // Observation tokens: rollout log-prob 0; model tokens keep theirs; attention 1 on both.
    auto m = g.response_mask[0], lp = g.rollout_log_probs[0];
    EXPECT_TRUE(torch::all(lp.masked_select(m == 0) == 0).item<bool>());
    const int64_t P = g.prompts.size(1),
                  n0 = static_cast<int64_t>(
                      f.tok.encode(call + "<tool_response>84</tool_response>84<eos>", true).size());
    EXPECT_EQ(g.attention_mask[0].slice(0, P, P + n0).sum().item<int64_t>(), n0);
    EXPECT_NE(f.response_text(g, 1, 0).find("not a JSON object"), std::string::npos) << f.response_text(g, 1, 0);
    EXPECT_NE(f.response_text(g, 2, 0).find("Unknown function 'add'. Available tools: [calculator]"),
              std::string::npos);
    EXPECT_NE(f.response_text(g, 3, 0).find(
                  "Invalid arguments for 'calculator': argument 'expression': expected string, got integer"),
              std::string::npos)
        << f.response_text(g, 3, 0);
    EXPECT_EQ(f.response_text(g, 4, 0), "");
    const auto& v = f.ctx.sample_values;
    EXPECT_EQ(v.at("num_turns"), (std::vector<double>{4, 4, 4, 4, 2}));  // assistant + user turns + 1
    EXPECT_EQ(v.at("tool_call_counts"), (std::vector<double>{1, 1, 1, 1, 0}));
    EXPECT_EQ(v.at("tool_errors"), (std::vector<double>{0, 1, 1, 1, 0}));
    EXPECT_EQ(v.at("model_tokens")[4], 3.0);
    EXPECT_EQ(v.at("observation_tokens")[0],
              static_cast<double>(f.tok.encode("<tool_response>84</tool_response>", false).size()));
    for (auto r : g.finish_reasons) EXPECT_EQ(r, FinishReason::kEos);
}

// model.chat_template qwen3: the tool results are one user turn of <tool_response> blocks, and the
// assistant turn opened after them is the template's generation prompt, with the empty think
// block when model.apply_chat_template_kwargs.enable_thinking is false (GeneratorArgs).
TEST(AgentLoop, Qwen3ObservationOpensTheNextTurnAsTheTemplate) {
    for (const bool thinking : {true, false}) {
        SCOPED_TRACE(thinking ? "enable_thinking true" : "enable_thinking false");
        Fixture f;
        tokenizer::CharTokenizer tok{kCharset + "|\n"};
        f.ctx.tokenizer = &tok;
        f.ctx.args.chat_template = "qwen3";
        f.ctx.args.enable_thinking = thinking;
        Script s{tok, {}, {}, {}};
        const std::string call =
            "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"6*7\"}}</tool_call><eos>";
        s.turns[3] = {call, "42<eos>"};
        auto g = run_scripted(s, {{3, 10}}, {1}, f.params(300), f.ctx);
        EXPECT_EQ(masked_text(tok, g, 0, 0),
                  std::string("<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
                              "<|im_start|>assistant\n") +
                      (thinking ? "" : "<think>\n\n</think>\n\n"));
        EXPECT_EQ(masked_text(tok, g, 0, 1), call + "42<eos>");
    }
}

TEST(AgentLoop, BudgetAndTurnLimits) {
    Fixture f;
    const std::string call =
        "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1+1\"}}</tool_call><eos>";
    const auto n_call = static_cast<int64_t>(f.tok.encode(call, true).size());
    {  // The observation would reach the budget: not appended, the response ends on model tokens.
        Script s{f.tok, {{3, {call, "2<eos>"}}}, {}, {}};
        auto g = run_scripted(s, {{3}}, {1}, f.params(n_call + 5), f.ctx);
        EXPECT_EQ(g.responses.size(1), n_call);
        EXPECT_EQ(g.response_mask.sum().item<int64_t>(), n_call);
        EXPECT_EQ(g.finish_reasons[0], FinishReason::kLength);
    }
    {  // max_assistant_turns = 1: the call is not run.
        f.ctx.args.multi_turn.max_assistant_turns = 1;
        Script s{f.tok, {{3, {call, "2<eos>"}}}, {}, {}};
        auto g = run_scripted(s, {{3}}, {1}, f.params(500), f.ctx);
        EXPECT_EQ(g.responses.size(1), n_call);
        EXPECT_EQ(f.ctx.sample_values.at("tool_call_counts")[0], 0.0);
        f.ctx.args.multi_turn.max_assistant_turns = 0;
    }
    {  // A model turn cut by the budget ends the sample with kLength.
        Script s{f.tok, {{3, {call, "2<eos>"}}}, {}, {}};
        auto g = run_scripted(s, {{3}}, {1}, f.params(10), f.ctx);
        EXPECT_EQ(g.responses.size(1), 10);
        EXPECT_EQ(g.finish_reasons[0], FinishReason::kLength);
    }
}

// ---- scripted turns on the rollout engine ----
// A model whose next token is a function of the last one: one-hot embeddings, attention and MLP
// outputs zeroed (the residual stream is the token's embedding), the LM head a transition table
// (next[from] = to, logit margin ~200). Every token a turn is sampled after must be in `next`.
std::shared_ptr<model::CausalLM> bigram_model(int64_t vocab, const std::map<int64_t, int64_t>& next) {
    auto a = model::tiny_model_args(model::ModelFamily::kLlama, vocab);
    a.hidden_size = (vocab + 31) / 32 * 32;
    a.head_dim = a.hidden_size / a.num_attention_heads;
    a.num_hidden_layers = 1;
    a.validate();
    auto m = model::make_random_causal_lm(a, 1, torch::kFloat32);
    torch::NoGradGuard no_grad;
    for (auto& item : m->named_parameters()) {
        const std::string& name = item.key();
        torch::Tensor& p = item.value();
        if (name.find("embed_tokens") != std::string::npos) {
            p.zero_();
            for (int64_t v = 0; v < vocab; ++v) p[v][v] = 1.0;
        } else if (name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos) {
            p.zero_();
        } else if (name.find("norm") != std::string::npos) {
            p.fill_(1.0);
        } else if (name.find("lm_head") != std::string::npos) {
            p.zero_();
            for (const auto& [from, to] : next) p[to][from] = 20.0;
        }
    }
    return m;
}

// The scripted turns of ToolCallsObservationsAndErrorsWithScriptedTurns, said by a real model on
// the one engine: each prompt's last character picks a whole tool call (a macro token) or "42",
// EOS ends it; after an observation (its last character '>') the model says "k". Any slot count,
// greedy or sampled, gives the same conversations; the budget cuts as in BudgetAndTurnLimits.
TEST(AgentLoop, ScriptedTurnsOnTheEngine) {
    const std::vector<std::string> calls{
        "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*(3+4)\"}}</tool_call>",
        "<tool_call>{oops</tool_call>", "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": 5}}</tool_call>"};
    testing::MacroTokenizer tok(kCharset, calls);
    const int64_t eos = tokenizer::CharTokenizer::kEosId;
    auto id = [&](char c) { return tok.encode(std::string(1, c), false).at(0); };
    std::map<int64_t, int64_t> next{
        {id('e'), id('4')}, {id('4'), id('2')}, {id('2'), eos}, {id('>'), id('k')}, {id('k'), eos}};
    for (int64_t k = 0; k < 4; ++k) {
        next[id(static_cast<char>('a' + k))] = tok.first_macro_id() + k;
        next[tok.first_macro_id() + k] = eos;
    }
    const auto model = bigram_model(tok.vocab_size(), next);
    rollout::GeneratorContext ctx;
    ctx.args.multi_turn.builtin_tools = {"calculator"};
    ctx.tokenizer = &tok;
    std::vector<std::vector<int64_t>> prompts;
    for (const char* p : {"qa", "qb", "qc", "qd", "qe"}) prompts.push_back(tok.encode(p, false));
    const std::vector<uint64_t> seeds{1, 2, 3, 4, 5};
    rollout::SamplingParams params;
    params.max_new_tokens = 200;
    params.eos_id = eos;
    for (const bool greedy : {true, false}) {
        for (const int64_t slots : {1, 2, 5}) {
            SCOPED_TRACE(::testing::Message() << "greedy " << greedy << ", max_num_seqs " << slots);
            params.greedy = greedy;
            const auto g = tool_agent_generate(*model, prompts, seeds, params, rollout::BatchLimits(slots), ctx);
            EXPECT_EQ(masked_text(tok, g, 0, 1), calls[0] + "<eos>k<eos>");
            EXPECT_EQ(masked_text(tok, g, 0, 0), "<tool_response>84</tool_response>");
            EXPECT_NE(masked_text(tok, g, 1, 0).find("not a JSON object"), std::string::npos);
            EXPECT_NE(masked_text(tok, g, 2, 0).find("Unknown function 'add'. Available tools: [calculator]"),
                      std::string::npos);
            EXPECT_NE(
                masked_text(tok, g, 3, 0)
                    .find("Invalid arguments for 'calculator': argument 'expression': expected string, got integer"),
                std::string::npos)
                << masked_text(tok, g, 3, 0);
            EXPECT_EQ(masked_text(tok, g, 4, 1), "42<eos>");
            EXPECT_EQ(masked_text(tok, g, 4, 0), "");
            EXPECT_TRUE(torch::all(g.rollout_log_probs.masked_select(g.response_mask == 0) == 0).item<bool>());
            const auto& v = ctx.sample_values;
            EXPECT_EQ(v.at("num_turns"), (std::vector<double>{4, 4, 4, 4, 2}));
            EXPECT_EQ(v.at("tool_call_counts"), (std::vector<double>{1, 1, 1, 1, 0}));
            EXPECT_EQ(v.at("tool_errors"), (std::vector<double>{0, 1, 1, 1, 0}));
            EXPECT_EQ(v.at("model_tokens"), (std::vector<double>{4, 4, 4, 4, 3}));
            for (auto r : g.finish_reasons) EXPECT_EQ(r, FinishReason::kEos);
        }
    }
    // The budget: an observation that would reach it is not appended; a turn it cuts ends in kLength.
    params.greedy = true;
    for (const int64_t R : {int64_t{7}, int64_t{1}}) {
        params.max_new_tokens = R;
        const auto g = tool_agent_generate(*model, {prompts[0]}, {1}, params, rollout::BatchLimits(4), ctx);
        EXPECT_EQ(g.responses.size(1), std::min<int64_t>(R, 2));
        EXPECT_EQ(g.response_mask.sum().item<int64_t>(), std::min<int64_t>(R, 2));
        EXPECT_EQ(g.finish_reasons[0], FinishReason::kLength);
        EXPECT_EQ(ctx.sample_values.at("tool_call_counts")[0], R == 7 ? 1.0 : 0.0);  // a cut turn runs no call
    }
}

using testing::everything_server;

TEST(AgentLoop, McpToolsOfDifferentSamplesRunTogether) {
    const std::string server = everything_server();
    if (server.empty())
        GTEST_SKIP() << "@modelcontextprotocol/server-everything is not installed (run scripts/fetch_test_assets.sh)";
    Fixture f;
    f.ctx.args.multi_turn.builtin_tools.clear();
    f.ctx.args.multi_turn.mcp_servers = {server};
    Script s{f.tok, {}, {}, {}};
    for (int64_t k = 0; k < 4; ++k)
        s.turns[3 + k] = {
            fmt::format("<tool_call>{{\"name\": \"get-sum\", \"arguments\": {{\"a\": {}, \"b\": 2}}}}</tool_call><eos>",
                        k),
            "<eos>"};
    s.turns[7] = {"<tool_call>{\"name\": \"get-sum\", \"arguments\": {\"a\": \"x\", \"b\": 2}}</tool_call><eos>",
                  "<eos>"};
    auto g = run_scripted(s, {{3}, {4}, {5}, {6}, {7}}, {1, 2, 3, 4, 5}, f.params(400), f.ctx);
    for (int64_t k = 0; k < 4; ++k) {
        // The char vocabulary has no 'T' or 'h': those characters are dropped from the observation.
        EXPECT_NE(f.response_text(g, k, 0).find(fmt::format("sum of {} and 2 is {}.", k, k + 2)), std::string::npos)
            << f.response_text(g, k, 0);
    }
    // Arguments failing the server's input schema are refused before the call.
    EXPECT_NE(f.response_text(g, 4, 0).find("Invalid arguments for 'get-sum': argument 'a': expected number"),
              std::string::npos);
    EXPECT_EQ(f.ctx.sample_values.at("tool_errors"), (std::vector<double>{0, 0, 0, 0, 1}));
    EXPECT_GT(f.ctx.sample_values.at("tool_latency_s")[0], 0.0);
}

TEST(AgentLoop, EnvironmentRewardsAndAnEnvironmentThatExits) {
    Fixture f;
    f.ctx.args.multi_turn.builtin_tools.clear();
    f.ctx.args.multi_turn.env_command = fmt::format("python3 {}/scripts/examples/retry_env.py", RLPT_SOURCE_DIR);
    f.ctx.ground_truth = {"7", "7", "7"};
    f.ctx.sample_index = {10, 11, 12};
    Script s{f.tok, {{3, {"5<eos>", "7<eos>"}}, {4, {"7<eos>"}}, {5, {"1<eos>", "2<eos>"}}}, {}, {}};
    auto g = run_scripted(s, {{3}, {4}, {5}}, {1, 2, 3}, f.params(100), f.ctx);
    EXPECT_EQ(f.ctx.sample_values.at("env_reward"), (std::vector<double>{0.5, 1.0, 0.0}));
    EXPECT_EQ(f.response_text(g, 0, 0), "wrong, try again");
    EXPECT_EQ(f.ctx.sample_values.at("num_turns"), (std::vector<double>{4, 2, 4}));

    Fixture bad;
    bad.ctx.args.multi_turn.builtin_tools.clear();
    bad.ctx.args.multi_turn.env_command = "exit 3";
    bad.ctx.sample_index = {17};
    Script s2{bad.tok, {{3, {"5<eos>"}}}, {}, {}};
    auto g2 = run_scripted(s2, {{3}}, {1}, bad.params(100), bad.ctx);
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

// ---- the continuous schedule (tool_agent_generate) on a real model ----
// A random-weight model over characters plus macro tokens that are whole tool calls (agent/
// agent_macro_tokenizer.h), the macros being stop ids: turns end on a call (or on EOS without one),
// so conversations run several turns whose observations are real tool results.
struct RealModel {
    testing::MacroTokenizer tok;
    std::shared_ptr<model::CausalLM> model;
    rollout::GeneratorContext ctx;
    explicit RealModel(std::vector<std::string> macros, uint64_t seed = 5) : tok(kCharset, std::move(macros)) {
        auto a = model::tiny_model_args(model::ModelFamily::kQwen2, tok.vocab_size());
        a.initializer_range = 0.25;  // peaked next-token distributions: clear margins between tokens
        model = model::make_random_causal_lm(a, seed, torch::kFloat32);
        ctx.args.multi_turn.builtin_tools = {"calculator"};
        ctx.tokenizer = &tok;
    }
    rollout::SamplingParams params(int64_t R) const {
        rollout::SamplingParams p;
        p.max_new_tokens = R;
        p.temperature = 1.3;
        p.eos_id = tokenizer::CharTokenizer::kEosId;
        p.stop_token_ids = tok.macro_ids();
        return p;
    }
    // The turn-by-turn schedule with rollout::generate as its turn generator (rlpt's loop before #13).
    GenerationOutput turn_by_turn(const std::vector<std::vector<int64_t>>& prompts, const std::vector<uint64_t>& seeds,
                                  const rollout::SamplingParams& p) {
        auto conversations = open_conversations(prompts, seeds, p, ctx);
        rollout::testing::run_turn_by_turn(
            *conversations,
            [&](const std::vector<std::vector<int64_t>>& pr, const std::vector<uint64_t>& sd,
                const rollout::SamplingParams& sp) {
                return rollout::generate(*model, pr, sd, sp, rollout::BatchLimits(64));
            },
            p);
        return conversations->finish();
    }
    GenerationOutput continuous(const std::vector<std::vector<int64_t>>& prompts, const std::vector<uint64_t>& seeds,
                                const rollout::SamplingParams& p, int64_t max_num_seqs) {
        return tool_agent_generate(*model, prompts, seeds, p, rollout::batch_limits(max_num_seqs, ctx), ctx);
    }
};

std::string calc_call(const std::string& expr) {
    return "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"" + expr + "\"}}</tool_call>";
}

void expect_same_trajectories(const GenerationOutput& a, const GenerationOutput& b) {
    ASSERT_EQ(a.responses.sizes(), b.responses.sizes());
    EXPECT_TRUE(torch::equal(a.prompts, b.prompts));
    EXPECT_TRUE(torch::equal(a.responses, b.responses));
    EXPECT_TRUE(torch::equal(a.response_mask, b.response_mask));
    EXPECT_TRUE(torch::equal(a.attention_mask, b.attention_mask));
    EXPECT_TRUE(torch::allclose(a.rollout_log_probs, b.rollout_log_probs, 0, 2e-5))
        << (a.rollout_log_probs - b.rollout_log_probs).abs().max().item<double>();
    EXPECT_EQ(a.finish_reasons, b.finish_reasons);
}

std::vector<std::vector<int64_t>> agent_prompts(const tokenizer::Tokenizer& tok, int64_t n) {
    std::vector<std::vector<int64_t>> out;
    for (const char* p : {"what is 6*7", "add 12 and 30", "(3+4)*2", "go", "compute 1/0 please", "x"})
        for (int64_t k = 0; k < n; ++k) out.push_back(tok.encode(p, false));
    return out;
}

std::vector<uint64_t> agent_seeds(size_t n) {
    std::vector<uint64_t> s;
    for (size_t i = 0; i < n; ++i) s.push_back(rollout::sample_seed(7, 3, static_cast<int64_t>(i)));
    return s;
}

TEST(AgentLoop, ContinuousMatchesTurnByTurnAtAnyMaxNumSeqs) {
    RealModel m({calc_call("6*7"), calc_call("1/0"), calc_call("(3+4)*2"),
                 "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>", calc_call("12+30"), "no call here"});
    m.ctx.args.multi_turn.max_assistant_turns = 6;
    const auto prompts = agent_prompts(m.tok, 3);
    const auto seeds = agent_seeds(prompts.size());
    auto p = m.params(160);
    const auto ref = m.turn_by_turn(prompts, seeds, p);
    const auto ref_values = m.ctx.sample_values;
    // The workload is multi-turn: observations appended, several turns, calls and errors.
    double max_turns = 0, obs = 0, calls = 0, errors = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        max_turns = std::max(max_turns, ref_values.at("num_turns")[i]);
        obs += ref_values.at("observation_tokens")[i];
        calls += ref_values.at("tool_call_counts")[i];
        errors += ref_values.at("tool_errors")[i];
    }
    EXPECT_GE(max_turns, 5.0);
    EXPECT_GT(obs, 0.0);
    EXPECT_GT(calls, errors);
    EXPECT_GT(errors, 0.0);
    // Observation tokens: mask 0 and log-prob 0; model tokens have their log-probs.
    EXPECT_TRUE(torch::all(ref.rollout_log_probs.masked_select(ref.response_mask == 0) == 0).item<bool>());
    for (int64_t slots : {1, 2, 3, 7, 64}) {
        SCOPED_TRACE(::testing::Message() << "max_num_seqs " << slots);
        auto g = m.continuous(prompts, seeds, p, slots);
        expect_same_trajectories(ref, g);
        for (const char* key : {"num_turns", "tool_call_counts", "tool_errors", "observation_tokens", "model_tokens"})
            EXPECT_EQ(m.ctx.sample_values.at(key), ref_values.at(key)) << key;
    }
    // Greedy too, and a token budget that leaves 2 slots.
    auto gp = p;
    gp.greedy = true;
    const auto gref = m.turn_by_turn(prompts, seeds, gp);
    rollout::BatchLimits l(8);
    l.max_num_batched_tokens = 2 * (18 + 160 - 1) + 5;  // the longest prompt has 18 tokens
    expect_same_trajectories(gref, tool_agent_generate(*m.model, prompts, seeds, gp, l, m.ctx));
    l.max_num_batched_tokens = 100;
    try {
        tool_agent_generate(*m.model, prompts, seeds, gp, l, m.ctx);
        ADD_FAILURE() << "no error";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("rollout.max_num_batched_tokens = 100"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("177"), std::string::npos) << e.what();
    }
}

TEST(AgentLoop, ContinuousEnvironmentAndMcpMatchTurnByTurn) {
    {  // An environment (retry_env.py): every turn's text is its action.
        RealModel m({"7", "5"});
        m.ctx.args.multi_turn.builtin_tools.clear();
        m.ctx.args.multi_turn.env_command = fmt::format("python3 {}/scripts/examples/retry_env.py", RLPT_SOURCE_DIR);
        m.ctx.args.multi_turn.env_workers = 2;
        const auto prompts = agent_prompts(m.tok, 2);
        const auto seeds = agent_seeds(prompts.size());
        m.ctx.ground_truth.assign(prompts.size(), "7");
        for (size_t i = 0; i < prompts.size(); ++i) m.ctx.sample_index.push_back(static_cast<int64_t>(100 + i));
        const auto ref = m.turn_by_turn(prompts, seeds, m.params(120));
        const auto ref_values = m.ctx.sample_values;
        EXPECT_GT(*std::max_element(ref_values.at("num_turns").begin(), ref_values.at("num_turns").end()), 2.0);
        for (int64_t slots : {1, 4, 64}) {
            expect_same_trajectories(ref, m.continuous(prompts, seeds, m.params(120), slots));
            EXPECT_EQ(m.ctx.sample_values.at("env_reward"), ref_values.at("env_reward"));
        }
    }
    {  // MCP calls (tests/agent/fault_mcp_server.py, answering after 50 ms, concurrently).
        RealModel m({"<tool_call>{\"name\": \"probe\", \"arguments\": {\"x\": 5}}</tool_call>",
                     "<tool_call>{\"name\": \"probe\", \"arguments\": {\"y\": 5}}</tool_call>", "done"});
        m.ctx.args.multi_turn.builtin_tools.clear();
        m.ctx.args.multi_turn.mcp_servers = {
            fmt::format("python3 {}/tests/agent/fault_mcp_server.py slow:0.05", RLPT_SOURCE_DIR)};
        m.ctx.args.multi_turn.max_assistant_turns = 5;
        const auto prompts = agent_prompts(m.tok, 2);
        const auto seeds = agent_seeds(prompts.size());
        const auto ref = m.turn_by_turn(prompts, seeds, m.params(140));
        const auto ref_values = m.ctx.sample_values;
        double calls = 0;
        for (double c : ref_values.at("tool_call_counts")) calls += c;
        EXPECT_GT(calls, 4.0);
        for (int64_t slots : {1, 3, 64}) {
            expect_same_trajectories(ref, m.continuous(prompts, seeds, m.params(140), slots));
            EXPECT_EQ(m.ctx.sample_values.at("tool_errors"), ref_values.at("tool_errors"));
        }
    }
}

// Tool waits overlap with decoding and with each other: one sample per slot would wait for its
// call in turn in the turn-by-turn loop (a barrier per turn), while the continuous loop keeps
// several calls in flight. Every call takes 0.4 s; timing bounds are generous (loaded machines).
TEST(AgentLoop, ToolCallsOfDifferentSamplesOverlap) {
    std::vector<std::string> probes;
    for (int k = 0; k < 12; ++k)
        probes.push_back(
            fmt::format("<tool_call>{{\"name\": \"probe\", \"arguments\": {{\"x\": {}}}}}</tool_call>", k));
    RealModel m(probes);
    m.ctx.args.multi_turn.builtin_tools.clear();
    m.ctx.args.multi_turn.mcp_servers = {
        fmt::format("python3 {}/tests/agent/fault_mcp_server.py slow:0.4", RLPT_SOURCE_DIR)};
    m.ctx.args.multi_turn.max_assistant_turns = 3;
    const auto prompts = agent_prompts(m.tok, 2);
    const auto seeds = agent_seeds(prompts.size());
    const double t0 = monotonic_s();
    auto g = m.continuous(prompts, seeds, m.params(200), 64);
    const double wall = monotonic_s() - t0;
    double calls = 0, latency = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        calls += m.ctx.sample_values.at("tool_call_counts")[i];
        latency += m.ctx.sample_values.at("tool_latency_s")[i];
    }
    ASSERT_GE(calls, 8.0);
    EXPECT_GE(latency, 0.4 * calls * 0.9);
    // Serial calls would take >= 0.4 s each; in flight together, the whole call takes well under half that.
    EXPECT_LT(wall, 0.5 * latency) << calls << " calls, " << latency << " s of tool latency";
}

}  // namespace
}  // namespace rlpt::agent
