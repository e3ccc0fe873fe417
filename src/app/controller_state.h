#pragma once
// What the RL and SFT checkpoints share: the data sampler's position inside controller.h5
// (attributes controller/sampler_{epoch,position,dataset_size,seed}) and the writing of a step
// directory. Private to src/app.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "modes.h"
#include "rlpt/batch/batch.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/data/sampler.h"

namespace rlpt::app {

void write_sampler_state(ckpt::H5Writer& w, const data::SamplerState& st);
data::SamplerState read_sampler_state(const ckpt::H5Reader& r);

// One checkpoint of a run: creates <run_dir>/checkpoints/step_<step>/, calls `save_roles(dir)`
// (the roles' save methods; each returns one manifest row per rank: file, bytes, crc32), writes
// controller.h5 through `write_controller`, then the COMPLETE manifest (step, config hash, world
// size, every role's ranks, every file's size and CRC) last, and prunes to
// trainer.max_checkpoints. Logs one line naming `what` ("checkpoint", "sft checkpoint").
void write_run_checkpoint(const RunContext& run, int64_t step,
                          const std::function<std::vector<Batch>(const std::string& dir)>& save_roles,
                          const std::function<void(ckpt::H5Writer&)>& write_controller, const std::string& what);

}  // namespace rlpt::app
