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

std::string affinity_list() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
    std::string s;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (!CPU_ISSET(c, &set)) continue;
        int last = c;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
        if (!s.empty()) s += ',';
        s += std::to_string(c);
        if (last > c) s += '-' + std::to_string(last);
        c = last;
    }
    return s;
}

}  // namespace rlpt
