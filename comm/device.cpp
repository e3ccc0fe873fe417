// The rank's device and the device-collectives setting (include/rlpt/comm/device.h).
#include "rlpt/comm/device.h"

#include <fmt/ranges.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

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

// "a,b,,c" -> {a, b, c}: GPU identities as RLPT_FAKE_GPUS and gather_gpu_facts() write them.
std::vector<std::string> split_ids(const std::string& list) {
    std::vector<std::string> ids;
    std::istringstream in(list);
    for (std::string id; std::getline(in, id, ',');) {
        if (!id.empty()) ids.push_back(id);
    }
    return ids;
}
}  // namespace

const char* device_collectives_name(DeviceCollectives c) { return c == DeviceCollectives::kNccl ? "nccl" : "mpi"; }

CollectivesRequest parse_device_collectives(const std::string& setting) {
    if (setting == "mpi") return CollectivesRequest::kMpi;
    if (setting == "nccl") {
        RLPT_CHECK_KIND(ConfigError, RLPT_HAVE_NCCL,
                        "trainer.device_collectives=nccl, but this rlpt was built without NCCL (rlpt --version says "
                        "which); use mpi or auto");
        return CollectivesRequest::kNccl;
    }
    RLPT_CHECK_KIND(ConfigError, setting == "auto", "trainer.device_collectives: '{}' is not one of auto, nccl, mpi",
                    setting);
    if (const char* env = std::getenv("RLPT_DEVICE_COLLECTIVES"); env != nullptr && *env != '\0') {
        RLPT_CHECK_KIND(ConfigError, std::string(env) != "auto", "RLPT_DEVICE_COLLECTIVES=auto: give nccl or mpi");
        try {
            return parse_device_collectives(env);
        } catch (const ConfigError& e) {
            throw ConfigError(fmt::format("RLPT_DEVICE_COLLECTIVES (environment): {}", e.message()));
        }
    }
    return CollectivesRequest::kAuto;
}

void set_device_collectives(DeviceCollectives c) { g_collectives.store(static_cast<int>(c)); }

DeviceCollectives device_collectives() { return static_cast<DeviceCollectives>(g_collectives.load()); }

bool nccl_for_device_tensors() { return RLPT_HAVE_NCCL && device_collectives() == DeviceCollectives::kNccl; }

std::string GpuMap::describe() const {
    std::string s;
    if (!cuda) {
        s = "every rank on the CPU";
    } else {
        for (size_t r = 0; r < device_of_rank.size(); ++r) {
            if (device_of_rank[r] < 0) continue;
            // A UUID is long; its first 12 characters tell the GPUs of a node apart.
            const std::string& id = gpu_of_rank.at(r);
            s +=
                fmt::format("{}rank {} -> cuda:{} ({})", s.empty() ? "" : ", ", r, device_of_rank[r], id.substr(0, 12));
        }
    }
    s += fmt::format("; device collectives over {}", device_collectives_name(collectives));
    if (!collectives_why.empty()) s += " (" + collectives_why + ")";
    return s;
}

GpuMap plan_gpu_map(const std::vector<RankGpuFacts>& ranks, const std::string& model_device, bool cuda_built,
                    CollectivesRequest collectives, bool nccl_built) {
    GpuMap map;
    map.device_of_rank.assign(ranks.size(), -1);
    map.gpu_of_rank.assign(ranks.size(), "");
    RLPT_CHECK_KIND(ConfigError, model_device == "auto" || model_device == "cpu" || model_device == "cuda",
                    "model.device: '{}' is not one of auto, cpu, cuda", model_device);
    // Collectives when no GPU is used (nothing moves over them; the build's default).
    map.collectives =
        collectives == CollectivesRequest::kMpi || (collectives == CollectivesRequest::kAuto && !nccl_built)
            ? DeviceCollectives::kMpi
            : DeviceCollectives::kNccl;
    if (model_device == "cpu") return map;

    std::vector<int> without;  // role-hosting ranks that see no GPU
    for (size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r].hosts_roles && ranks[r].gpu_ids.empty()) without.push_back(static_cast<int>(r));
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

    // Each GPU-using rank, in world-rank order, takes the least-taken GPU it sees.
    std::map<std::string, std::vector<int>> users;  // GPU identity -> the ranks on it
    for (size_t r = 0; r < ranks.size(); ++r) {
        if (!ranks[r].hosts_roles) continue;
        const auto& ids = ranks[r].gpu_ids;
        size_t best = 0;
        for (size_t i = 1; i < ids.size(); ++i) {
            if (users[ids[i]].size() < users[ids[best]].size()) best = i;
        }
        users[ids[best]].push_back(static_cast<int>(r));
        map.device_of_rank[r] = static_cast<int>(best);
        map.gpu_of_rank[r] = ids[best];
    }
    // Per node: the GPUs its ranks see, and the ranks that share one.
    std::map<int, std::set<std::string>> node_gpus;
    std::map<int, std::vector<int>> node_ranks;
    std::map<int, bool> node_shared;
    for (size_t r = 0; r < ranks.size(); ++r) {
        if (!ranks[r].hosts_roles) continue;
        const int node = ranks[r].node;
        node_gpus[node].insert(ranks[r].gpu_ids.begin(), ranks[r].gpu_ids.end());
        node_ranks[node].push_back(static_cast<int>(r));
        node_shared[node] = node_shared[node] || users[map.gpu_of_rank[r]].size() > 1;
    }
    std::vector<int> sharing;  // every rank on a shared GPU
    for (const auto& [id, rs] : users) {
        if (rs.size() > 1) sharing.insert(sharing.end(), rs.begin(), rs.end());
    }
    std::sort(sharing.begin(), sharing.end());
    map.shared = !sharing.empty();
    for (const auto& [node, is_shared] : node_shared) {
        if (!is_shared || collectives != CollectivesRequest::kNccl) continue;
        const auto& rs = node_ranks[node];
        const size_t gpus = node_gpus[node].size();
        throw ConfigError(fmt::format(
            "node {} ({}) has {} GPU(s) but {} of its ranks use one (ranks {}): NCCL cannot connect two "
            "ranks on one GPU. Run at most {} GPU rank(s) per node (fewer ranks, or more nodes), or set "
            "trainer.device_collectives to auto or mpi to let ranks share GPUs with their collectives over MPI",
            node, ranks[static_cast<size_t>(rs[0])].node_name, gpus, rs.size(), join_ints(rs), gpus));
    }
    if (collectives == CollectivesRequest::kAuto) {
        if (map.shared) {
            map.collectives = DeviceCollectives::kMpi;
            map.collectives_why = fmt::format(
                "auto: ranks {} share a GPU, and NCCL needs a GPU per rank; give each rank its own GPU for NCCL",
                join_ints(sharing));
        } else {
            map.collectives = nccl_built ? DeviceCollectives::kNccl : DeviceCollectives::kMpi;
            map.collectives_why = nccl_built ? "auto: a GPU per rank" : "auto: this rlpt was built without NCCL";
        }
    }
    map.cuda = true;
    return map;
}

std::vector<RankGpuFacts> gather_gpu_facts(const Communicator& world, const Placement& placement, bool* simulated) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    const auto hosts = world.allgather_strings(host);
    const int my_node = placement.node_of_rank.at(static_cast<size_t>(world.rank()));
    const char* fake = std::getenv("RLPT_FAKE_GPUS");
    const bool faking = fake != nullptr;
    // "<F|R><id>,<id>,..." per rank: whether the list is faked, then the identities.
    std::string mine = faking ? "F" : "R";
    const auto ids = visible_gpu_ids(my_node);
    for (size_t i = 0; i < ids.size(); ++i) mine += (i == 0 ? "" : ",") + ids[i];
    const auto all = world.allgather_strings(mine);
    std::vector<RankGpuFacts> out(static_cast<size_t>(world.size()));
    bool any_fake = false;
    for (size_t r = 0; r < out.size(); ++r) {
        out[r].node = placement.node_of_rank.at(r);
        out[r].node_name = hosts[r];
        any_fake = any_fake || all[r][0] == 'F';
        out[r].gpu_ids = split_ids(all[r].substr(1));
        out[r].hosts_roles = !placement.roles_of(static_cast<int>(r)).empty();
    }
    if (simulated != nullptr) *simulated = any_fake;
    return out;
}

GpuMap setup_rank_devices(const Communicator& world, const Placement& placement, const std::string& model_device,
                          const std::string& collectives) {
    bool simulated = false;
    const auto facts = gather_gpu_facts(world, placement, &simulated);
    GpuMap map;
    std::string why;
    try {
        const CollectivesRequest request = parse_device_collectives(collectives);
        map = plan_gpu_map(facts, model_device, RLPT_HAVE_CUDA != 0 || simulated, request, RLPT_HAVE_NCCL != 0);
        if (simulated) {
            // Planned and checked as on those GPUs; run as the same job on the CPU.
            map.simulated = true;
            set_device_collectives(plan_gpu_map(facts, "cpu", false, request, RLPT_HAVE_NCCL != 0).collectives);
            bind_rank_device(-1);
        } else {
            set_device_collectives(map.collectives);
            bind_rank_device(map.device_of_rank.at(static_cast<size_t>(world.rank())));
        }
    } catch (const Error& e) {
        why = fmt::format("rank {}: {}", world.rank(), e.message());
    }
    for (const auto& problem : world.allgather_strings(why)) {
        if (!problem.empty()) throw ConfigError(problem);
    }
    return map;
}

std::vector<std::string> visible_gpu_ids(int node) {
    std::vector<std::string> ids;
    if (const char* fake = std::getenv("RLPT_FAKE_GPUS"); fake != nullptr) return split_ids(fake);
    const int n = visible_cuda_devices();
    for (int i = 0; i < n; ++i) {
        std::string id;
#if RLPT_HAVE_CUDA
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
            const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
            id = fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
                             "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                             u[14], u[15]);
        } else {
            (void)cudaGetLastError();  // clear it: the identity falls back to the index below
        }
#endif
        ids.push_back(id.empty() ? fmt::format("node{}:cuda:{}", node, i) : id);
    }
    return ids;
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
