#include "rlpt/agent/tool_agent.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "rlpt/agent/environment.h"
#include "rlpt/agent/line_process.h"
#include "rlpt/agent/tool_call.h"
#include "rlpt/core/error.h"
#include "rlpt/core/log.h"
#include "rlpt/rollout/response_rows.h"
#include "rlpt/rollout/sampler.h"

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
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15)
        return fmt::format("{}", static_cast<int64_t>(v));
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

}  // namespace

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

EncodedConversation encode_conversation(const tokenizer::Tokenizer& tok, ChatFamily family, const nlohmann::json& turns,
                                        int64_t eos_id) {
    check_tool_family(family, "model.chat_template");
    RLPT_CHECK(turns.is_array() && !turns.empty(), "conversation: expected a non-empty array of turns, got {}",
               turns.dump());
    // The token that closes an assistant turn: the template's end-of-turn token, else EOS.
    int64_t close = eos_id;
    for (const auto& s : tokenizer::chat_stop_tokens(family)) {
        if (const int64_t id = tok.token_to_id(s); id >= 0) {
            close = id;
            break;
        }
    }
    EncodedConversation out;
    std::vector<std::string> tools;  // the tool turns since the last assistant turn
    for (size_t k = 0; k < turns.size(); ++k) {
        const auto& t = turns[k];
        RLPT_CHECK(t.is_object() && t.contains("role") && t["role"].is_string() && t.contains("content") &&
                       t["content"].is_string(),
                   "conversation turn {}: expected {{\"role\": ..., \"content\": \"...\"}}, got {}", k, t.dump());
        const std::string role = t["role"].get<std::string>();
        const std::string content = t["content"].get<std::string>();
        RLPT_CHECK(role == "assistant" || role == "tool",
                   "conversation turn {}: role '{}' (expected assistant or tool)", k, role);
        RLPT_CHECK(k > 0 || role == "assistant", "conversation: the first turn must be the assistant's, got '{}'",
                   role);
        if (role == "tool") {
            tools.push_back(content);
        } else {
            if (!tools.empty()) {
                auto obs = encode_observation(tok, render_tool_observation(family, tools, /*turn_closed=*/true));
                out.ids.insert(out.ids.end(), obs.begin(), obs.end());
                out.loss_mask.insert(out.loss_mask.end(), obs.size(), 0);
                tools.clear();
            }
            auto ids = tok.encode(content, /*allow_special=*/false);
            if (close >= 0) ids.push_back(close);
            out.ids.insert(out.ids.end(), ids.begin(), ids.end());
            out.loss_mask.insert(out.loss_mask.end(), ids.size(), 1);
        }
    }
    RLPT_CHECK(turns.back()["role"] == "assistant",
               "conversation: the last turn must be the assistant's (the answer), got '{}'",
               turns.back()["role"].get<std::string>());
    return out;
}

namespace {

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
    // Tools of the current turn: results by call, calls still out; the environment's reply.
    std::vector<std::string> texts;
    size_t outstanding = 0;
    bool env_step = false;
    EnvReply env_reply;
};

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

// The conversations of one call, whatever schedules their turns (the turn-by-turn loop or the
// continuous engine): what happens when a turn ends (tool calls dispatched, environment stepped)
// and when the results are back (the observation appended). Tools run asynchronously: MCP calls
// and environment steps are submitted and collected by polling; built-in tools complete inline.
class Conversations {
  public:
    Conversations(const std::vector<std::vector<int64_t>>& prompts, const std::vector<uint64_t>& seeds,
                  const rollout::SamplingParams& params, rollout::GeneratorContext& ctx)
        : prompts_(prompts),
          seeds_(seeds),
          params_(params),
          ctx_(ctx),
          mt_(ctx.config->rollout.multi_turn),
          tok_(*ctx.tokenizer),
          st_(agent_state(ctx)),
          family_(tokenizer::parse_chat_family(ctx.config->model.chat_template)),
          R_(static_cast<size_t>(params.max_new_tokens)),
          s_(prompts.size()),
          episodes_(prompts.size()) {
        check_tool_family(family_, "model.chat_template");
        for (size_t i = 0; i < s_.size(); ++i)
            episodes_[i] = i < ctx.sample_index.size() ? ctx.sample_index[i] : static_cast<int64_t>(i);
        if (st_.mcp) st_.mcp->clear_restart_failures();
        if (!st_.env || s_.empty()) return;
        std::vector<nlohmann::json> fields;
        for (size_t i = 0; i < s_.size(); ++i) fields.push_back(sample_fields(ctx, i));
        auto replies = st_.env->reset(episodes_, fields);
        for (size_t i = 0; i < s_.size(); ++i) {
            if (!replies[i].error.empty()) env_failed(i, replies[i].error);
            else if (!replies[i].observation.empty()) observe(s_[i], encode_untrusted(tok_, replies[i].observation));
        }
    }

    size_t size() const { return s_.size(); }
    const Sample& operator[](size_t i) const { return s_[i]; }
    // The sequence a sample's next turn starts from: prompt ++ response so far.
    std::vector<int64_t> sequence(size_t i) const {
        std::vector<int64_t> ids = prompts_[i];
        ids.insert(ids.end(), s_[i].resp.begin(), s_[i].resp.end());
        return ids;
    }
    // The seed of a sample's next turn: turn 0 its own, turn t sample_seed(seed, t, 0).
    uint64_t turn_seed(size_t i) const {
        const int64_t t = s_[i].assistant_turns;
        return t == 0 ? seeds_[i] : rollout::sample_seed(seeds_[i], t, 0);
    }
    // Tokens the sample's next turn may add (the response budget left).
    size_t room(size_t i) const { return R_ - s_[i].resp.size(); }

    // A turn of sample i produced n tokens (ids, log-probs) and ended for `finish`. Appends them
    // (cut at the budget) and either ends the sample (false) or dispatches its tool calls or
    // environment step (true: the sample waits for collect()).
    bool end_turn(size_t i, const int64_t* ids, const float* lps, size_t n, FinishReason finish) {
        Sample& x = s_[i];
        const size_t cut = std::min(n, R_ - x.resp.size());
        std::vector<int64_t> new_ids(ids, ids + cut);
        x.resp.insert(x.resp.end(), new_ids.begin(), new_ids.end());
        x.mask.insert(x.mask.end(), cut, 1);
        x.log_probs.insert(x.log_probs.end(), lps, lps + cut);
        x.assistant_turns += 1;
        x.finish = cut < n ? FinishReason::kLength : finish;
        const std::string text = tok_.decode(new_ids, /*skip_special_tokens=*/false);
        x.turn_closed =
            family_ == ChatFamily::kQwen2 && text.size() >= 10 && text.compare(text.size() - 10, 10, "<|im_end|>") == 0;
        if (x.resp.size() >= R_ || x.finish == FinishReason::kLength ||
            (mt_.max_assistant_turns > 0 && x.assistant_turns >= mt_.max_assistant_turns)) {
            x.done = true;
            return false;
        }
        if (st_.env) {
            x.env_step = true;
            x.outstanding = 1;
            ++waiting_;
            env_of_[st_.env->submit_step(episodes_[i], tok_.decode(new_ids, /*skip_special_tokens=*/true))] = i;
            return true;
        }
        auto parsed = parse_tool_calls(mt_.format, text);
        if (parsed.calls.empty()) {
            x.done = true;
            return false;
        }
        const size_t keep = std::min(parsed.calls.size(), static_cast<size_t>(mt_.max_parallel_calls));
        x.texts.assign(keep, std::string());
        x.outstanding = keep;
        for (size_t k = 0; k < keep; ++k) dispatch(i, k, parsed.calls[k]);
        return true;
    }

    bool waiting() const { return waiting_ > 0; }

    // Samples whose tools or environment answered, each with its observation appended (returned
    // in `observation`) or ended (done). Waits up to timeout_s for the first when none has.
    struct Back {
        size_t sample;
        std::vector<int64_t> observation;
    };
    std::vector<Back> collect(double timeout_s) {
        const double wait = ready_.empty() ? timeout_s : 0.0;
        if (st_.env && st_.env->in_flight() > 0) {
            for (auto& [ticket, r] : st_.env->poll(wait)) {
                auto it = env_of_.find(ticket);
                if (it == env_of_.end()) continue;  // left over by an earlier call that threw
                const size_t i = it->second;
                env_of_.erase(it);
                s_[i].env_reply = std::move(r);
                s_[i].outstanding = 0;
                ready_.push_back(i);
            }
        } else if (st_.mcp && st_.mcp->in_flight() > 0) {
            for (auto& [ticket, r] : st_.mcp->poll(wait)) {
                auto it = mcp_of_.find(ticket);
                if (it == mcp_of_.end()) continue;  // left over by an earlier call that threw
                const auto [i, k] = it->second;
                mcp_of_.erase(it);
                record(i, k, r);
            }
        }
        std::vector<Back> back;
        for (size_t i : ready_) {
            --waiting_;
            back.push_back(Back{i, finish_observation(i)});
        }
        ready_.clear();
        return back;
    }

    rollout::GenerationOutput finish() {
        if (st_.env) st_.env->close(episodes_);
        auto& v = ctx_.sample_values;
        v.clear();
        std::vector<rollout::ResponseRow> rows(s_.size());
        for (size_t i = 0; i < s_.size(); ++i) {
            const Sample& x = s_[i];
            v["num_turns"].push_back(static_cast<double>(x.assistant_turns + x.user_turns + 1));
            v["tool_call_counts"].push_back(x.calls);
            v["tool_errors"].push_back(x.errors);
            v["tool_latency_s"].push_back(x.latency);
            v["tool_latency_max_s"].push_back(x.latency_max);
            v["observation_tokens"].push_back(x.obs_tokens);
            double own = 0;
            for (int64_t m : x.mask) own += static_cast<double>(m);
            v["model_tokens"].push_back(own);
            if (st_.env) {
                v["env_reward"].push_back(x.env_reward);
                v["env_errors"].push_back(x.env_errors);
            }
            rows[i] = rollout::ResponseRow{x.resp, x.log_probs, x.mask, x.finish, {}};
        }
        return rollout::assemble_rows(prompts_, rows, params_.pad_id, false);
    }

  private:
    // Appends observation ids (mask 0); false when they do not fit (the sample then ends).
    bool observe(Sample& x, const std::vector<int64_t>& ids) {
        if (x.resp.size() + ids.size() >= R_) {
            x.done = true;
            x.finish = FinishReason::kLength;
            return false;
        }
        x.resp.insert(x.resp.end(), ids.begin(), ids.end());
        x.mask.insert(x.mask.end(), ids.size(), 0);
        x.log_probs.insert(x.log_probs.end(), ids.size(), 0.0f);
        x.obs_tokens += static_cast<double>(ids.size());
        return true;
    }

    void env_failed(size_t i, const std::string& why) {
        RLPT_LOG_WARN("tool_agent: {}", why);
        s_[i].env_errors += 1;
        s_[i].done = true;
    }

    // Result k of sample i's turn.
    void record(size_t i, size_t k, const ToolResult& r) {
        Sample& x = s_[i];
        x.calls += 1;
        x.errors += r.is_error ? 1 : 0;
        x.latency += r.latency_s;
        x.latency_max = std::max(x.latency_max, r.latency_s);
        x.texts[k] = r.text;
        if (--x.outstanding == 0) ready_.push_back(i);
    }

    // Built-in tools and bad calls complete here; MCP calls are submitted.
    void dispatch(size_t i, size_t k, const ParsedToolCall& call) {
        if (k == 0) ++waiting_;
        const std::string& name = call.name;
        if (!call.error.empty()) {
            record(i, k, ToolResult{call.error, true, "malformed", 0.0});
        } else if (std::find(st_.builtin.begin(), st_.builtin.end(), name) != st_.builtin.end()) {
            record(i, k, run_calculator(call.arguments));
        } else if (const McpTool* t = st_.mcp ? st_.mcp->find_tool(name) : nullptr) {
            if (auto why = check_arguments(t->input_schema, call.arguments); !why.empty())
                record(i, k,
                       ToolResult{fmt::format("Invalid arguments for '{}': {}", name, why), true, "arguments", 0.0});
            else mcp_of_[st_.mcp->submit({name, call.arguments})] = {i, k};
        } else {
            std::string names;
            for (const auto& b : st_.builtin) names += (names.empty() ? "" : ", ") + b;
            if (st_.mcp)
                for (const auto& t2 : st_.mcp->tools()) names += (names.empty() ? "" : ", ") + t2.name;
            record(i, k,
                   ToolResult{fmt::format("Unknown function '{}'. Available tools: [{}]", name, names), true,
                              "unknown_tool", 0.0});
        }
    }

    // Sample i's results are all back: its observation (appended), or {} when it ended.
    std::vector<int64_t> finish_observation(size_t i) {
        Sample& x = s_[i];
        ObservationPieces o;
        if (x.env_step) {
            x.env_step = false;
            x.env_reward += x.env_reply.reward;
            if (!x.env_reply.error.empty()) env_failed(i, x.env_reply.error);
            else if (x.env_reply.done) x.done = true;
            if (x.done) return {};
            o = render_user_observation(family_, x.env_reply.observation, x.turn_closed);
        } else {
            for (auto& t : x.texts)
                t = truncate_tool_text(t, mt_.max_tool_response_length, mt_.tool_response_truncate_side);
            o = render_tool_observation(family_, x.texts, x.turn_closed);
            x.texts.clear();
        }
        auto ids = encode_observation(tok_, o);
        if (!observe(x, ids)) return {};
        x.user_turns += 1;
        if (mt_.max_user_turns > 0 && x.user_turns >= mt_.max_user_turns) x.done = true;
        return ids;
    }

    const std::vector<std::vector<int64_t>>& prompts_;
    const std::vector<uint64_t>& seeds_;
    const rollout::SamplingParams& params_;
    rollout::GeneratorContext& ctx_;
    const MultiTurnConfig& mt_;
    const tokenizer::Tokenizer& tok_;
    AgentState& st_;
    const ChatFamily family_;
    const size_t R_;
    std::vector<Sample> s_;
    std::vector<int64_t> episodes_;
    std::map<int64_t, std::pair<size_t, size_t>> mcp_of_;  // MCP ticket -> (sample, call)
    std::map<int64_t, size_t> env_of_;                     // environment ticket -> sample
    std::vector<size_t> ready_;                            // samples whose results are all back
    int64_t waiting_ = 0;                                  // samples with tools or a step out
};

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
        if (b == "calculator")
            tools.push_back(function_tool("calculator", "Evaluates an arithmetic expression", calculator_schema()));
    if (c.mcp_servers.empty()) return tools;
    McpClient mcp(c.mcp_servers, c.tool_timeout_s, c.server_start_timeout_s);
    mcp.start();
    for (const auto& t : mcp.tools()) tools.push_back(function_tool(t.name, t.description, t.input_schema));
    return tools;
}

namespace {

// Per-token stop lookup of the continuous engine: 0 = go on, 1 = eos, 2 = stop id (generator.h's
// rules: EOS wins over a stop id, then stop strings, then the turn's length).
std::optional<FinishReason> turn_finish(const std::vector<uint8_t>& table, rollout::StopStringMatcher& text,
                                        int64_t tok, size_t n, size_t max_tokens) {
    const bool stop_string = text.active() && text.push(tok);
    const uint8_t k = table[static_cast<size_t>(tok)];
    if (k != 0) return k == 1 ? FinishReason::kEos : FinishReason::kStop;
    if (stop_string) return FinishReason::kStop;
    if (n == max_tokens) return FinishReason::kLength;
    return std::nullopt;
}

// The continuous agent engine (tool_agent.h "Scheduling"): KV slots as in rollout::generate, a
// sample keeping its slot from admission to its end; a sample waiting for tools is parked (KV
// kept) while the others decode; its observation is prefilled after what the slot holds.
class AgentEngine {
  public:
    AgentEngine(model::CausalLM& model, Conversations& conv, const rollout::SamplingParams& params,
                const rollout::BatchLimits& limits)
        : model_(model), conv_(conv), params_(params), lockstep_(model.tp() != nullptr) {
        const int64_t V = model.args().vocab_size;
        table_.assign(static_cast<size_t>(V), 0);
        for (int64_t id : params.stop_token_ids) table_[static_cast<size_t>(id)] = 2;
        if (params.eos_id >= 0) table_[static_cast<size_t>(params.eos_id)] = 1;
        // Queue: the caller's order; samples whose first turn starts from the same tokens (a
        // GRPO group) share one prefill.
        std::map<std::vector<int64_t>, int64_t> first;
        int64_t longest = 0;
        for (size_t i = 0; i < conv.size(); ++i) {
            const auto prompt_len = static_cast<int64_t>(conv.sequence(i).size() - conv[i].resp.size());
            longest = std::max(longest, prompt_len);
            if (conv[i].done) continue;  // its environment failed at reset
            auto seq = conv.sequence(i);
            group_.push_back(first.emplace(seq, static_cast<int64_t>(first.size())).first->second);
            queue_.push_back(i);
        }
        group_hidden_.resize(first.size());
        // A slot holds a whole conversation: prompt + response budget - 1 (the last token is
        // never fed).
        const int64_t per_seq = longest + params.max_new_tokens - 1;
        int64_t slots =
            std::min<int64_t>(limits.max_num_seqs, std::max<int64_t>(1, static_cast<int64_t>(queue_.size())));
        if (limits.max_num_batched_tokens) {
            RLPT_CHECK(
                *limits.max_num_batched_tokens >= per_seq,
                "rollout.max_num_batched_tokens = {} cannot hold one conversation: the longest prompt ({} tokens) "
                "+ the response budget ({}) - 1 = {} KV positions",
                *limits.max_num_batched_tokens, longest, params.max_new_tokens, per_seq);
            slots = std::min(slots, *limits.max_num_batched_tokens / per_seq);
        }
        slot_.assign(static_cast<size_t>(slots), Slot{});
        for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(s);
        if (!queue_.empty()) cache_.emplace(model.make_cache(slots, per_seq));
    }

    void run() {
        std::vector<double> uniforms;
        std::vector<int64_t> next, tokens, positions;
        while (true) {
            admit();
            // Observations that arrived: prefilled into their slots. Blocks only when nothing
            // else can run (lockstep: tensor-parallel ranks wait for every result, see tool_agent.h).
            if (conv_.waiting()) {
                const bool idle = active_.empty() && (free_.empty() || next_ >= queue_.size());
                if (lockstep_) {
                    while (conv_.waiting()) resume(conv_.collect(3600.0));
                } else {
                    resume(conv_.collect(idle ? 3600.0 : 0.0));
                }
            }
            if (active_.empty()) {
                if (next_ >= queue_.size() && !conv_.waiting()) break;
                continue;
            }
            auto logits = model_.gathered_logits(hidden_);
            if (!params_.greedy) {
                uniforms.resize(active_.size());
                for (size_t k = 0; k < active_.size(); ++k) {
                    const Slot& sl = slot_[static_cast<size_t>(active_[k])];
                    uniforms[k] = rollout::uniform_draw(sl.seed, static_cast<int64_t>(sl.tokens.size()));
                }
            }
            const auto chosen = rollout::choose_tokens(logits, params_, uniforms);
            next.clear();
            tokens.clear();
            positions.clear();
            for (size_t k = 0; k < active_.size(); ++k) {
                const int64_t slot = active_[k];
                Slot& sl = slot_[static_cast<size_t>(slot)];
                sl.tokens.push_back(chosen.tokens[k]);
                sl.log_probs.push_back(chosen.log_probs[k]);
                if (auto done = turn_finish(table_, sl.text, chosen.tokens[k], sl.tokens.size(), sl.max_tokens)) {
                    const bool waits =
                        conv_.end_turn(sl.sample, sl.tokens.data(), sl.log_probs.data(), sl.tokens.size(), *done);
                    if (waits) sl.pending = chosen.tokens[k];  // parked: the slot keeps its KV
                    else free_slot(slot);
                } else {
                    next.push_back(slot);
                    tokens.push_back(chosen.tokens[k]);
                    positions.push_back(cache_->slot_length(slot));
                }
            }
            active_.swap(next);
            if (active_.empty()) {
                hidden_ = torch::Tensor();
                continue;
            }
            const auto device = model_.device();
            const auto n = static_cast<int64_t>(active_.size());
            cache_->bind_slots(active_);
            hidden_ = model_
                          .forward_hidden(torch::tensor(tokens, torch::kInt64).view({n, 1}).to(device), torch::Tensor(),
                                          torch::tensor(positions, torch::kInt64).view({n, 1}).to(device), &*cache_)
                          .select(1, 0);
        }
    }

  private:
    struct Slot {
        size_t sample = 0;
        bool used = false;
        int64_t group = -1;           // its first turn's group (the slot starts with its tokens)
        uint64_t seed = 0;            // this turn's stream
        size_t max_tokens = 0;        // this turn's budget
        std::vector<int64_t> tokens;  // this turn's tokens
        std::vector<float> log_probs;
        rollout::StopStringMatcher text;
        int64_t pending = -1;  // parked: the turn's last token, not yet fed
    };

    void start_turn(Slot& sl) {
        sl.seed = conv_.turn_seed(sl.sample);
        sl.max_tokens = conv_.room(sl.sample);
        sl.tokens.clear();
        sl.log_probs.clear();
        sl.pending = -1;
        sl.text = params_.token_texts ? rollout::StopStringMatcher(&params_.stop, params_.token_texts,
                                                                   params_.include_stop_str_in_output)
                                      : rollout::StopStringMatcher();
    }

    void free_slot(int64_t slot) {
        cache_->set_slot_length(slot, 0);
        slot_[static_cast<size_t>(slot)] = Slot{};
        free_.push_back(slot);
    }

    void add_active(const std::vector<int64_t>& slots, const torch::Tensor& h) {
        if (slots.empty()) return;
        hidden_ = hidden_.defined() ? torch::cat({hidden_, h}, 0) : h;
        active_.insert(active_.end(), slots.begin(), slots.end());
    }

    // Fills free slots with waiting samples: first turns whose tokens a live slot of the same
    // group holds copy them, the others are prefilled together (right-padded).
    void admit() {
        std::vector<int64_t> fresh, copied;
        while (!free_.empty() && next_ < queue_.size()) {
            const int64_t slot = free_.back();
            free_.pop_back();
            Slot& sl = slot_[static_cast<size_t>(slot)];
            sl.sample = queue_[next_];
            sl.group = group_[next_++];
            sl.used = true;
            start_turn(sl);
            bool shared = false;
            for (const auto& o : slot_) shared = shared || (&o != &sl && o.used && o.group == sl.group);
            (shared ? copied : fresh).push_back(slot);
        }
        if (!fresh.empty()) {
            std::vector<std::vector<int64_t>> seqs;
            for (int64_t s : fresh) seqs.push_back(conv_.sequence(slot_[static_cast<size_t>(s)].sample));
            auto h = prefill(fresh, seqs);
            for (size_t k = 0; k < fresh.size(); ++k)
                group_hidden_[static_cast<size_t>(slot_[static_cast<size_t>(fresh[k])].group)] =
                    h.narrow(0, static_cast<int64_t>(k), 1);
            add_active(fresh, h);
        }
        std::vector<torch::Tensor> hs;
        for (int64_t slot : copied) {
            const Slot& sl = slot_[static_cast<size_t>(slot)];
            const auto len = static_cast<int64_t>(conv_.sequence(sl.sample).size());
            int64_t src = -1;
            for (size_t o = 0; o < slot_.size() && src < 0; ++o)
                if (static_cast<int64_t>(o) != slot && slot_[o].used && slot_[o].group == sl.group &&
                    cache_->slot_length(static_cast<int64_t>(o)) >= len)
                    src = static_cast<int64_t>(o);
            RLPT_CHECK_KIND(InternalError, src >= 0, "tool_agent: no slot holds the first turn of slot {}", slot);
            cache_->copy_slot(slot, src, len);
            hs.push_back(group_hidden_[static_cast<size_t>(sl.group)]);
        }
        if (!copied.empty()) add_active(copied, torch::cat(hs, 0));
    }

    // Feeds seqs[b] after what slot slots[b] holds (one forward, right-padded): a first turn's
    // prompt into an empty slot, or a parked turn's last token and its observation. Returns the
    // hidden state after each sequence's last token [b, H].
    torch::Tensor prefill(const std::vector<int64_t>& slots, const std::vector<std::vector<int64_t>>& seqs) {
        const auto b = static_cast<int64_t>(slots.size());
        int64_t T = 0;
        bool empty_slots = true;
        std::vector<int64_t> lens;
        for (size_t k = 0; k < slots.size(); ++k) {
            T = std::max<int64_t>(T, static_cast<int64_t>(seqs[k].size()));
            lens.push_back(static_cast<int64_t>(seqs[k].size()));
            empty_slots = empty_slots && cache_->slot_length(slots[k]) == 0;
        }
        auto ids = torch::full({b, T}, params_.pad_id, torch::kInt64);
        auto mask = torch::zeros({b, T}, torch::kInt64);
        auto pos = torch::zeros({b, T}, torch::kInt64);
        for (int64_t k = 0; k < b; ++k) {
            const auto& sq = seqs[static_cast<size_t>(k)];
            const int64_t start = cache_->slot_length(slots[static_cast<size_t>(k)]);
            std::copy(sq.begin(), sq.end(), ids.data_ptr<int64_t>() + k * T);
            std::fill(mask.data_ptr<int64_t>() + k * T, mask.data_ptr<int64_t>() + k * T + lens[static_cast<size_t>(k)],
                      1);
            auto* p = pos.data_ptr<int64_t>() + k * T;
            for (int64_t t = 0; t < T; ++t) p[t] = start + t;
        }
        const auto device = model_.device();
        // Empty slots: the engine's plain prefill (the sampler's numerics); else an extend.
        if (empty_slots) cache_->bind_slots(slots);
        else cache_->bind_slots(slots, lens);
        auto h = model_.forward_hidden(ids.to(device), mask.to(device), pos.to(device), &*cache_);
        auto last = torch::tensor(lens, torch::kInt64).to(device) - 1;
        h = h.index({torch::arange(b, torch::TensorOptions().dtype(torch::kInt64).device(device)), last});
        if (empty_slots)
            for (int64_t k = 0; k < b; ++k)
                cache_->set_slot_length(slots[static_cast<size_t>(k)], lens[static_cast<size_t>(k)]);
        return h;
    }

    // Samples whose results came back: ended ones free their slot, the others get their
    // observation prefilled after the parked turn and decode their next turn.
    void resume(const std::vector<Conversations::Back>& back) {
        std::vector<int64_t> slots;
        std::vector<std::vector<int64_t>> seqs;
        for (const auto& r : back) {
            int64_t slot = -1;
            for (size_t o = 0; o < slot_.size() && slot < 0; ++o)
                if (slot_[o].used && slot_[o].sample == r.sample && slot_[o].pending >= 0)
                    slot = static_cast<int64_t>(o);
            RLPT_CHECK_KIND(InternalError, slot >= 0, "tool_agent: sample {} came back without a parked slot",
                            r.sample);
            Slot& sl = slot_[static_cast<size_t>(slot)];
            if (conv_[r.sample].done) {
                free_slot(slot);
                continue;
            }
            std::vector<int64_t> chunk{sl.pending};
            chunk.insert(chunk.end(), r.observation.begin(), r.observation.end());
            start_turn(sl);
            slots.push_back(slot);
            seqs.push_back(std::move(chunk));
        }
        if (!slots.empty()) add_active(slots, prefill(slots, seqs));
    }

    model::CausalLM& model_;
    Conversations& conv_;
    const rollout::SamplingParams& params_;
    const bool lockstep_;
    std::vector<uint8_t> table_;
    std::vector<size_t> queue_;                // samples in admission order
    std::vector<int64_t> group_;               // per queue entry: its first turn's group
    size_t next_ = 0;                          // queue_[0, next_) admitted
    std::vector<torch::Tensor> group_hidden_;  // per group: hidden state after its first sequence
    std::optional<model::KVCache> cache_;
    std::vector<Slot> slot_;
    std::vector<int64_t> free_, active_;
    torch::Tensor hidden_;  // [active_.size(), H]
};

void check_call(const std::vector<std::vector<int64_t>>& prompts, const std::vector<uint64_t>& seeds,
                const rollout::SamplingParams& params, const rollout::GeneratorContext& ctx, int64_t vocab) {
    RLPT_CHECK_KIND(InternalError, ctx.config != nullptr && ctx.tokenizer != nullptr,
                    "tool_agent: the generator context has no config or tokenizer");
    rollout::validate_sampling_params(params, vocab);
    RLPT_CHECK(seeds.size() == prompts.size(), "tool_agent: {} seeds for {} prompts", seeds.size(), prompts.size());
}

}  // namespace

rollout::GenerationOutput tool_agent_generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                              int64_t max_num_seqs, rollout::GeneratorContext& ctx) {
    return continuous_agent_loop(model, prompts, seeds, params, rollout::batch_limits(max_num_seqs, ctx), ctx);
}

rollout::GenerationOutput continuous_agent_loop(model::CausalLM& model,
                                                const std::vector<std::vector<int64_t>>& prompts,
                                                const std::vector<uint64_t>& seeds,
                                                const rollout::SamplingParams& params,
                                                const rollout::BatchLimits& limits, rollout::GeneratorContext& ctx) {
    check_call(prompts, seeds, params, ctx, model.args().vocab_size);
    rollout::validate_batch_limits(limits);
    rollout::check_prompts(prompts, model.args().vocab_size);
    torch::NoGradGuard no_grad;
    Conversations conv(prompts, seeds, params, ctx);
    AgentEngine(model, conv, params, limits).run();
    return conv.finish();
}

rollout::GenerationOutput run_agent_loop(const TurnGenerator& generate_turn,
                                         const std::vector<std::vector<int64_t>>& prompts,
                                         const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                         rollout::GeneratorContext& ctx) {
    check_call(prompts, seeds, params, ctx, -1);
    Conversations conv(prompts, seeds, params, ctx);
    for (;;) {
        std::vector<size_t> active;
        std::vector<std::vector<int64_t>> turn_prompts;
        std::vector<uint64_t> turn_seeds;
        size_t room = 0;
        for (size_t i = 0; i < conv.size(); ++i) {
            if (conv[i].done) continue;
            active.push_back(i);
            turn_prompts.push_back(conv.sequence(i));
            turn_seeds.push_back(conv.turn_seed(i));
            room = std::max(room, conv.room(i));
        }
        if (active.empty()) break;
        rollout::SamplingParams p = params;
        p.max_new_tokens = static_cast<int64_t>(room);
        auto g = generate_turn(turn_prompts, turn_seeds, p);
        auto gr = g.responses.contiguous();
        auto gm = g.response_mask.contiguous();
        auto gl = g.rollout_log_probs.contiguous();
        for (size_t j = 0; j < active.size(); ++j) {
            const auto jj = static_cast<int64_t>(j);
            const auto n = static_cast<size_t>(gm[jj].sum().item<int64_t>());
            conv.end_turn(active[j], gr[jj].data_ptr<int64_t>(), gl[jj].data_ptr<float>(), n, g.finish_reasons[j]);
        }
        // The turn's tools and environment steps all run before the next turn (a barrier).
        while (conv.waiting()) conv.collect(3600.0);
    }
    return conv.finish();
}

}  // namespace rlpt::agent
