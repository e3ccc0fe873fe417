#pragma once
// The data sampler's position inside a controller.h5 checkpoint file, shared by the RL and SFT
// checkpoints (attributes controller/sampler_{epoch,position,dataset_size,seed}). Private to src/app.
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/data/sampler.h"

namespace rlpt::app {

void write_sampler_state(ckpt::H5Writer& w, const data::SamplerState& st);
data::SamplerState read_sampler_state(const ckpt::H5Reader& r);

}  // namespace rlpt::app
