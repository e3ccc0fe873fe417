#include "rlpt/app/main.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "blas_select.h"
#include "check.h"
#include "generate_cli.h"
#include "init_model.h"
#include "rlpt/app/job.h"
#include "rlpt/build_config.h"
#include "rlpt/config/reference.h"
#include "rlpt/core/error.h"

namespace rlpt::app {
namespace {

const char* kUsage = R"(rlpt: reinforcement-learning post-training for language models, as one MPI job.

Usage:
  mpirun -np N rlpt CONFIG.yaml [key=value ...]   train (trainer.mode: rl or sft)
  srun -n N rlpt CONFIG.yaml [key=value ...]      the same inside a Slurm allocation
  rlpt check CONFIG.yaml [key=value ...] [-n N]   check a config, its data, tokenizer, scorers and
                                                  placement for N ranks without MPI; lists every problem
  rlpt init-model --out DIR (--chars-from FILE... | --tokenizer PATH) [--hidden-size H ...]
                                                  a model from scratch as a Hugging Face folder
  rlpt generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--greedy] [--output json] ...
                                                  sample from a model folder (no MPI)
  rlpt --help-config[=markdown]                   every config key with its default and meaning
  rlpt --help | --version                         (each subcommand takes --help)

  key=value overrides any config key by its dotted path; values are YAML:
    trainer.total_training_steps=10  actor.optim.lr=1e-6  'reward.scorers={my/task: number}'

Keys used most (defaults and meanings: rlpt --help-config, docs/config-reference.md):
  trainer.mode rl|sft, trainer.total_training_steps, trainer.experiment_name, trainer.output_dir,
    trainer.save_freq, trainer.test_freq, trainer.resume auto|disable|DIR,
    trainer.logger [console, jsonl, tensorboard]
  model.path (Hugging Face folder; empty: the built-in tiny model, model.builtin.*),
    model.chat_template none|qwen2|llama3|qwen3, model.apply_chat_template_kwargs.enable_thinking
  data.train_files, data.val_files (JSONL, comma-separated), data.prompt_key, data.answer_key,
    data.response_key (SFT target), data.data_source_key, data.default_data_source,
    data.train_batch_size, data.max_prompt_length, data.max_response_length
  reward.scorer (one for all), reward.scorers {data_source: scorer}: number, exact, gsm8k, math,
    math_dapo, arithmetic, command (reward.command: a JSON-lines program, e.g.
    scripts/examples/reward_server.py for a verl compute_score), user (reward.custom_library), or a
    spec {type: format|sum|..., ...} (include/rlpt/reward/registry.h)
  algorithm.adv_estimator grpo|gae|rloo|..., rollout.n, rollout.temperature, actor.optim.lr,
    actor.ppo_mini_batch_size, actor.use_kl_loss, sft.total_steps, sft.batch_size, sft.optim.lr
  placement.groups [{roles: [actor, rollout, reference], ranks: auto}], placement.controller_hosts_roles

See configs/ for ready configs (configs/own_task_sft.yaml + own_task_grpo.yaml: your own JSONL task)
and docs/ (docs/your-own-task.md, docs/rewards.md).

Exit codes: 0 done, 1 error, 2 bad config/command line/layout, 3 a worker failed,
4 a rank stopped answering, 75 stopped by SIGTERM/SIGUSR1 after saving a checkpoint.
)";

}  // namespace

int main(int argc, char** argv) {
    maybe_select_blas_core(argc, argv);  // may re-exec this process (before MPI starts)
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
        std::fputs(kUsage, argc < 2 ? stderr : stdout);
        return argc < 2 ? kExitConfig : kExitOk;
    }
    if (!std::strcmp(argv[1], "--version")) {
        std::printf("rlpt %s (git %s, CUDA kernels %s, NCCL %s)\nLibTorch: %s (%s)\nBLAS: %s\n", RLPT_VERSION_STRING,
                    RLPT_GIT_SHA, RLPT_HAVE_CUDA ? "built" : "not built", RLPT_HAVE_NCCL ? "built" : "not built",
                    RLPT_TORCH_VERSION, std::strcmp(RLPT_TORCH_CUDA, "CPU") == 0 ? "CPU only" : "CUDA " RLPT_TORCH_CUDA,
                    blas_description().c_str());
        return kExitOk;
    }
    if (!std::strcmp(argv[1], "generate")) return generate_command(argc - 1, argv + 1);
    if (!std::strcmp(argv[1], "check")) return check_command(argc - 1, argv + 1);
    if (!std::strcmp(argv[1], "init-model")) return init_model_command(argc - 1, argv + 1);
    if (!std::strncmp(argv[1], "--help-config", 13)) {
        // Every key with its default and meaning: commented YAML, or docs/config-reference.md.
        const std::string format = argv[1] + 13;
        if (format.empty() || format == "=yaml") {
            std::fputs(config_reference_yaml().c_str(), stdout);
        } else if (format == "=markdown") {
            std::fputs(config_reference_markdown().c_str(), stdout);
        } else {
            std::fprintf(stderr, "rlpt: unknown option '%s' (--help-config takes =yaml or =markdown)\n", argv[1]);
            return kExitConfig;
        }
        return kExitOk;
    }
    JobOptions opts;
    opts.config_path = argv[1];
    if (opts.config_path.size() > 0 && opts.config_path[0] == '-') {
        std::fprintf(stderr, "rlpt: unknown option '%s' (see rlpt --help)\n", argv[1]);
        return kExitConfig;
    }
    for (int i = 2; i < argc; ++i) opts.overrides.emplace_back(argv[i]);
    return run_job(opts, &argc, &argv);
}

}  // namespace rlpt::app
