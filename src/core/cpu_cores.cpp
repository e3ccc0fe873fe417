#include "rlpt/core/cpu_cores.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace rlpt {

int usable_cores() {
    const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return machine;
    return std::clamp(CPU_COUNT(&set), 1, machine);
}

}  // namespace rlpt
