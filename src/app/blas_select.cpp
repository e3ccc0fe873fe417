#include "blas_select.h"

#include <ATen/Version.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace rlpt::app {
namespace {

using CoreNameFn = char* (*)();

const char* openblas_core() {
    auto fn = reinterpret_cast<CoreNameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    return fn ? fn() : nullptr;
}

bool cpu_has_avx512() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

bool is_generic_core(const char* core) {
    // Cores OpenBLAS falls back to when it does not know the CPU model.
    for (const char* g :
         {"Prescott", "Core2", "Nehalem", "Sandybridge", "Haswell", "Zen", "generic", "Penryn", "Dunnington"}) {
        if (strcasecmp(core, g) == 0) return true;
    }
    return false;
}

}  // namespace

void maybe_select_blas_core(int argc, char** argv) {
    (void)argc;
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice wins
    const char* knob = std::getenv("RLPT_BLAS_CORETYPE");
    if (knob && std::strcmp(knob, "off") == 0) return;
    if (std::getenv("RLPT_BLAS_REEXECUTED") != nullptr) return;  // at most once
    const char* core = openblas_core();
    if (core == nullptr || !is_generic_core(core) || !cpu_has_avx512()) return;
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    setenv("RLPT_BLAS_REEXECUTED", "1", 1);
    // Exec the resolved path, not /proc/self/exe: the process name (comm) is the executed file's
    // name, and the run-directory lock recognises a live job by a name starting with "rlpt"
    // (src/app/run_dir.cpp); through /proc/self/exe it would read "exe" and a second job would
    // take the first one's lock as stale.
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    // exec failed: carry on with the generic core.
    unsetenv("OPENBLAS_CORETYPE");
}

std::string blas_description() {
    const char* core = openblas_core();
    if (core == nullptr) {
        // LibTorch's own BLAS (the pip wheels and libtorch zips link MKL on x86-64): its build
        // settings name it.
        const std::string config = at::show_config();
        const auto at = config.find("BLAS_INFO=");
        if (at == std::string::npos) return "LibTorch's built-in BLAS";
        const auto end = config.find_first_of(", \n", at);
        return config.substr(at + 10, end - at - 10) + " (LibTorch's BLAS)";
    }
    std::string who = std::getenv("RLPT_BLAS_REEXECUTED") ? "chosen by rlpt for this AVX-512 CPU"
                      : std::getenv("OPENBLAS_CORETYPE")  ? "from OPENBLAS_CORETYPE"
                                                          : "autodetected";
    return std::string("OpenBLAS core ") + core + " (" + who + ")";
}

}  // namespace rlpt::app
