#include "rlpt/agent/tool_agent.h"

#include <algorithm>
#include <iterator>
#include <map>

#include "rlpt/agent/builtin_tools.h"
#include "rlpt/agent/environment.h"
#include "rlpt/agent/tool_call.h"
#include "rlpt/core/error.h"
#include "rlpt/core/log.h"
#include "rlpt/rollout/engine.h"
#include "rlpt/rollout/response_rows.h"

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
        const MultiTurnConfig& mt = ctx.args.multi_turn;
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
                                        int64_t eos_id, const tokenizer::ChatOptions& options) {
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
                auto obs =
                    encode_observation(tok, render_tool_observation(family, tools, /*turn_closed=*/true, options));
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

// The conversations of one call (tool_agent.h): what happens when a turn ends (tool calls
// dispatched, environment stepped) and when the results are back (the observation appended).
// Tools run asynchronously: MCP calls and environment steps are submitted and collected by
// polling; built-in tools complete inline.
class Conversations final : public ConversationSource {
  public:
    Conversations(const std::vector<std::vector<int64_t>>& prompts, const std::vector<uint64_t>& seeds,
                  const rollout::SamplingParams& params, rollout::GeneratorContext& ctx)
        : prompts_(prompts),
          seeds_(seeds),
          params_(params),
          ctx_(ctx),
          mt_(ctx.args.multi_turn),
          tok_(*ctx.tokenizer),
          st_(agent_state(ctx)),
          family_(tokenizer::parse_chat_family(ctx.args.chat_template)),
          chat_options_{ctx.args.enable_thinking},
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

    // Samples whose environment failed at reset are finished before their first turn.
    std::vector<rollout::QueuedSequence> sequences() override {
        std::vector<rollout::QueuedSequence> queue;
        for (size_t i = 0; i < s_.size(); ++i)
            if (!s_[i].done) queue.push_back(rollout::QueuedSequence{i, sequence(i)});
        return queue;
    }

    rollout::SequenceBounds bounds() const override {
        int64_t longest = 0;
        for (const auto& p : prompts_) longest = std::max<int64_t>(longest, std::ssize(p));
        return rollout::SequenceBounds{longest, params_.max_new_tokens};
    }

    // Turn 0 of a sample uses its seed, turn t sample_seed(seed, t, 0); a turn may add what is
    // left of the response budget.
    rollout::TurnSpec start_turn(size_t i) override {
        const int64_t t = s_[i].assistant_turns;
        return rollout::TurnSpec{t == 0 ? seeds_[i] : rollout::sample_seed(seeds_[i], t, 0),
                                 static_cast<int64_t>(R_ - s_[i].resp.size())};
    }

    // Appends the turn's tokens and either ends the sample (false) or dispatches its tool calls or
    // environment step (true: the sample waits for collect()).
    bool end_turn(size_t i, const rollout::Turn& turn) override {
        Sample& x = s_[i];
        RLPT_CHECK_KIND(InternalError, x.resp.size() + turn.tokens.size() <= R_,
                        "tool_agent: a turn of {} tokens after {} of a {}-token budget", turn.tokens.size(),
                        x.resp.size(), R_);
        const std::vector<int64_t> new_ids(turn.tokens.begin(), turn.tokens.end());
        x.resp.insert(x.resp.end(), new_ids.begin(), new_ids.end());
        x.mask.insert(x.mask.end(), new_ids.size(), 1);
        x.log_probs.insert(x.log_probs.end(), turn.log_probs.begin(), turn.log_probs.end());
        x.assistant_turns += 1;
        x.finish = turn.finish;
        const std::string text = tok_.decode(new_ids, /*skip_special_tokens=*/false);
        x.turn_closed = (family_ == ChatFamily::kQwen2 || family_ == ChatFamily::kQwen3) && text.size() >= 10 &&
                        text.compare(text.size() - 10, 10, "<|im_end|>") == 0;
        if (x.resp.size() >= R_ || x.finish == FinishReason::kLength ||
            (mt_.max_assistant_turns > 0 && x.assistant_turns >= mt_.max_assistant_turns)) {
            x.done = true;
            return false;
        }
        if (st_.env) {
            x.env_step = true;
            x.outstanding = 1;
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

    // Samples whose tools or environment answered, each with its observation appended (the
    // continuation's tokens) or ended. Waits up to timeout_s for the first when none has.
    std::vector<rollout::Continuation> collect(double timeout_s) override {
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
        std::vector<rollout::Continuation> back;
        for (size_t i : ready_) {
            auto observation = finish_observation(i);
            back.push_back(rollout::Continuation{i, s_[i].done, std::move(observation)});
        }
        ready_.clear();
        return back;
    }

    rollout::GenerationOutput finish() override {
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
    // What a sample's next turn starts from: prompt ++ response so far.
    std::vector<int64_t> sequence(size_t i) const {
        std::vector<int64_t> ids = prompts_[i];
        ids.insert(ids.end(), s_[i].resp.begin(), s_[i].resp.end());
        return ids;
    }

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
        const std::string& name = call.name;
        const bool builtin = std::find(st_.builtin.begin(), st_.builtin.end(), name) != st_.builtin.end();
        if (!call.error.empty()) {
            record(i, k, ToolResult{call.error, true, "malformed", 0.0});
        } else if (const BuiltinTool* b = builtin ? find_builtin_tool(name) : nullptr) {
            record(i, k, b->run(call.arguments));
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
            o = render_user_observation(family_, x.env_reply.observation, x.turn_closed, chat_options_);
        } else {
            for (auto& t : x.texts)
                t = truncate_tool_text(t, mt_.max_tool_response_length, mt_.tool_response_truncate_side);
            o = render_tool_observation(family_, x.texts, x.turn_closed, chat_options_);
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
    const tokenizer::ChatOptions chat_options_;
    const size_t R_;
    std::vector<Sample> s_;
    std::vector<int64_t> episodes_;
    std::map<int64_t, std::pair<size_t, size_t>> mcp_of_;  // MCP ticket -> (sample, call)
    std::map<int64_t, size_t> env_of_;                     // environment ticket -> sample
    std::vector<size_t> ready_;                            // samples whose results are all back
};

}  // namespace

std::vector<nlohmann::json> list_tool_schemas(const MultiTurnConfig& c) {
    std::vector<nlohmann::json> tools;
    for (const auto& b : c.builtin_tools)
        if (const BuiltinTool* t = find_builtin_tool(b))
            tools.push_back(function_tool(t->name, t->description, t->schema()));
    if (c.mcp_servers.empty()) return tools;
    McpClient mcp(c.mcp_servers, c.tool_timeout_s, c.server_start_timeout_s);
    mcp.start();
    for (const auto& t : mcp.tools()) tools.push_back(function_tool(t.name, t.description, t.input_schema));
    return tools;
}

std::unique_ptr<ConversationSource> open_conversations(const std::vector<std::vector<int64_t>>& prompts,
                                                       const std::vector<uint64_t>& seeds,
                                                       const rollout::SamplingParams& params,
                                                       rollout::GeneratorContext& ctx) {
    RLPT_CHECK_KIND(InternalError, ctx.tokenizer != nullptr, "tool_agent: the generator context has no tokenizer");
    RLPT_CHECK(seeds.size() == prompts.size(), "tool_agent: {} seeds for {} prompts", seeds.size(), prompts.size());
    return std::make_unique<Conversations>(prompts, seeds, params, ctx);
}

rollout::GenerationOutput tool_agent_generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                              const rollout::BatchLimits& limits, rollout::GeneratorContext& ctx) {
    rollout::validate_sampling_params(params, model.args().vocab_size);
    rollout::validate_batch_limits(limits);
    rollout::check_prompts(prompts, model.args().vocab_size);
    torch::NoGradGuard no_grad;
    auto conversations = open_conversations(prompts, seeds, params, ctx);
    rollout::run_engine(model, *conversations, params, limits);
    return conversations->finish();
}

}  // namespace rlpt::agent
