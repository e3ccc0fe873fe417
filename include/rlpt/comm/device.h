#pragma once
// The rank's compute device and how collectives move device tensors. Torch-free.
//
// Start-up (app/job.cpp, once per process, after the placement and before any role is built):
//   1. gather_gpu_facts() collects every rank's node and the identities of the CUDA devices it
//      sees; plan_gpu_map() decides which device each rank uses and how collectives on CUDA
//      tensors move.
//   2. bind_rank_device() makes that device current on this process (cudaSetDevice) and records
//      it; rank_device_index() returns it from then on. Roles build their models there.
//   3. set_device_collectives() fixes how every collective on CUDA tensors moves (the engine's
//      gradient all-reduce, tensor parallelism, weight sync, resharding): over NCCL, or over MPI
//      through host staging. NCCL needs every rank of a communicator on its own GPU; ranks that
//      share a GPU (a one-GPU node running a multi-rank layout) use MPI.
//
// GPUs are identified by what the device is, not by its index: a rank's CUDA device i is the
// physical GPU with that UUID ("GPU-<uuid>", as nvidia-smi -L prints it). Under per-task binding
// (srun --gpus-per-task=1, --gpu-bind, CUDA_VISIBLE_DEVICES per rank, cgroup-limited device files)
// every rank sees its own GPU as cuda:0; those are different GPUs, and no GPU is shared.
//
// Rules of the GPU map (trainer.device_collectives, model.device):
//   - Only ranks that host roles use a GPU (a controller that hosts no role stays on the CPU).
//   - In world-rank order, each GPU-using rank takes, of the GPUs it sees, the one the fewest
//     earlier ranks took (ties: the lowest index). With every GPU visible to every rank that is
//     cuda:0, cuda:1, ... per node, and round-robin when there are more ranks than GPUs.
//   - A GPU taken by several ranks is shared. device_collectives=auto then uses MPI (the log line
//     says so and names the ranks); nccl refuses (ConfigError naming the node, its GPU count and
//     the ranks); mpi allows it.
//   - auto otherwise: NCCL in builds with NCCL, else MPI.
//   - model.device=cuda on a rank that sees no GPU, or in a build without CUDA kernels: refused.
//   - model.device=auto: CUDA when the build has CUDA kernels and every role-hosting rank sees a
//     GPU; otherwise the CPU everywhere (a mixed CPU/GPU job is never chosen silently).
//
// Testing without GPUs: RLPT_FAKE_GPUS=<id>[,<id>...] in a rank's environment makes it report
// those identities instead of its real devices (a CPU build plans as if it had CUDA kernels).
// The map and the collectives are planned, checked and logged exactly as on such GPUs, then the
// run stays on the CPU (GpuMap::simulated). Tests only; never set it in production.

#include <cstdint>
#include <string>
#include <vector>

namespace rlpt::comm {

enum class DeviceCollectives : uint8_t { kNccl = 0, kMpi = 1 };
const char* device_collectives_name(DeviceCollectives c);

// What trainer.device_collectives asks for (auto | nccl | mpi).
enum class CollectivesRequest : uint8_t { kAuto = 0, kNccl = 1, kMpi = 2 };

// trainer.device_collectives for this build. auto becomes the environment variable
// RLPT_DEVICE_COLLECTIVES (nccl | mpi) when that is set (the ctest GPU wrapper tests/gpu_slots.sh
// uses it). ConfigError: an unknown value, or nccl in a build without NCCL.
CollectivesRequest parse_device_collectives(const std::string& setting);

// Process-wide; default: NCCL in builds with NCCL, else MPI. Set once at start-up, before any
// communicator or engine exists (changing it later does not move existing transports).
void set_device_collectives(DeviceCollectives c);
DeviceCollectives device_collectives();
// True when CUDA tensors go over NCCL (the setting is kNccl and this build has NCCL).
bool nccl_for_device_tensors();

// What one rank reports for the GPU map.
struct RankGpuFacts {
    int node = 0;                      // placement node index
    std::string node_name;             // host name, for messages
    std::vector<std::string> gpu_ids;  // the CUDA devices this process sees, by device index: their
                                       // UUIDs ("GPU-..."), or "node<N>:cuda:<i>" where unknown
    bool hosts_roles = false;          // runs role work (a controller-only rank does not)
    int visible_gpus() const { return static_cast<int>(gpu_ids.size()); }
};

struct GpuMap {
    bool cuda = false;                                        // the job's models live on CUDA devices
    std::vector<int> device_of_rank;                          // CUDA device index per world rank; -1: CPU
    std::vector<std::string> gpu_of_rank;                     // that device's identity per world rank; "" for the CPU
    bool shared = false;                                      // some GPU serves several ranks
    DeviceCollectives collectives = DeviceCollectives::kMpi;  // how collectives on CUDA tensors move
    std::string collectives_why;                              // why auto chose what it chose ("" when asked explicitly)
    bool simulated = false;                                   // planned from RLPT_FAKE_GPUS; the run stays on the CPU
    // "rank 1 -> cuda:0 (GPU-3f2a9c1e), ...; device collectives over mpi (auto: ...)" for the log.
    std::string describe() const;
};

// Pure decision (unit-tested without GPUs). `model_device` is model.device (auto|cpu|cuda),
// `cuda_built` / `nccl_built` what this binary has. Throws ConfigError naming the node, its GPU
// count and the ranks when the layout does not fit.
GpuMap plan_gpu_map(const std::vector<RankGpuFacts>& ranks, const std::string& model_device, bool cuda_built,
                    CollectivesRequest collectives, bool nccl_built);

class Communicator;
struct Placement;
// Collective on `world` (every rank calls it): each rank's node, host name, visible GPU
// identities and whether it hosts roles, in world-rank order. `simulated` (out, optional): some
// rank reported RLPT_FAKE_GPUS.
std::vector<RankGpuFacts> gather_gpu_facts(const Communicator& world, const Placement& placement,
                                           bool* simulated = nullptr);

// The whole start-up step, collective on `world`: gather_gpu_facts(), plan_gpu_map() for
// `model_device` (model.device) and `collectives` (trainer.device_collectives), then
// set_device_collectives() and bind_rank_device() for this rank. Every rank returns the same
// map, or every rank throws the same ConfigError naming the rank where the problem arose (a
// failure to bind one rank's GPU included), so no rank is left waiting.
GpuMap setup_rank_devices(const Communicator& world, const Placement& placement, const std::string& model_device,
                          const std::string& collectives);

// The CUDA devices this process sees, by device index, as RankGpuFacts::gpu_ids (RLPT_FAKE_GPUS
// when set; empty without CUDA support or without a driver). `node` names unknown UUIDs.
std::vector<std::string> visible_gpu_ids(int node);
// CUDA devices this process sees (0 without CUDA support or without a driver; RLPT_FAKE_GPUS
// does not count: nothing can run on a fake GPU).
int visible_cuda_devices();
// Makes `device_index` current for this process (cudaSetDevice; no-op for -1) and records it.
// Throws CudaError when the device cannot be used.
void bind_rank_device(int device_index);
// The device bound by bind_rank_device(): a CUDA index, or -1 for the CPU (also before binding).
int rank_device_index();

}  // namespace rlpt::comm
