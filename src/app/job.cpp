#include "rlpt/app/job.h"

#include "rlpt/app/role_settings.h"
#include "rlpt/app/run_plan.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "check.h"
#include "modes.h"
#include "run_dir.h"
#include "rlpt/app/registry.h"
#include "rlpt/comm/device.h"
#include "rlpt/comm/topology.h"
#include "rlpt/core/cpu_cores.h"
#include "rlpt/core/debug_env.h"
#include "rlpt/core/log.h"
#include "rlpt/core/signals.h"
#include "rlpt/protocol/runtime.h"

namespace rlpt::app {
namespace {

namespace fs = std::filesystem;

// Rank 0 loads and validates; every rank receives the same text or the same error.
// Returns false (on every rank) when the config is unusable; rank 0 has printed why.
bool load_and_broadcast(const comm::Communicator& world, const JobOptions& opts, Config& out) {
    std::string payload;
    int64_t ok = 1;
    if (world.rank() == 0) {
        try {
            Config c = load_config(opts.config_path, opts.overrides);
            // rlpt check's data, tokenizer, reward and batch-size checks, all problems at once,
            // before any rank builds anything (the placement is checked next, by every rank).
            const CheckReport report = check_config(c, 0);
            if (!report.problems.empty()) {
                std::string all =
                    fmt::format("{} problem(s) with {} (rlpt check {} lists them without MPI):", report.problems.size(),
                                opts.config_path, opts.config_path);
                for (const auto& p : report.problems) all += "\n  " + p;
                throw ConfigError(all);
            }
            payload = to_yaml(c);
        } catch (const Error& e) {
            ok = 0;
            payload = e.message();
        }
    }
    world.bcast(&ok, sizeof(ok), 0);
    world.bcast_string(payload, 0);
    if (!ok) {
        if (world.rank() == 0) RLPT_LOG_ERROR("{}", payload);
        return false;
    }
    out = config_from_yaml(payload, opts.config_path.empty() ? "defaults" : opts.config_path);
    return true;
}

// LibTorch threads of a rank (trainer.threads_per_rank overrides): the cores it is bound to when
// the launcher bound it to fewer than the machine's (mpirun --bind-to core, Slurm --cpus-per-task),
// else the node's cores shared among the ranks on it: all of them for a lone rank, 1 per rank
// when ranks >= cores.
int threads_for(const Config& c, const comm::Placement& p, int world_rank) {
    if (c.trainer.threads_per_rank > 0) return static_cast<int>(c.trainer.threads_per_rank);
    const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int mine = usable_cores();
    if (mine < machine) return mine;
    int on_node = p.ranks_on_node(p.node_of_rank[static_cast<size_t>(world_rank)]);
    return std::max(1, machine / std::max(1, on_node));
}

// "Slurm job 42 step 0 (nodes n[1-2], 8 tasks)" when launched inside a Slurm allocation, else
// "". Ranks, sizes and local ranks always come from MPI; Slurm's variables only name the run in
// the log (the run directory keeps trainer.experiment_name so a resubmitted job, which gets a
// new job id, still finds its checkpoints with trainer.resume=auto).
std::string slurm_description() {
    auto env = [](const char* name) {
        const char* v = std::getenv(name);
        return std::string(v ? v : "");
    };
    const std::string job = env("SLURM_JOB_ID");
    if (job.empty()) return "";
    std::string s = "Slurm job " + job;
    if (const std::string step = env("SLURM_STEP_ID"); !step.empty()) s += " step " + step;
    if (const std::string restarts = env("SLURM_RESTART_COUNT"); !restarts.empty() && restarts != "0") {
        s += " (requeued " + restarts + "x)";
    }
    s += " on nodes " + (env("SLURM_JOB_NODELIST").empty() ? std::string("?") : env("SLURM_JOB_NODELIST"));
    return s;
}

static_assert(protocol::kWatchdogExitCode == kExitTimeout, "a worker's watchdog exits with the documented code");

int exit_code_for(const std::exception& e) {
    if (dynamic_cast<const protocol::RemoteError*>(&e)) return kExitWorkerError;
    if (const auto* err = dynamic_cast<const Error*>(&e)) {
        if (err->kind() == ErrorKind::kTimeout) return kExitTimeout;
        if (err->kind() == ErrorKind::kConfig) return kExitConfig;
    }
    return kExitError;
}

}  // namespace

int run_job(const JobOptions& opts, int* argc, char*** argv) {
    comm::MpiRuntime mpi(argc, argv);
    // SIGTERM/SIGUSR1 become a stop request on every rank (rlpt/core/signals.h): the
    // controller acts on it at a step boundary; workers wait for its shutdown.
    install_stop_signal_handlers();
    auto world = comm::Communicator::world();
    set_process_identity({world.rank(), world.rank() == 0 ? "controller" : ""});
    const DebugEnv env = read_debug_env();
    if (!env.log_level.empty()) set_log_level(parse_log_level(env.log_level));

    Config config;
    if (!load_and_broadcast(world, opts, config)) return kExitConfig;
    if (env.log_level.empty()) set_log_level(parse_log_level(config.trainer.log_level));

    // Placement: derived on every rank; an impossible layout is refused by all of them alike.
    comm::Placement placement;
    protocol::FaultPlan fault;
    std::optional<RunLock> lock;  // rank 0: this job owns the run directory
    const std::string run_dir = (fs::path(config.trainer.output_dir) / config.trainer.experiment_name).string();
    int64_t ok = 1;
    std::string problem;
    try {
        const RunPlan plan = plan_run(config);
        auto labels = comm::detect_node_labels(world, env.simulate_nodes);
        placement = comm::compute_placement(config.placement, world.size(), labels, role_names(), plan.roles, plan.why,
                                            static_cast<int>(config.rollout.tensor_model_parallel_size));
        check_zero_shard_groups(config, placement);
        fault = protocol::FaultPlan::parse(env.fault);
        protocol::validate_registry(role_registry());
        if (world.rank() == 0) {
            fs::create_directories(run_dir);
            lock.emplace(RunLock::acquire(run_dir));
        }
    } catch (const Error& e) {
        ok = 0;
        problem = e.message();
    } catch (const std::exception& e) {  // std::filesystem
        ok = 0;
        problem = e.what();
    }
    if (world.allreduce_min_i64(ok) == 0) {
        if (world.rank() == 0) RLPT_LOG_ERROR("{}", problem.empty() ? "start-up failed on another rank" : problem);
        return kExitConfig;
    }
    // Every rank must run the same binary: agree on the dispatch tables.
    auto hashes = world.allgather_i64(static_cast<int64_t>(protocol::registry_hash(role_registry())));
    for (size_t r = 0; r < hashes.size(); ++r) {
        if (hashes[r] != hashes[0]) {
            if (world.rank() == 0) {
                RLPT_LOG_ERROR("rank {} runs a different rlpt binary (its dispatch tables differ from rank 0's)", r);
            }
            return kExitConfig;
        }
    }

    // Devices: every rank agrees on the GPU map (or on why it does not fit), then makes its own
    // GPU current once, before any role builds a model (rlpt/comm/device.h).
    try {
        const comm::GpuMap gpus =
            comm::setup_rank_devices(world, placement, config.model.device, config.trainer.device_collectives);
        if (world.rank() == 0 && gpus.simulated) {
            RLPT_LOG_INFO("RLPT_FAKE_GPUS: planned as on GPUs: {}. This run stays on the CPU", gpus.describe());
        } else if (world.rank() == 0 && gpus.cuda) {
            RLPT_LOG_INFO("GPUs: {}", gpus.describe());
        }
    } catch (const ConfigError& e) {
        if (world.rank() == 0) RLPT_LOG_ERROR("{}", e.message());
        return kExitConfig;
    }

    comm::PollPolicy poll;
    comm::set_poll_policy(poll);
    comm::Topology topo = comm::Topology::build(world, std::move(placement));
    {
        std::string roles;
        for (const auto& r : topo.hosted_roles()) roles += (roles.empty() ? "" : ",") + r;
        if (topo.is_controller()) roles = roles.empty() ? "controller" : "controller," + roles;
        set_process_identity({world.rank(), roles});
    }
    const int threads = threads_for(config, topo.placement(), world.rank());
    torch::set_num_threads(threads);

    try {
        const protocol::ProtocolSettings protocol = protocol_settings(config);
        protocol::WorkerHost host(role_registry(), protocol, topo, fault);
        if (!topo.is_controller()) {
            return host.serve();  // the controller's code: 0, or 75 after a stop signal
        }
        RunContext run;
        run.config = &config;
        run.topology = &topo;
        run.run_dir = run_dir;
        {
            std::ofstream f(fs::path(run.run_dir) / "config.yaml");
            f << "# effective config of this run (rlpt " << opts.config_path << ")\n" << to_yaml(config);
        }
        if (const std::string slurm = slurm_description(); !slurm.empty()) RLPT_LOG_INFO("{}", slurm);
        RLPT_LOG_INFO("{}", topo.placement().describe());
        RLPT_LOG_INFO("run directory {} (effective config in config.yaml); {} torch thread(s) per rank", run.run_dir,
                      threads);
        protocol::Controller controller(role_registry(), protocol, topo, topo.hosted_roles().empty() ? nullptr : &host);
        int code = run_mode(controller, run);
        controller.shutdown(code);
        return code;
    } catch (const std::exception& e) {
        // Print from this rank, then end the whole job: peers may be blocked in collectives.
        RLPT_LOG_ERROR("{}", e.what());
        lock.reset();  // the run directory is free again (MPI_Abort skips destructors)
        mpi.mark_failed();
        comm::MpiRuntime::abort(exit_code_for(e));
    }
}

}  // namespace rlpt::app
