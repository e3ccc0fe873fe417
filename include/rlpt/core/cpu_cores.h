#pragma once
#include <string>
// How many cores this process may run on (torch-free): the size of its CPU affinity mask
// (what mpirun's --bind-to, taskset or a Slurm cgroup leave it), at most the machine's count.
// Thread defaults are derived from it, so a rank bound to one core does not start two
// LibTorch threads that fight over it.

namespace rlpt {

int usable_cores();
// The cores of this process's affinity mask as a Linux cpu list ("0", "0-3", "0,2,5-7"); "?" when
// the mask cannot be read.
std::string affinity_list();

}  // namespace rlpt
