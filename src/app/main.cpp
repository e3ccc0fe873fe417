#include "rlpt/app/main.h"

#include <cstdio>

#include "rlpt/build_config.h"

namespace rlpt::app {
int main(int argc, char** argv) {
    std::printf("rlpt %s (%s)\n", RLPT_VERSION_STRING, RLPT_GIT_SHA);
    return 0;
}
}  // namespace rlpt::app
