#include "rlpt/app/main.h"


#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "blas_select.h"
#include "rlpt/app/job.h"
#include "rlpt/build_config.h"
#include "rlpt/core/error.h"
#include "rlpt/rollout/generate_cli.h"

namespace rlpt::app {
namespace {

const char* kUsage = R"(rlpt: reinforcement-learning post-training for language models, as one MPI job.

Usage:
  mpirun -np N rlpt CONFIG.yaml [key=value ...]   train (trainer.mode: rl or sft)
  srun -n N rlpt CONFIG.yaml [key=value ...]      the same inside a Slurm allocation
  rlpt generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--greedy] [--output json] ...
                                                  sample from a checkpoint folder (no MPI;
                                                  rlpt generate --help lists every flag)
  rlpt --help | --version

  key=value overrides any config key by its dotted path, e.g. trainer.total_training_steps=10
  actor.optim.lr=1e-6 'placement.groups=[{roles: [actor, rollout], ranks: auto}]'.
  Values are YAML. See configs/ for ready configs and README.md for every option.

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
        std::printf("rlpt %s (git %s, CUDA kernels %s, NCCL %s)\nBLAS: %s\n", RLPT_VERSION_STRING, RLPT_GIT_SHA,
                    RLPT_HAVE_CUDA ? "built" : "not built", RLPT_HAVE_NCCL ? "built" : "not built",
                    blas_description().c_str());
        return kExitOk;
    }
    if (!std::strcmp(argv[1], "generate")) return rollout::generate_command(argc - 1, argv + 1);
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
