#pragma once
// Checkpoints of an SFT run, in the RL trainer's layout (src/app/rl_checkpoint.cpp):
// <run_dir>/checkpoints/step_<N>/ holds actor_rank<r>.h5 per actor rank (weights, optimizer
// state, scheduler step), controller.h5 (mode "sft", step, sampler position) and the COMPLETE
// manifest, written last. Private to src/app.
#include <cstdint>

#include "modes.h"
#include "rlpt/data/sampler.h"

namespace rlpt::app {

// Writes the checkpoint of `step` (a collective call on the actor role) and prunes to
// trainer.max_checkpoints.
void save_sft_checkpoint(protocol::Controller& ctl, const RunContext& run, int64_t step,
                         const data::EpochSampler& sampler);

// trainer.resume: "disable" -> 0; "auto" -> the newest complete checkpoint under the run
// directory, or 0 when there is none; a directory -> that checkpoint. Loads the actor (and
// the sampler position) and returns the step it was written at. ConfigError for a checkpoint
// of another mode; IoError for a damaged one (another number of actor ranks, ZeRO stage or
// tensor parallelism reshards on load: train_common's load_engine_checkpoint).
int64_t resume_sft(protocol::Controller& ctl, const RunContext& run, data::EpochSampler& sampler);

}  // namespace rlpt::app
