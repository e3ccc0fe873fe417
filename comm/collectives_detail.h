#pragma once
// Helpers shared by the collectives implementations (comm/collectives.cpp, comm/
// nccl_collectives.cpp). Private to rlpt_comm.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/build_config.h"
#include "rlpt/comm/collectives.h"

namespace rlpt::comm::detail {

// The shape of a slice gather: `out` as [outer, full, inner] along `dim`, inner in bytes.
struct SliceGeometry {
    int64_t outer = 1, full = 0, local = 0, inner_bytes = 0;
};
SliceGeometry slice_geometry(const torch::Tensor& local, const torch::Tensor& out, int64_t dim);
// True when counts are equal and starts[r] = r·counts[0] (ncclAllGather's / MPI_Allgather's
// placement).
bool equal_slices_in_rank_order(const std::vector<int64_t>& starts, const std::vector<int64_t>& counts);

#if RLPT_HAVE_NCCL
// NCCL collectives over `group` on CUDA device `device_index` (-1: the current device), named
// `name` (which names the NCCL communicator too). Collective on `group`: nccl_bootstrap with
// `bootstrap` as its deadline.
std::unique_ptr<Collectives> make_nccl_collectives(const Communicator& group, int device_index, const std::string& name,
                                                   const Deadline& bootstrap);
#endif

}  // namespace rlpt::comm::detail
