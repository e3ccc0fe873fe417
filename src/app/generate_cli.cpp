#include "generate_cli.h"

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "rlpt/agent/builtin_tools.h"
#include "rlpt/agent/tool_agent.h"
#include "rlpt/config/config.h"
#include "rlpt/core/cpu_cores.h"
#include "rlpt/core/error.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/beam_search.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sampler.h"
#include "rlpt/tokenizer/chat_template.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::app {
namespace {

using rollout::BeamSearchParams;
using rollout::FinishReason;
using rollout::GenerationOutput;
using rollout::GeneratorContext;
using rollout::SamplingParams;
using rollout::TokenTexts;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// A failure that maps to exit code 2 (bad usage or missing inputs).
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Options {
    std::string model_dir;
    std::string prompt;
    std::string prompt_ids;
    bool greedy = false;
    double temperature = 1.0;
    double top_p = 1.0;
    int64_t top_k = -1;
    int64_t max_new_tokens = 64;
    int64_t n = 1;
    uint64_t seed = 0;
    std::string chat_template = "none";
    bool enable_thinking = true;  // --enable-thinking (qwen3's apply_chat_template kwarg)
    std::string dtype = "float32";
    std::string output = "text";
    bool ignore_eos = false;
    std::vector<std::string> stop;
    bool include_stop_str_in_output = false;
    int64_t beam_width = 0;  // 0: sample
    double length_penalty = 1.0;
    bool have_prompt = false;
    int64_t threads = 0;
    std::vector<std::string> tools;   // --tool: the agent loop with these built-in tools
    int64_t max_assistant_turns = 0;  // --max-turns
};

// The sampling flags as SamplingParams (special ids are set once the model is known).
SamplingParams sampling_params(const Options& opt) {
    SamplingParams p;
    p.greedy = opt.greedy;
    p.temperature = opt.temperature;
    p.top_p = opt.top_p;
    p.top_k = opt.top_k;
    p.max_new_tokens = opt.max_new_tokens;
    p.stop = opt.stop;
    p.include_stop_str_in_output = opt.include_stop_str_in_output;
    return p;
}

std::vector<int64_t> parse_ids(const std::string& text) {
    std::vector<int64_t> ids;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const auto b = item.find_first_not_of(" \t");
        const auto e = item.find_last_not_of(" \t");
        const std::string tok = b == std::string::npos ? "" : item.substr(b, e - b + 1);
        size_t used = 0;
        long long v = -1;
        try {
            v = std::stoll(tok, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (tok.empty() || used != tok.size() || v < 0)
            throw UsageError(
                fmt::format("--prompt-ids: '{}' is not a non-negative integer (expected e.g. 1,2,3)", tok));
        ids.push_back(v);
    }
    if (ids.empty() || text.back() == ',')
        throw UsageError("--prompt-ids: expected a comma-separated list such as 1,2,3");
    return ids;
}

// eos_token_id of generation_config.json (an int or a list), or empty when the file or key is absent.
std::vector<int64_t> generation_config_eos(const std::string& dir) {
    const auto path = std::filesystem::path(dir) / "generation_config.json";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return {};
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text.str());
    } catch (const std::exception& e) {
        RLPT_THROW(IoError, "{}: invalid JSON: {}", path.string(), e.what());
    }
    std::vector<int64_t> out;
    if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return out;
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer()) {
        out.push_back(e.get<int64_t>());
    } else if (e.is_array()) {
        for (const auto& x : e) {
            RLPT_CHECK_KIND(IoError, x.is_number_integer(), "{}: eos_token_id must hold integers, got {}",
                            path.string(), e.dump());
            out.push_back(x.get<int64_t>());
        }
    } else {
        RLPT_THROW(IoError, "{}: eos_token_id must be an integer or a list, got {}", path.string(), e.dump());
    }
    return out;
}

// eos / stop / pad ids from the checkpoint, the tokenizer and the chat family.
void set_special_ids(SamplingParams& params, const Options& opt, const model::ModelArgs& args,
                     const tokenizer::Tokenizer* tok, tokenizer::ChatFamily family) {
    const int64_t vocab = args.vocab_size;
    std::vector<int64_t> ends = generation_config_eos(opt.model_dir);
    if (ends.empty()) ends = args.eos_token_ids;
    if (tok && tok->eos_id() >= 0) ends.push_back(tok->eos_id());
    if (tok)
        for (const auto& name : tokenizer::chat_stop_tokens(family)) {
            const int64_t id = tok->token_to_id(name);
            if (id >= 0) ends.push_back(id);
        }
    std::vector<int64_t> in_vocab;
    for (int64_t id : ends)
        if (id >= 0 && id < vocab && std::find(in_vocab.begin(), in_vocab.end(), id) == in_vocab.end())
            in_vocab.push_back(id);
    if (!opt.ignore_eos && !in_vocab.empty()) {
        params.eos_id = in_vocab.front();
        params.stop_token_ids.assign(in_vocab.begin() + 1, in_vocab.end());
    }
    for (int64_t pad : {tok ? tok->pad_id() : -1, args.pad_token_id, in_vocab.empty() ? -1 : in_vocab.front()}) {
        if (pad >= 0 && pad < vocab) {
            params.pad_id = pad;
            break;
        }
    }
}

nlohmann::json sampling_json(const SamplingParams& p, uint64_t seed) {
    return {{"greedy", p.greedy},
            {"temperature", p.temperature},
            {"top_p", p.top_p},
            {"top_k", p.top_k},
            {"max_new_tokens", p.max_new_tokens},
            {"eos_id", p.eos_id},
            {"stop_token_ids", p.stop_token_ids},
            {"stop", p.stop},
            {"include_stop_str_in_output", p.include_stop_str_in_output},
            {"seed", seed}};
}

int run(const Options& opt) {
    std::error_code ec;
    if (!std::filesystem::is_directory(opt.model_dir, ec))
        throw UsageError(fmt::format("model folder '{}' does not exist", opt.model_dir));
    if (!std::filesystem::is_regular_file(std::filesystem::path(opt.model_dir) / "config.json", ec))
        throw UsageError(fmt::format("'{}' is not a model folder: it has no config.json", opt.model_dir));
    tokenizer::ChatFamily family = tokenizer::ChatFamily::kNone;
    try {
        family = tokenizer::parse_chat_family(opt.chat_template);
    } catch (const Error& e) {
        throw UsageError(e.message());
    }
    if (!opt.enable_thinking && family != tokenizer::ChatFamily::kQwen3)
        throw UsageError("--enable-thinking false needs --chat-template qwen3");
    if (!opt.have_prompt && family != tokenizer::ChatFamily::kNone)
        throw UsageError("--chat-template applies to --prompt text; --prompt-ids are used as given");

    std::unique_ptr<tokenizer::Tokenizer> tok;
    std::vector<int64_t> prompt_ids;
    if (opt.have_prompt) {
        try {
            tok = tokenizer::load_tokenizer(opt.model_dir);
        } catch (const Error& e) {
            throw UsageError(
                fmt::format("--prompt needs the folder's tokenizer ({}); pass --prompt-ids instead", e.message()));
        }
        const std::string text = family == tokenizer::ChatFamily::kNone
                                     ? opt.prompt
                                     : tokenizer::apply_chat_template(family, {{"user", opt.prompt}}, true,
                                                                      tokenizer::ChatOptions{opt.enable_thinking});
        try {
            prompt_ids = tok->encode(text, /*allow_special=*/true);
        } catch (const Error& e) {
            throw UsageError(fmt::format("--prompt cannot be encoded: {}", e.message()));
        }
        if (prompt_ids.empty()) throw UsageError("--prompt encodes to no tokens");
    } else {
        prompt_ids = parse_ids(opt.prompt_ids);
        try {
            tok = tokenizer::load_tokenizer(opt.model_dir);
        } catch (const Error& e) {
            std::fprintf(stderr, "rlpt generate: no text output: %s\n", e.message().c_str());
        }
    }

    auto model = model::load_pretrained(opt.model_dir, model::dtype_from_name(opt.dtype));
    model->eval();
    const int64_t vocab = model->args().vocab_size;
    for (int64_t id : prompt_ids)
        if (id >= vocab)
            throw UsageError(fmt::format("prompt id {} is outside the model's vocabulary [0, {})", id, vocab));

    SamplingParams params = sampling_params(opt);
    set_special_ids(params, opt, model->args(), tok.get(), family);
    TokenTexts texts;
    if (!opt.stop.empty()) {
        if (!tok) throw UsageError("--stop needs the folder's tokenizer (stop strings are matched on the text)");
        texts = rollout::token_texts(*tok);
        params.token_texts = &texts;
    }

    // Beam search: one row per beam (rank i = the i-th best), else one per sample.
    const bool beams = opt.beam_width > 0;
    const int64_t rows = beams ? opt.beam_width : opt.n;
    const BeamSearchParams beam{opt.beam_width, opt.length_penalty};
    std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(rows), prompt_ids);
    std::vector<uint64_t> seeds;
    std::vector<int64_t> ranks;
    for (int64_t i = 0; i < rows; ++i) {
        seeds.push_back(rollout::sample_seed(opt.seed, 0, i));
        ranks.push_back(i);
    }
    // --tool: the agent loop of rollout.generator tool_agent (agent/tool_agent.h) with the built-in tools.
    GeneratorContext agent_ctx;
    agent_ctx.args.chat_template = opt.chat_template;
    agent_ctx.args.enable_thinking = opt.enable_thinking;
    agent_ctx.args.multi_turn.builtin_tools = opt.tools;
    agent_ctx.args.multi_turn.max_assistant_turns = opt.max_assistant_turns;
    agent_ctx.tokenizer = tok.get();
    const bool agent = !opt.tools.empty();
    if (agent && !tok) throw UsageError("--tool needs the folder's tokenizer (tool calls are parsed from the text)");
    const GenerationOutput out = beams ? rollout::beam_search(*model, prompts, params, beam, ranks, rows)
                                 : agent
                                     ? agent::tool_agent_generate(*model, prompts, seeds, params,
                                                                  rollout::batch_limits(rows, agent_ctx), agent_ctx)
                                     : rollout::generate(*model, prompts, seeds, params, std::max<int64_t>(rows, 1));
    // A beam's cumulative log-prob (the sum of its tokens' log-probs) and its ranking score.
    auto cumulative = [](const std::vector<float>& lps) {
        double sum = 0;
        for (float l : lps) sum += l;
        return sum;
    };
    auto score_of = [&](int64_t i, const std::vector<float>& lps) {
        return rollout::beam_score(cumulative(lps), static_cast<int64_t>(lps.size()),
                                   out.finish_reasons[static_cast<size_t>(i)] == FinishReason::kEos,
                                   opt.length_penalty);
    };

    // The text shown: cut at the stop string when --stop is given (out.texts), else decoded.
    auto text_of = [&](int64_t i, const std::vector<int64_t>& ids) {
        return out.texts.empty() ? tok->decode(ids) : out.texts[static_cast<size_t>(i)];
    };
    // A response's tokens: with --tool the whole conversation (model and tool tokens; the log-probs
    // of tool tokens are 0), else the sampled tokens.
    const int64_t P = out.prompts.size(1);
    auto response = [&](int64_t i) {
        const int64_t len =
            agent ? out.attention_mask[i].narrow(0, P, out.attention_mask.size(1) - P).sum().item<int64_t>()
                  : out.response_mask[i].sum().item<int64_t>();
        auto ids = out.responses[i].narrow(0, 0, len).contiguous();
        auto lps = out.rollout_log_probs[i].narrow(0, 0, len).contiguous();
        return std::make_pair(std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len),
                              std::vector<float>(lps.data_ptr<float>(), lps.data_ptr<float>() + len));
    };
    if (opt.output == "json") {
        nlohmann::json j = {{"model", opt.model_dir}, {"dtype", opt.dtype}, {"prompt_ids", prompt_ids}};
        if (tok) j["prompt_text"] = tok->decode(prompt_ids);
        j["sampling"] = sampling_json(params, opt.seed);
        if (beams) j["beam_search"] = {{"beam_width", opt.beam_width}, {"length_penalty", opt.length_penalty}};
        j["samples"] = nlohmann::json::array();
        for (int64_t i = 0; i < rows; ++i) {
            auto [ids, lps] = response(i);
            nlohmann::json s = {{"index", i}, {"token_ids", ids}, {"log_probs", lps}};
            if (beams) {
                s["cumulative_log_prob"] = cumulative(lps);
                s["score"] = score_of(i, lps);
            } else {
                s["seed"] = seeds[static_cast<size_t>(i)];
            }
            if (tok) s["text"] = text_of(i, ids);
            if (agent) {
                auto m = out.response_mask[i].narrow(0, 0, static_cast<int64_t>(ids.size())).contiguous();
                s["response_mask"] = std::vector<int64_t>(m.data_ptr<int64_t>(), m.data_ptr<int64_t>() + m.numel());
                for (const auto& [name, v] : agent_ctx.sample_values) s[name] = v[static_cast<size_t>(i)];
            }
            s["finish_reason"] = rollout::finish_reason_name(out.finish_reasons[static_cast<size_t>(i)]);
            j["samples"].push_back(std::move(s));
        }
        std::fputs((j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n").c_str(), stdout);
    } else {
        std::string text = fmt::format("model: {} ({}, {}, vocab {})\nprompt: {} tokens {}\n", opt.model_dir,
                                       model->args().architecture(), opt.dtype, vocab, prompt_ids.size(),
                                       nlohmann::json(prompt_ids).dump());
        if (tok) text += fmt::format("{}\n", tok->decode(prompt_ids));
        for (int64_t i = 0; i < rows; ++i) {
            auto [ids, lps] = response(i);
            const char* reason = rollout::finish_reason_name(out.finish_reasons[static_cast<size_t>(i)]);
            if (beams) {
                text += fmt::format("--- beam {} (finish: {}, {} tokens, cumulative log-prob {:.4f}, score {:.4f})\n",
                                    i, reason, ids.size(), cumulative(lps), score_of(i, lps));
            } else {
                text += fmt::format("--- sample {} (finish: {}, {} tokens, sum log-prob {:.4f})\n", i, reason,
                                    ids.size(), cumulative(lps));
            }
            if (agent) {
                auto value = [&](const char* k) { return agent_ctx.sample_values.at(k)[static_cast<size_t>(i)]; };
                text +=
                    fmt::format("(tool calls {}, turns {}, {} model tokens, {} tool tokens; the tool's text follows "
                                "each call and is not sampled)\n",
                                value("tool_call_counts"), value("num_turns"), value("model_tokens"),
                                value("observation_tokens"));
            }
            if (tok) text += fmt::format("{}\n", text_of(i, ids));
            text += fmt::format("ids: {}\nlog-probs: [{:.4f}]\n", nlohmann::json(ids).dump(), fmt::join(lps, ", "));
        }
        std::fputs(text.c_str(), stdout);
    }
    std::fflush(stdout);
    return kExitOk;
}

}  // namespace

int generate_command(int argc, char** argv) {
    Options opt;
    CLI::App app{"Generate from a model folder (Hugging Face layout) on the CPU, without MPI.", "rlpt generate"};
    app.add_option("--model", opt.model_dir, "model folder (config.json + *.safetensors [+ tokenizer])")->required();
    auto* o_prompt = app.add_option("--prompt", opt.prompt, "prompt text (needs the folder's tokenizer)");
    auto* o_ids = app.add_option("--prompt-ids", opt.prompt_ids, "prompt token ids, e.g. 1,2,3");
    o_prompt->excludes(o_ids);
    auto* f_greedy = app.add_flag("--greedy", opt.greedy, "argmax decoding");
    app.add_option("--temperature", opt.temperature, "sampling temperature (default 1)");
    app.add_option("--top-p", opt.top_p, "nucleus sampling mass in (0, 1] (default 1: off)")->excludes(f_greedy);
    app.add_option("--top-k", opt.top_k, "keep the K most likely tokens (default -1: off)")->excludes(f_greedy);
    app.add_option("--max-new-tokens", opt.max_new_tokens, "response length limit (default 64)");
    app.add_option("--n", opt.n, "samples of the prompt (default 1)");
    app.add_option("--seed", opt.seed, "run seed (default 0)");
    app.add_option("--chat-template", opt.chat_template, "none|qwen2|llama3|qwen3 (default none)")
        ->check(CLI::IsMember({"none", "qwen2", "llama3", "qwen3"}));
    app.add_option("--enable-thinking", opt.enable_thinking,
                   "qwen3: false ends the prompt with an empty think block (default true)");
    app.add_option("--dtype", opt.dtype, "float32|bfloat16 (default float32)")
        ->check(CLI::IsMember({"float32", "bfloat16"}));
    app.add_option("--output", opt.output, "text|json (default text)")->check(CLI::IsMember({"text", "json"}));
    app.add_flag("--ignore-eos", opt.ignore_eos, "do not stop at EOS or end-of-turn tokens");
    app.add_option("--stop", opt.stop, "stop string (repeatable): the response ends where its text contains it");
    auto* o_beam = app.add_option("--beam-width", opt.beam_width,
                                  "beam search with this many beams (all shown, best first, with their cumulative "
                                  "log-probs); sampling flags other than --temperature do not apply");
    o_beam->excludes(f_greedy);
    app.add_option("--length-penalty", opt.length_penalty, "beam ranking: cumulative log-prob / length^P (default 1)")
        ->needs(o_beam);
    app.add_flag("--include-stop-str-in-output", opt.include_stop_str_in_output,
                 "the shown text keeps the stop string (the token ids always do)");
    app.add_option("--tool", opt.tools,
                   fmt::format("built-in tool (repeatable; {}): run the agent loop of rollout.generator tool_agent, "
                               "tool calls executed and their results appended",
                               fmt::join(agent::builtin_tool_names(), ", ")))
        ->check(CLI::IsMember(agent::builtin_tool_names()));
    app.add_option("--max-turns", opt.max_assistant_turns,
                   "with --tool: at most this many assistant turns (default 0: "
                   "until --max-new-tokens)");
    app.add_option("--threads", opt.threads,
                   "torch threads (default: OMP_NUM_THREADS when set, else every core of the machine)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "rlpt generate: %s (see rlpt generate --help)\n", e.what());
        return kExitUsage;
    }
    try {
        opt.have_prompt = o_prompt->count() > 0;
        if (!opt.have_prompt && o_ids->count() == 0) throw UsageError("one of --prompt or --prompt-ids is required");
        if (opt.n < 1) throw UsageError(fmt::format("--n must be >= 1, got {}", opt.n));
        if (o_beam->count() > 0) {
            if (opt.beam_width < 1) throw UsageError(fmt::format("--beam-width must be >= 1, got {}", opt.beam_width));
            if (opt.n != 1) throw UsageError("--n does not apply to --beam-width (every beam is shown)");
            if (!opt.stop.empty())
                throw UsageError("--stop does not apply to --beam-width (vLLM's beam search has no stop strings)");
            if (!opt.tools.empty()) throw UsageError("--tool does not apply to --beam-width");
            if (!std::isfinite(opt.length_penalty))
                throw UsageError(fmt::format("--length-penalty must be finite, got {}", opt.length_penalty));
        }
        if (opt.threads < 0) throw UsageError(fmt::format("--threads must be >= 1, got {}", opt.threads));
        if (opt.threads > 0) {
            torch::set_num_threads(static_cast<int>(opt.threads));
        } else if (std::getenv("OMP_NUM_THREADS") == nullptr) {
            torch::set_num_threads(usable_cores());
        }
        SamplingParams check = sampling_params(opt);
        check.stop.clear();  // the token texts come with the tokenizer, in run()
        try {
            rollout::validate_sampling_params(check, /*vocab_size=*/0);
            rollout::validate_stop_strings(opt.stop, "--stop");
        } catch (const ValueError& e) {
            throw UsageError(e.message());
        }
        return run(opt);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "rlpt generate: %s\n", e.what());
        return kExitUsage;
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "rlpt generate: %s\n", e.what());
        return kExitUsage;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rlpt generate: %s\n", e.what());
        return kExitError;
    }
}

}  // namespace rlpt::app
