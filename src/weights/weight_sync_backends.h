#pragma once
// Constructors of the weight-sync backends, used by make_weight_sync(). Private to rlpt_weights.
// The NCCL ones exist only in builds with NCCL (nccl_weight_sync.cpp).

#include <memory>

#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/weights/weight_sync.h"

namespace rlpt::weights::detail {

// Takes ownership of an already duplicated communicator.
std::unique_ptr<WeightSync> make_mpi_weight_sync(comm::Communicator comm, const WeightSyncOptions& options);

#if RLPT_HAVE_NCCL
// Number of CUDA devices this process can use; 0 when there is no driver or no device.
int cuda_device_count();
// Takes ownership of an already duplicated communicator. The NCCL communicator is created
// at the first sync (collective), on the CUDA device of that sync's tensors.
std::unique_ptr<WeightSync> make_nccl_weight_sync(comm::Communicator comm, const WeightSyncOptions& options);
#endif

}  // namespace rlpt::weights::detail
