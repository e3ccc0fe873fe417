#include "rlpt/core/signals.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "rlpt/core/error.h"

namespace rlpt {
namespace {

// A signal handler can reach nothing but static state; these two atomics are the whole of it
// (STYLE's "no file-scope mutable globals" cannot hold here). Lock-free, hence usable from a
// handler.
std::atomic<int> g_first_signal{0};
std::atomic<int> g_signal_count{0};
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag must be lock-free to be set in a handler");

extern "C" void on_stop_signal(int signo) {
    int expected = 0;
    g_first_signal.compare_exchange_strong(expected, signo);
    g_signal_count.fetch_add(1);
}

}  // namespace

void install_stop_signal_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    // Block the other stop signal while the handler runs (not needed for correctness: the
    // handler is reentrant; it keeps the first signal's name deterministic).
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGUSR1);
    for (int signo : {SIGTERM, SIGUSR1}) {
        if (sigaction(signo, &sa, nullptr) != 0) {
            RLPT_THROW(InternalError, "sigaction({}) failed: {}", signo == SIGTERM ? "SIGTERM" : "SIGUSR1",
                       std::strerror(errno));
        }
    }
    // A launcher may start us with the signals blocked (inherited mask): unblock them, else
    // the request would wait until the process ends.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    if (int err = pthread_sigmask(SIG_UNBLOCK, &set, nullptr); err != 0) {
        RLPT_THROW(InternalError, "pthread_sigmask failed: {}", std::strerror(err));
    }
}

bool stop_requested() { return g_first_signal.load() != 0; }

int stop_signal() { return g_first_signal.load(); }

const char* stop_signal_name() {
    switch (g_first_signal.load()) {
        case SIGTERM: return "SIGTERM";
        case SIGUSR1: return "SIGUSR1";
        default: return "";
    }
}

std::string signal_name(int signo) {
    switch (signo) {
        case 0: return "";
        case SIGTERM: return "SIGTERM";
        case SIGUSR1: return "SIGUSR1";
        default: return "signal " + std::to_string(signo);
    }
}

int stop_signal_count() { return g_signal_count.load(); }

void clear_stop_request() {
    g_first_signal.store(0);
    g_signal_count.store(0);
}

void request_stop(int signo) {
    RLPT_CHECK(signo == SIGTERM || signo == SIGUSR1, "request_stop: signal {} is not SIGTERM or SIGUSR1", signo);
    on_stop_signal(signo);
}

}  // namespace rlpt
