// The rank's device and the device-collectives setting (include/rlpt/comm/device.h).
#include "rlpt/comm/device.h"

#include <fmt/ranges.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>

#include "rlpt/comm/mpi.h"
#include "rlpt/comm/placement.h"

#include "rlpt/build_config.h"
#include "rlpt/core/error.h"

#if RLPT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "rlpt/core/cuda_check.h"
#endif

namespace rlpt::comm {
namespace {
std::atomic<int> g_collectives{RLPT_HAVE_NCCL ? static_cast<int>(DeviceCollectives::kNccl)
                                              : static_cast<int>(DeviceCollectives::kMpi)};
std::atomic<int> g_device{-1};

std::string join_ints(const std::vector<int>& v) { return fmt::format("{}", fmt::join(v, ",")); }
}  // namespace

const char* device_collectives_name(DeviceCollectives c) { return c == DeviceCollectives::kNccl ? "nccl" : "mpi"; }

DeviceCollectives resolve_device_collectives(const std::string& setting) {
    if (setting == "mpi") return DeviceCollectives::kMpi;
    if (setting == "nccl") {
        RLPT_CHECK_KIND(ConfigError, RLPT_HAVE_NCCL,
                        "trainer.device_collectives=nccl, but this rlpt was built without NCCL (rlpt --version says "
                        "which); use mpi or auto");
        return DeviceCollectives::kNccl;
    }
    RLPT_CHECK_KIND(ConfigError, setting == "auto", "trainer.device_collectives: '{}' is not one of auto, nccl, mpi",
                    setting);
    if (const char* env = std::getenv("RLPT_DEVICE_COLLECTIVES"); env != nullptr && *env != '\0') {
        RLPT_CHECK_KIND(ConfigError, std::string(env) != "auto", "RLPT_DEVICE_COLLECTIVES=auto: give nccl or mpi");
        try {
            return resolve_device_collectives(env);
        } catch (const ConfigError& e) {
            throw ConfigError(fmt::format("RLPT_DEVICE_COLLECTIVES (environment): {}", e.message()));
        }
    }
    return RLPT_HAVE_NCCL ? DeviceCollectives::kNccl : DeviceCollectives::kMpi;
}

void set_device_collectives(DeviceCollectives c) { g_collectives.store(static_cast<int>(c)); }

DeviceCollectives device_collectives() { return static_cast<DeviceCollectives>(g_collectives.load()); }

bool nccl_for_device_tensors() { return RLPT_HAVE_NCCL && device_collectives() == DeviceCollectives::kNccl; }

std::string GpuMap::describe() const {
    if (!cuda) return "every rank on the CPU";
    std::string s;
    for (size_t r = 0; r < device_of_rank.size(); ++r) {
        if (device_of_rank[r] < 0) continue;
        s += fmt::format("{}rank {} -> cuda:{}", s.empty() ? "" : ", ", r, device_of_rank[r]);
    }
    if (shared) s += " (GPUs shared by several ranks: device collectives over MPI)";
    return s;
}

GpuMap plan_gpu_map(const std::vector<RankGpuFacts>& ranks, const std::string& model_device, bool cuda_built,
                    DeviceCollectives collectives) {
    GpuMap map;
    map.device_of_rank.assign(ranks.size(), -1);
    RLPT_CHECK_KIND(ConfigError, model_device == "auto" || model_device == "cpu" || model_device == "cuda",
                    "model.device: '{}' is not one of auto, cpu, cuda", model_device);
    if (model_device == "cpu") return map;

    std::vector<int> without;  // role-hosting ranks that see no GPU
    for (size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r].hosts_roles && ranks[r].visible_gpus <= 0) without.push_back(static_cast<int>(r));
    }
    if (model_device == "cuda") {
        RLPT_CHECK_KIND(ConfigError, cuda_built,
                        "model.device=cuda, but this rlpt was built without CUDA kernels (its LibTorch is CPU-only, "
                        "or it was configured with -DRLPT_WITH_CUDA=OFF): rebuild against a CUDA LibTorch "
                        "(rlpt --version says which it has), or set model.device=cpu");
        RLPT_CHECK_KIND(ConfigError, without.empty(),
                        "model.device=cuda, but rank(s) {} see no CUDA device (no GPU, no driver, or "
                        "CUDA_VISIBLE_DEVICES hides them); set model.device=cpu or run those ranks on GPU nodes",
                        join_ints(without));
    } else if (!cuda_built || !without.empty()) {
        return map;  // auto: the CPU everywhere
    }
    bool any = false;
    for (const auto& f : ranks) any = any || f.hosts_roles;
    if (!any) return map;

    // Per node: the GPU-using ranks in world-rank order take devices 0, 1, ...
    std::map<int, std::vector<int>> users;
    for (size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r].hosts_roles) users[ranks[r].node].push_back(static_cast<int>(r));
    }
    for (const auto& [node, rs] : users) {
        int gpus = ranks[static_cast<size_t>(rs[0])].visible_gpus;
        for (int r : rs) gpus = std::min(gpus, ranks[static_cast<size_t>(r)].visible_gpus);
        const bool over = static_cast<int>(rs.size()) > gpus;
        if (over && collectives == DeviceCollectives::kNccl) {
            throw ConfigError(fmt::format(
                "node {} ({}) has {} GPU(s) but {} of its ranks use one (ranks {}): NCCL cannot connect two "
                "ranks on one GPU. Run at most {} GPU rank(s) per node (fewer ranks, or more nodes), or set "
                "trainer.device_collectives=mpi to let ranks share GPUs with their collectives over MPI",
                node, ranks[static_cast<size_t>(rs[0])].node_name, gpus, rs.size(), join_ints(rs), gpus));
        }
        map.shared = map.shared || over;
        for (size_t i = 0; i < rs.size(); ++i) map.device_of_rank[static_cast<size_t>(rs[i])] = static_cast<int>(i) % gpus;
    }
    map.cuda = true;
    return map;
}

std::vector<RankGpuFacts> gather_gpu_facts(const Communicator& world, const Placement& placement) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    const auto hosts = world.allgather_strings(host);
    const auto gpus = world.allgather_i64(visible_cuda_devices());
    std::vector<RankGpuFacts> out(static_cast<size_t>(world.size()));
    for (size_t r = 0; r < out.size(); ++r) {
        out[r].node = placement.node_of_rank.at(r);
        out[r].node_name = hosts[r];
        out[r].visible_gpus = static_cast<int>(gpus[r]);
        out[r].hosts_roles = !placement.roles_of(static_cast<int>(r)).empty();
    }
    return out;
}

GpuMap setup_rank_devices(const Communicator& world, const Placement& placement, const std::string& model_device,
                          const std::string& collectives) {
    const auto facts = gather_gpu_facts(world, placement);
    GpuMap map;
    std::string why;
    try {
        const DeviceCollectives c = resolve_device_collectives(collectives);
        set_device_collectives(c);
        map = plan_gpu_map(facts, model_device, RLPT_HAVE_CUDA != 0, c);
        bind_rank_device(map.device_of_rank.at(static_cast<size_t>(world.rank())));
    } catch (const Error& e) {
        why = fmt::format("rank {}: {}", world.rank(), e.message());
    }
    for (const auto& problem : world.allgather_strings(why)) {
        if (!problem.empty()) throw ConfigError(problem);
    }
    return map;
}

int visible_cuda_devices() {
#if RLPT_HAVE_CUDA
    return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
#else
    return 0;  // no CUDA kernels: GPUs are never used (see plan_gpu_map)
#endif
}

void bind_rank_device(int device_index) {
    if (device_index >= 0) {
#if RLPT_HAVE_CUDA
        RLPT_CUDA_CHECK(cudaSetDevice(device_index));
        RLPT_CUDA_CHECK(cudaFree(nullptr));  // create this device's context now, not on first use
#else
        throw InternalError(fmt::format("bind_rank_device({}) in a build without CUDA", device_index));
#endif
    }
    g_device.store(device_index);
}

int rank_device_index() { return g_device.load(); }

}  // namespace rlpt::comm
