#include "sft_trainer.h"

#include <time.h>

#include <cmath>
#include <filesystem>

#include "metrics_log.h"
#include "rlpt/agent/tool_agent.h"
#include "rlpt/app/job.h"
#include "rlpt/app/role_settings.h"
#include "rlpt/core/log.h"
#include "rlpt/data/sampler.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/rollout.h"
#include "sft_checkpoint.h"
#include "task_data.h"

namespace rlpt::app {
namespace {

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct SftExample {
    std::vector<int64_t> prompt;
    std::vector<int64_t> response;  // EOS included
    std::vector<int64_t> loss;      // per response token: 1 learned, 0 in context only (tool turns)
};

std::vector<SftExample> build_examples(const Config& c, const TaskData& t) {
    std::vector<SftExample> out;
    for (size_t i = 0; i < t.train.size(); ++i) {
        RLPT_CHECK_KIND(ConfigError, t.train[i].response.has_value(),
                        "sft: training example {} has no response to learn (data.response_key='{}')", t.train[i].index,
                        c.data.response_key);
        SftExample e;
        e.prompt = t.train_ids[i];
        const auto& extra = t.train[i].extra;
        if (extra.is_object() && extra.contains("turns")) {
            // A tool conversation: tool turns are in the sequence, out of the loss (agent/tool_agent.h).
            try {
                auto conv = agent::encode_conversation(*t.tok, t.chat, extra["turns"], t.eos_id, t.chat_options);
                e.response = std::move(conv.ids);
                e.loss = std::move(conv.loss_mask);
            } catch (const ValueError& err) {
                RLPT_THROW(ValueError, "sft: training example {} (extra \"turns\"): {}", t.train[i].index,
                           err.message());
            }
        } else {
            e.response = t.tok->encode(*t.train[i].response, false);
            if (t.eos_id >= 0) e.response.push_back(t.eos_id);
            e.loss.assign(e.response.size(), 1);
        }
        out.push_back(std::move(e));
    }
    return out;
}

// Right-padded [prompt ++ response] rows; loss on response tokens with SftExample::loss 1. Rows added to reach a
// multiple of `multiple` carry no loss.
Batch make_sft_batch(const std::vector<SftExample>& ex, const std::vector<int64_t>& idx, int64_t pad_id,
                     int64_t multiple) {
    int64_t T = 1;
    for (int64_t i : idx)
        T = std::max<int64_t>(T, static_cast<int64_t>(ex[static_cast<size_t>(i)].prompt.size() +
                                                      ex[static_cast<size_t>(i)].response.size()));
    const int64_t n = static_cast<int64_t>(idx.size());
    const int64_t rows = (n + multiple - 1) / multiple * multiple;
    auto ids = torch::full({rows, T}, pad_id, torch::kInt64);
    auto mask = torch::zeros({rows, T}, torch::kInt64);
    auto loss = torch::zeros({rows, T}, torch::kInt64);
    auto a = ids.accessor<int64_t, 2>();
    auto mk = mask.accessor<int64_t, 2>();
    auto l = loss.accessor<int64_t, 2>();
    for (int64_t r = 0; r < rows; ++r) {
        const SftExample& e = ex[static_cast<size_t>(idx[static_cast<size_t>(r % n)])];
        int64_t t = 0;
        for (int64_t v : e.prompt) {
            a[r][t] = v;
            mk[r][t++] = 1;
        }
        for (size_t k = 0; k < e.response.size(); ++k) {
            a[r][t] = e.response[k];
            mk[r][t] = 1;
            l[r][t++] = r < n ? e.loss[k] : 0;
        }
    }
    Batch b(rows);
    b.set("input_ids", ids);
    b.set("attention_mask", mask);
    b.set("position_ids", (mask.cumsum(1) - 1).clamp_min(0));
    b.set("loss_mask", loss);
    return b;
}

// Greedy validation through the rollout role: the RL trainer's metrics (val-core/<data_source>/
// acc/mean@1, .../reward/mean@1); empty without validation data or a rollout role.
std::map<std::string, double> validate_greedy(protocol::Controller& ctl, const Config& c, const TaskData& t,
                                              int64_t step) {
    if (t.val.empty() || !ctl.has_role("rollout")) return {};
    std::vector<const data::Example*> e;
    std::vector<const std::vector<int64_t>*> p;
    for (size_t i = 0; i < t.val.size(); ++i) {
        e.push_back(&t.val[i]);
        p.push_back(&t.val_ids[i]);
    }
    Batch prompts = make_prompt_batch(t, e, p, 1, 0);
    roles::GenerateArgs args;
    args.greedy = true;
    args.temperature = 1.0;
    args.max_new_tokens = c.data.max_response_length;
    args.eos_id = t.eos_id;
    args.pad_id = t.pad_id;
    args.stop_ids = t.stop_ids;
    args.stop = c.rollout.stop;
    args.include_stop_str_in_output = c.rollout.include_stop_str_in_output;
    args.seed = c.trainer.seed;
    args.stream = step;
    Batch out =
        ctl.call<roles::RolloutMethod::kGenerate>(prompts.select({"prompt_ids", "prompt_mask"}, {"sample_index"}),
                                                  args);
    out.update(prompts.select({}, {"uid", "data_source", "ground_truth", "extra"}));
    ValidationTally tally;
    tally.add(out, score_responses(t, out));
    return tally.metrics(1);
}

// " | val <data_source> acc 0.600" for each data_source.
std::string describe_validation(const std::map<std::string, double>& m) {
    std::string s;
    for (const auto& [k, v] : m) {
        if (k.rfind("val-core/", 0) == 0 && k.find("/acc/mean@") != std::string::npos) {
            s += fmt::format(" | greedy val {} acc {:.3f}", k.substr(9, k.find("/acc/mean@") - 9), v);
        }
    }
    return s;
}

}  // namespace

int run_sft(protocol::Controller& ctl, const RunContext& run) {
    const Config& c = *run.config;
    const double t0 = now_s();
    TaskData t = load_task(c);
    auto examples = build_examples(c, t);
    const int64_t steps = c.sft.total_steps, bs = c.sft.batch_size, dp = ctl.dp_size("actor");
    RLPT_CHECK_KIND(ConfigError, bs <= static_cast<int64_t>(examples.size()),
                    "sft.batch_size={} is larger than the training set ({} examples)", bs, examples.size());

    const protocol::InitArgs init_args = role_init_args(t, steps);
    ctl.call(roles::ActorMethod::kInit, protocol::with_args(Batch(0), init_args));  // + the actor's settings
    if (ctl.has_role("rollout")) ctl.call(roles::RolloutMethod::kInit, rollout_init_batch(init_args, c, *t.tok));

    data::EpochSampler sampler(static_cast<int64_t>(examples.size()), static_cast<uint64_t>(c.data.seed), true, true);
    const int64_t resumed_at = resume_sft(ctl, run, sampler);
    MetricsLog log(run.run_dir, resumed_at > 0 ? resumed_at : -1, c.trainer.logger);
    RLPT_LOG_INFO("sft: {} steps of {} examples over {} actor rank(s); {} training examples{}", steps, bs, dp,
                  examples.size(), resumed_at > 0 ? fmt::format(", resumed at step {}", resumed_at) : "");
    if (resumed_at <= 0) {
        auto val = validate_greedy(ctl, c, t, 0);
        if (!val.empty()) {
            RLPT_LOG_INFO("sft: before training{}", describe_validation(val));
            log.write(0, val);
        }
    }
    for (int64_t step = resumed_at + 1; step <= steps; ++step) {
        ctl.set_step(step);
        const double ts = now_s();
        Batch b = make_sft_batch(examples, sampler.next_batch(bs), t.pad_id, dp);
        roles::SftStepArgs args{b.at("loss_mask").sum().item<double>()};
        Batch m = ctl.call<roles::ActorMethod::kSftStep>(std::move(b), args);
        auto red = reduce_metrics(m.metrics());
        red["timing_s/step"] = now_s() - ts;
        red["training/epoch"] = static_cast<double>(sampler.epoch());
        const bool eval = (c.sft.eval_every > 0 && step % c.sft.eval_every == 0) || step == steps;
        std::map<std::string, double> val;
        if (eval) val = validate_greedy(ctl, c, t, step);
        for (const auto& [k, v] : val) red[k] = v;
        log.write(step, red);
        if (log.console() && (eval || step == 1 || step % 25 == 0)) {
            RLPT_LOG_INFO("sft step {}/{} | loss {:.4f} | grad norm {:.3f} | lr {:.2e} | {:.2f} s{}", step, steps,
                          red["sft/loss"], red["sft/grad_norm"], red["sft/lr"], red["timing_s/step"],
                          describe_validation(val));
        }
        const bool saved = c.trainer.save_freq > 0 && step % c.trainer.save_freq == 0 && step < steps;
        if (saved) save_sft_checkpoint(ctl, run, step, sampler);
        // Preemption (SIGTERM/SIGUSR1 on any rank): checkpoint and exit 75; a run with
        // trainer.resume=auto continues after this step.
        if (step < steps && ctl.stop_requested()) {
            if (!saved) save_sft_checkpoint(ctl, run, step, sampler);
            RLPT_LOG_WARN("sft: stopping after step {}/{} on {}: checkpoint written; exit code {} (a run with "
                          "trainer.resume=auto continues from here)",
                          step, steps, ctl.stop_reason(), kExitPreempted);
            return kExitPreempted;
        }
    }
    std::string out_dir = c.sft.output_model_dir.empty() ? (std::filesystem::path(run.run_dir) / "model").string()
                                                         : c.sft.output_model_dir;
    ctl.call<roles::ActorMethod::kExport>(Batch(0), {out_dir});
    t.tok->save(out_dir);
    RLPT_LOG_INFO("sft done in {:.1f} s: model + tokenizer written to {} (Hugging Face format); metrics in {}",
                  now_s() - t0, out_dir, log.path());
    return 0;
}

}  // namespace rlpt::app
