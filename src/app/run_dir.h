#pragma once
// The run directory <trainer.output_dir>/<trainer.experiment_name>: who may use it (a lock) and
// which checkpoint a run continues from. Private to src/app; rank 0 only, no MPI. Torch-free.
#include <optional>
#include <string>

#include "rlpt/ckpt/checkpoint_dir.h"
#include "rlpt/config/config.h"

namespace rlpt::app {

// <run_dir>/checkpoints
std::string checkpoint_root(const std::string& run_dir);

// <run_dir>/rlpt.lock: one job per run directory. The file holds the holder's host, pid,
// start time and Slurm job (id and restart count); it is created with O_EXCL and removed by
// the destructor (on a normal exit, a stop with exit 75, and the error path before MPI_Abort).
// A lock left behind by a job that died is stale and replaced with a warning when rlpt can
// tell: same host and that process is gone (a zombie counts as gone: it died, and only its
// parent or a late-reaping PID 1 still holds its entry), or is not rlpt, or the same Slurm job id with a
// lower restart count (this job, requeued). Otherwise acquire() throws ConfigError naming the
// holder, the lock file and what to do.
class RunLock {
  public:
    static RunLock acquire(const std::string& run_dir);
    ~RunLock();
    RunLock(RunLock&& o) noexcept : path_(std::move(o.path_)), contents_(std::move(o.contents_)) { o.path_.clear(); }
    RunLock& operator=(RunLock&&) = delete;
    RunLock(const RunLock&) = delete;
    RunLock& operator=(const RunLock&) = delete;

  private:
    RunLock(std::string path, std::string contents) : path_(std::move(path)), contents_(std::move(contents)) {}
    std::string path_;
    std::string contents_;
};

// The checkpoint to continue from, per trainer.resume (verified: manifest, sizes, CRC-32s):
//   "disable" -> nullopt;
//   "auto"    -> the newest valid one under <run_dir>/checkpoints (damaged newer ones are moved
//                aside, ckpt::newest_valid_checkpoint); nullopt when the run has no checkpoint
//                at all; ConfigError (exit 2) when it had some but none is valid: a run's
//                history is never trained over from scratch silently;
//   a path    -> that checkpoint (ConfigError when it is not complete, IoError when damaged).
std::optional<ckpt::CheckpointInfo> checkpoint_to_resume(const Config& c, const std::string& run_dir);

}  // namespace rlpt::app
