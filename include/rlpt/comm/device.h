#pragma once
// The rank's compute device and how collectives move device tensors. Torch-free.
//
// Start-up (app/job.cpp, once per process, after the placement and before any role is built):
//   1. plan_gpu_map() decides, from every rank's node and visible GPU count, which CUDA device
//      each rank uses (collective inputs gathered by gather_gpu_facts()).
//   2. bind_rank_device() makes that device current on this process (cudaSetDevice) and records
//      it; rank_device_index() returns it from then on. Roles build their models there.
//   3. set_device_collectives() fixes how every collective on CUDA tensors moves (the engine's
//      gradient all-reduce, tensor parallelism, weight sync, resharding): over NCCL, or over MPI
//      through host staging. NCCL needs every rank of a communicator on its own GPU; ranks that
//      share a GPU (a one-GPU node running a multi-rank layout) must use MPI.
//
// Rules of the GPU map (trainer.device_collectives, model.device):
//   - Only ranks that host roles use a GPU (a controller that hosts no role stays on the CPU).
//   - On each node, the GPU-using ranks take devices 0, 1, ... in world-rank order.
//   - More GPU-using ranks on a node than GPUs: refused (ConfigError naming the node, its GPU
//     count and the ranks) unless device collectives are MPI, in which case ranks share the GPUs
//     round-robin.
//   - model.device=cuda on a rank that sees no GPU, or in a build without CUDA kernels: refused.
//   - model.device=auto: CUDA when the build has CUDA kernels and every role-hosting rank sees a
//     GPU; otherwise the CPU everywhere (a mixed CPU/GPU job is never chosen silently).

#include <cstdint>
#include <string>
#include <vector>

namespace rlpt::comm {

enum class DeviceCollectives : uint8_t { kNccl = 0, kMpi = 1 };
const char* device_collectives_name(DeviceCollectives c);

// trainer.device_collectives (auto | nccl | mpi) for this build. auto: the environment variable
// RLPT_DEVICE_COLLECTIVES (nccl | mpi) when set — the ctest GPU wrapper tests/gpu_slots.sh sets mpi
// when it gives a test's ranks fewer GPUs than ranks — else nccl in builds with NCCL, else mpi.
// nccl in a build without NCCL is a ConfigError.
DeviceCollectives resolve_device_collectives(const std::string& setting);

// Process-wide; default: NCCL in builds with NCCL, else MPI. Set once at start-up, before any
// communicator or engine exists (changing it later does not move existing transports).
void set_device_collectives(DeviceCollectives c);
DeviceCollectives device_collectives();
// True when CUDA tensors go over NCCL (the setting is kNccl and this build has NCCL).
bool nccl_for_device_tensors();

// What one rank reports for the GPU map.
struct RankGpuFacts {
    int node = 0;             // placement node index
    std::string node_name;    // host name, for messages
    int visible_gpus = 0;     // CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies)
    bool hosts_roles = false; // runs role work (a controller-only rank does not)
};

struct GpuMap {
    bool cuda = false;                 // the job's models live on CUDA devices
    std::vector<int> device_of_rank;   // CUDA device index per world rank; -1: CPU
    bool shared = false;               // some GPU serves several ranks (MPI collectives only)
    std::string describe() const;      // "rank 1 -> cuda:0, rank 2 -> cuda:1" for the log
};

// Pure decision (unit-tested without GPUs). `model_device` is model.device (auto|cpu|cuda),
// `cuda_built` whether this binary has CUDA kernels. Throws ConfigError naming the node, its
// GPU count and the ranks when the layout does not fit.
GpuMap plan_gpu_map(const std::vector<RankGpuFacts>& ranks, const std::string& model_device, bool cuda_built,
                    DeviceCollectives collectives);

class Communicator;
struct Placement;
// Collective on `world` (every rank calls it): each rank's node, host name, visible GPU count and
// whether it hosts roles, in world-rank order.
std::vector<RankGpuFacts> gather_gpu_facts(const Communicator& world, const Placement& placement);

// The whole start-up step, collective on `world`: gather_gpu_facts(), resolve and set the device
// collectives (trainer.device_collectives = `collectives`), plan_gpu_map() for `model_device`
// (model.device), bind_rank_device() for this rank. Every rank returns the same map, or every rank
// throws the same ConfigError naming the rank where the problem arose (a failure to bind one
// rank's GPU included), so no rank is left waiting.
GpuMap setup_rank_devices(const Communicator& world, const Placement& placement, const std::string& model_device,
                          const std::string& collectives);

// CUDA devices this process sees (0 without CUDA support or without a driver).
int visible_cuda_devices();
// Makes `device_index` current for this process (cudaSetDevice; no-op for -1) and records it.
// Throws CudaError when the device cannot be used.
void bind_rank_device(int device_index);
// The device bound by bind_rank_device(): a CUDA index, or -1 for the CPU (also before binding).
int rank_device_index();

}  // namespace rlpt::comm
