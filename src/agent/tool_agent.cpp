#include "rlpt/agent/tool_agent.h"

#include <algorithm>
#include <cmath>

#include "rlpt/agent/environment.h"
#include "rlpt/agent/line_process.h"
#include "rlpt/agent/tool_call.h"
#include "rlpt/core/error.h"
#include "rlpt/core/log.h"

namespace rlpt::agent {
namespace {

using rollout::FinishReason;
using tokenizer::ChatFamily;

// The worker's agent state (GeneratorContext::state).
struct AgentState {
    std::unique_ptr<McpClient> mcp;
    std::unique_ptr<EnvironmentPool> env;
    std::vector<std::string> builtin;  // built-in tool names
};

AgentState& agent_state(rollout::GeneratorContext& ctx) {
    if (!ctx.state) {
        const auto& mt = ctx.config->rollout.multi_turn;
        auto st = std::make_shared<AgentState>();
        st->builtin = mt.builtin_tools;
        if (!mt.mcp_servers.empty()) {
            st->mcp = std::make_unique<McpClient>(mt.mcp_servers, mt.tool_timeout_s, mt.server_start_timeout_s);
            st->mcp->start();
        }
        if (!mt.env_command.empty())
            st->env = std::make_unique<EnvironmentPool>(mt.env_command, mt.env_workers, mt.env_timeout_s);
        ctx.state = st;
    }
    return *std::static_pointer_cast<AgentState>(ctx.state);
}

// Recursive descent over + - * / ( ) and decimal numbers.
class Calculator {
  public:
    explicit Calculator(const std::string& s) : s_(s) {}
    double run() {
        const double v = expr();
        skip();
        if (i_ != s_.size()) fail("unexpected '" + s_.substr(i_, 1) + "'");
        return v;
    }

  private:
    [[noreturn]] void fail(const std::string& why) { throw ValueError(why); }
    void skip() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    bool eat(char c) {
        skip();
        if (i_ < s_.size() && s_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    double expr() {
        double v = term();
        for (;;) {
            if (eat('+')) v += term();
            else if (eat('-')) v -= term();
            else return v;
        }
    }
    double term() {
        double v = factor();
        for (;;) {
            if (eat('*')) {
                v *= factor();
            } else if (eat('/')) {
                const double d = factor();
                if (d == 0) fail("division by zero");
                v /= d;
            } else {
                return v;
            }
        }
    }
    double factor() {
        if (++depth_ > 64) fail("expression nested too deeply");
        double v;
        if (eat('-')) v = -factor();
        else if (eat('+')) v = factor();
        else if (eat('(')) {
            v = expr();
            if (!eat(')')) fail("missing ')'");
        } else {
            skip();
            const size_t start = i_;
            while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.')) ++i_;
            if (start == i_) fail(i_ < s_.size() ? "unexpected '" + s_.substr(i_, 1) + "'" : "unexpected end");
            try {
                v = std::stod(s_.substr(start, i_ - start));
            } catch (const std::exception&) {
                fail("bad number '" + s_.substr(start, i_ - start) + "'");
            }
        }
        --depth_;
        return v;
    }
    const std::string& s_;
    size_t i_ = 0;
    int depth_ = 0;
};

std::string format_number(double v) {
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
    return fmt::format("{}", v);
}

// Encodes text a tool or environment produced: special tokens are not matched, and characters the
// vocabulary cannot represent (a character tokenizer's charset) are dropped.
std::vector<int64_t> encode_untrusted(const tokenizer::Tokenizer& tok, const std::string& text) {
    try {
        return tok.encode(text, /*allow_special=*/false);
    } catch (const ValueError&) {
    }
    std::vector<int64_t> out;
    for (size_t i = 0; i < text.size();) {
        size_t n = 1;
        while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
        try {
            auto ids = tok.encode(text.substr(i, n), false);
            out.insert(out.end(), ids.begin(), ids.end());
        } catch (const ValueError&) {
        }
        i += n;
    }
    return out;
}

std::vector<int64_t> encode_observation(const tokenizer::Tokenizer& tok, const ObservationPieces& o) {
    std::vector<int64_t> ids;
    for (size_t k = 0; k < o.pieces.size(); ++k) {
        if (!o.pieces[k].empty()) {
            auto p = tok.encode(o.pieces[k], /*allow_special=*/true);
            ids.insert(ids.end(), p.begin(), p.end());
        }
        if (k < o.texts.size()) {
            auto t = encode_untrusted(tok, o.texts[k]);
            ids.insert(ids.end(), t.begin(), t.end());
        }
    }
    return ids;
}

struct Sample {
    std::vector<int64_t> resp;
    std::vector<int64_t> mask;
    std::vector<float> log_probs;
    int64_t assistant_turns = 0;
    int64_t user_turns = 0;
    bool done = false;
    FinishReason finish = FinishReason::kLength;
    bool turn_closed = false;  // the last turn ended with the template's end-of-turn token
    double calls = 0, errors = 0, latency = 0, latency_max = 0, obs_tokens = 0, env_reward = 0, env_errors = 0;
};

// One call of one sample, on its way to a result.
struct PendingCall {
    size_t sample;
    size_t slot;  // index among the sample's calls this turn
    ParsedToolCall call;
};

// Runs every sample's calls: built-in inline, MCP all at once. texts[sample][slot] get the results.
void run_calls(AgentState& st, const std::vector<PendingCall>& calls, std::vector<Sample>& s,
               std::vector<std::vector<std::string>>& texts) {
    std::vector<ToolCallRequest> mcp_calls;
    std::vector<size_t> mcp_of;
    auto record = [&](const PendingCall& c, const ToolResult& r) {
        Sample& x = s[c.sample];
        x.calls += 1;
        x.errors += r.is_error ? 1 : 0;
        x.latency += r.latency_s;
        x.latency_max = std::max(x.latency_max, r.latency_s);
        texts[c.sample][c.slot] = r.text;
    };
    for (size_t k = 0; k < calls.size(); ++k) {
        const auto& c = calls[k];
        const std::string& name = c.call.name;
        if (!c.call.error.empty()) {
            record(c, ToolResult{c.call.error, true, "malformed", 0.0});
        } else if (std::find(st.builtin.begin(), st.builtin.end(), name) != st.builtin.end()) {
            record(c, run_calculator(c.call.arguments));
        } else if (const McpTool* t = st.mcp ? st.mcp->find_tool(name) : nullptr) {
            if (auto why = check_arguments(t->input_schema, c.call.arguments); !why.empty()) {
                record(c, ToolResult{fmt::format("Invalid arguments for '{}': {}", name, why), true, "arguments", 0.0});
            } else {
                mcp_calls.push_back({name, c.call.arguments});
                mcp_of.push_back(k);
            }
        } else {
            std::string names;
            for (const auto& b : st.builtin) names += (names.empty() ? "" : ", ") + b;
            if (st.mcp)
                for (const auto& t2 : st.mcp->tools()) names += (names.empty() ? "" : ", ") + t2.name;
            record(c, ToolResult{fmt::format("Unknown function '{}'. Available tools: [{}]", name, names), true,
                                 "unknown_tool", 0.0});
        }
    }
    if (mcp_calls.empty()) return;
    auto results = st.mcp->call_many(mcp_calls);
    for (size_t k = 0; k < results.size(); ++k) record(calls[mcp_of[k]], results[k]);
}

nlohmann::json sample_fields(const rollout::GeneratorContext& ctx, size_t i) {
    nlohmann::json j = nlohmann::json::object();
    auto at = [&](const std::vector<std::string>& v) { return i < v.size() ? v[i] : std::string(); };
    j["data_source"] = at(ctx.data_source);
    j["ground_truth"] = at(ctx.ground_truth);
    const std::string extra = at(ctx.extra);
    nlohmann::json e = nlohmann::json::parse(extra.empty() ? "{}" : extra, nullptr, false);
    j["extra"] = e.is_discarded() ? nlohmann::json(extra) : e;
    return j;
}

// Prompts left-padded, responses right-padded: GenerationOutput's layout.
rollout::GenerationOutput assemble(const std::vector<std::vector<int64_t>>& prompts, const std::vector<Sample>& s,
                                   int64_t pad_id) {
    const int64_t B = static_cast<int64_t>(prompts.size());
    int64_t P = 0, R = 0;
    for (int64_t i = 0; i < B; ++i) {
        P = std::max<int64_t>(P, static_cast<int64_t>(prompts[static_cast<size_t>(i)].size()));
        R = std::max<int64_t>(R, static_cast<int64_t>(s[static_cast<size_t>(i)].resp.size()));
    }
    rollout::GenerationOutput out;
    out.prompts = torch::full({B, P}, pad_id, torch::kInt64);
    out.responses = torch::full({B, R}, pad_id, torch::kInt64);
    out.response_mask = torch::zeros({B, R}, torch::kInt64);
    out.rollout_log_probs = torch::zeros({B, R}, torch::kFloat32);
    auto attn = torch::zeros({B, P + R}, torch::kInt64);
    auto pa = out.prompts.accessor<int64_t, 2>();
    auto ra = out.responses.accessor<int64_t, 2>();
    auto ma = out.response_mask.accessor<int64_t, 2>();
    auto la = out.rollout_log_probs.accessor<float, 2>();
    auto aa = attn.accessor<int64_t, 2>();
    for (int64_t i = 0; i < B; ++i) {
        const auto& p = prompts[static_cast<size_t>(i)];
        const auto& x = s[static_cast<size_t>(i)];
        const int64_t off = P - static_cast<int64_t>(p.size());
        for (size_t k = 0; k < p.size(); ++k) {
            pa[i][off + static_cast<int64_t>(k)] = p[k];
            aa[i][off + static_cast<int64_t>(k)] = 1;
        }
        for (size_t k = 0; k < x.resp.size(); ++k) {
            const auto kk = static_cast<int64_t>(k);
            ra[i][kk] = x.resp[k];
            ma[i][kk] = x.mask[k];
            la[i][kk] = x.log_probs[k];
            aa[i][P + kk] = 1;
        }
        out.finish_reasons.push_back(x.finish);
    }
    out.input_ids = torch::cat({out.prompts, out.responses}, 1);
    out.attention_mask = attn;
    out.position_ids = (attn.cumsum(1) - 1).clamp_min(0);
    return out;
}

}  // namespace

nlohmann::json calculator_schema() {
    return nlohmann::json::parse(
        R"J({"type":"object","properties":{"expression":{"type":"string","description":"arithmetic with + - * / and parentheses, e.g. 12*(3+4)"}},"required":["expression"]})J");
}

ToolResult run_calculator(const nlohmann::json& arguments) {
    const double t0 = monotonic_s();
    ToolResult r;
    if (auto why = check_arguments(calculator_schema(), arguments); !why.empty()) {
        r = ToolResult{"Invalid arguments for 'calculator': " + why, true, "arguments", 0.0};
    } else {
        try {
            r.text = format_number(Calculator(arguments["expression"].get<std::string>()).run());
        } catch (const ValueError& e) {
            r = ToolResult{"Error executing tool 'calculator': " + e.message(), true, "tool", 0.0};
        }
    }
    r.latency_s = monotonic_s() - t0;
    return r;
}

std::vector<nlohmann::json> list_tool_schemas(const MultiTurnConfig& c) {
    std::vector<nlohmann::json> tools;
    for (const auto& b : c.builtin_tools)
        if (b == "calculator") tools.push_back(function_tool("calculator", "Evaluates an arithmetic expression", calculator_schema()));
    if (c.mcp_servers.empty()) return tools;
    McpClient mcp(c.mcp_servers, c.tool_timeout_s, c.server_start_timeout_s);
    mcp.start();
    for (const auto& t : mcp.tools()) tools.push_back(function_tool(t.name, t.description, t.input_schema));
    return tools;
}

rollout::GenerationOutput tool_agent_generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                              int64_t micro_batch_size, rollout::GeneratorContext& ctx) {
    return run_agent_loop(
        [&](const std::vector<std::vector<int64_t>>& p, const std::vector<uint64_t>& s, const rollout::SamplingParams& sp) {
            return rollout::generate(model, p, s, sp, rollout::batch_limits(micro_batch_size, ctx));
        },
        prompts, seeds, params, ctx);
}

rollout::GenerationOutput run_agent_loop(const TurnGenerator& generate_turn, const std::vector<std::vector<int64_t>>& prompts,
                                         const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                         rollout::GeneratorContext& ctx) {
    RLPT_CHECK_KIND(InternalError, ctx.config != nullptr && ctx.tokenizer != nullptr,
                    "tool_agent: the generator context has no config or tokenizer");
    rollout::validate_sampling_params(params, -1);
    RLPT_CHECK(seeds.size() == prompts.size(), "tool_agent: {} seeds for {} prompts", seeds.size(), prompts.size());
    const auto& mt = ctx.config->rollout.multi_turn;
    const auto& tok = *ctx.tokenizer;
    AgentState& st = agent_state(ctx);
    const ChatFamily family = tokenizer::parse_chat_family(ctx.config->model.chat_template);
    check_tool_family(family, "model.chat_template");
    const size_t B = prompts.size();
    const auto R = static_cast<size_t>(params.max_new_tokens);
    std::vector<Sample> s(B);
    std::vector<int64_t> episodes(B);
    for (size_t i = 0; i < B; ++i) episodes[i] = i < ctx.sample_index.size() ? ctx.sample_index[i] : static_cast<int64_t>(i);

    // Appends observation ids (mask 0); false when they do not fit (the sample then ends).
    auto observe = [&](Sample& x, const std::vector<int64_t>& ids) {
        if (x.resp.size() + ids.size() >= R) {
            x.done = true;
            x.finish = FinishReason::kLength;
            return false;
        }
        x.resp.insert(x.resp.end(), ids.begin(), ids.end());
        x.mask.insert(x.mask.end(), ids.size(), 0);
        x.log_probs.insert(x.log_probs.end(), ids.size(), 0.0f);
        x.obs_tokens += static_cast<double>(ids.size());
        return true;
    };
    auto env_failed = [&](size_t i, const std::string& why) {
        RLPT_LOG_WARN("tool_agent: {}", why);
        s[i].env_errors += 1;
        s[i].done = true;
    };

    if (st.env && B > 0) {
        std::vector<nlohmann::json> fields;
        for (size_t i = 0; i < B; ++i) fields.push_back(sample_fields(ctx, i));
        auto replies = st.env->reset(episodes, fields);
        for (size_t i = 0; i < B; ++i) {
            if (!replies[i].error.empty()) env_failed(i, replies[i].error);
            else if (!replies[i].observation.empty()) observe(s[i], encode_untrusted(tok, replies[i].observation));
        }
    }

    for (int64_t turn = 0;; ++turn) {
        std::vector<size_t> active;
        for (size_t i = 0; i < B; ++i)
            if (!s[i].done) active.push_back(i);
        if (active.empty()) break;
        std::vector<std::vector<int64_t>> turn_prompts;
        std::vector<uint64_t> turn_seeds;
        size_t room = 0;
        for (size_t i : active) {
            std::vector<int64_t> ids = prompts[i];
            ids.insert(ids.end(), s[i].resp.begin(), s[i].resp.end());
            turn_prompts.push_back(std::move(ids));
            turn_seeds.push_back(turn == 0 ? seeds[i] : rollout::sample_seed(seeds[i], turn, 0));
            room = std::max(room, R - s[i].resp.size());
        }
        rollout::SamplingParams p = params;
        p.max_new_tokens = static_cast<int64_t>(room);
        auto g = generate_turn(turn_prompts, turn_seeds, p);
        auto gr = g.responses.contiguous();
        auto gm = g.response_mask.contiguous();
        auto gl = g.rollout_log_probs.contiguous();
        std::vector<PendingCall> calls;
        std::vector<size_t> env_samples;
        std::vector<std::string> actions;
        std::vector<std::vector<std::string>> texts(B);
        for (size_t j = 0; j < active.size(); ++j) {
            const size_t i = active[j];
            Sample& x = s[i];
            const auto jj = static_cast<int64_t>(j);
            const int64_t n = gm[jj].sum().item<int64_t>();
            const size_t cut = std::min(static_cast<size_t>(n), R - x.resp.size());
            std::vector<int64_t> new_ids(gr[jj].data_ptr<int64_t>(), gr[jj].data_ptr<int64_t>() + cut);
            x.resp.insert(x.resp.end(), new_ids.begin(), new_ids.end());
            x.mask.insert(x.mask.end(), cut, 1);
            x.log_probs.insert(x.log_probs.end(), gl[jj].data_ptr<float>(), gl[jj].data_ptr<float>() + cut);
            x.assistant_turns += 1;
            x.finish = cut < static_cast<size_t>(n) ? FinishReason::kLength : g.finish_reasons[j];
            const std::string text = tok.decode(new_ids, /*skip_special_tokens=*/false);
            x.turn_closed = family == ChatFamily::kQwen2 && text.size() >= 10 && text.compare(text.size() - 10, 10, "<|im_end|>") == 0;
            if (x.resp.size() >= R || x.finish == FinishReason::kLength ||
                (mt.max_assistant_turns > 0 && x.assistant_turns >= mt.max_assistant_turns)) {
                x.done = true;
                continue;
            }
            if (st.env) {
                env_samples.push_back(i);
                actions.push_back(tok.decode(new_ids, /*skip_special_tokens=*/true));
                continue;
            }
            auto parsed = parse_tool_calls(mt.format, text);
            if (parsed.calls.empty()) {
                x.done = true;
                continue;
            }
            const size_t keep = std::min(parsed.calls.size(), static_cast<size_t>(mt.max_parallel_calls));
            texts[i].resize(keep);
            for (size_t k = 0; k < keep; ++k) calls.push_back(PendingCall{i, k, std::move(parsed.calls[k])});
        }
        run_calls(st, calls, s, texts);
        std::vector<std::pair<size_t, ObservationPieces>> observations;
        for (size_t i = 0; i < B; ++i) {
            if (texts[i].empty()) continue;
            for (auto& t : texts[i]) t = truncate_tool_text(t, mt.max_tool_response_length, mt.tool_response_truncate_side);
            observations.emplace_back(i, render_tool_observation(family, texts[i], s[i].turn_closed));
        }
        if (!env_samples.empty()) {
            std::vector<int64_t> eps;
            for (size_t i : env_samples) eps.push_back(episodes[i]);
            auto replies = st.env->step(eps, actions);
            for (size_t k = 0; k < env_samples.size(); ++k) {
                const size_t i = env_samples[k];
                s[i].env_reward += replies[k].reward;
                if (!replies[k].error.empty()) env_failed(i, replies[k].error);
                else if (replies[k].done) s[i].done = true;
                else observations.emplace_back(i, render_user_observation(family, replies[k].observation, s[i].turn_closed));
            }
        }
        for (auto& [i, o] : observations) {
            if (!observe(s[i], encode_observation(tok, o))) continue;
            s[i].user_turns += 1;
            if (mt.max_user_turns > 0 && s[i].user_turns >= mt.max_user_turns) s[i].done = true;
        }
    }
    if (st.env) st.env->close(episodes);

    auto& v = ctx.sample_values;
    v.clear();
    for (const auto& x : s) {
        v["num_turns"].push_back(static_cast<double>(x.assistant_turns + x.user_turns + 1));
        v["tool_call_counts"].push_back(x.calls);
        v["tool_errors"].push_back(x.errors);
        v["tool_latency_s"].push_back(x.latency);
        v["tool_latency_max_s"].push_back(x.latency_max);
        v["observation_tokens"].push_back(x.obs_tokens);
        double own = 0;
        for (int64_t m : x.mask) own += static_cast<double>(m);
        v["model_tokens"].push_back(own);
        if (!st.env) continue;
        v["env_reward"].push_back(x.env_reward);
        v["env_errors"].push_back(x.env_errors);
    }
    return assemble(prompts, s, params.pad_id);
}

}  // namespace rlpt::agent
