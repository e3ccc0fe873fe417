// Stop-signal flag: SIGTERM / SIGUSR1 become a request, not a death.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "rlpt/core/error.h"
#include "rlpt/core/signals.h"

namespace rlpt {
namespace {

class StopSignals : public ::testing::Test {
  protected:
    void SetUp() override {
        install_stop_signal_handlers();
        clear_stop_request();
    }
    void TearDown() override { clear_stop_request(); }
};

TEST_F(StopSignals, NothingRequestedInitially) {
    EXPECT_FALSE(stop_requested());
    EXPECT_EQ(stop_signal(), 0);
    EXPECT_STREQ(stop_signal_name(), "");
    EXPECT_EQ(stop_signal_count(), 0);
}

TEST_F(StopSignals, SigtermSetsTheFlagAndIsNotFatal) {
    ASSERT_EQ(raise(SIGTERM), 0);  // without the handler this would end the test binary
    EXPECT_TRUE(stop_requested());
    EXPECT_EQ(stop_signal(), SIGTERM);
    EXPECT_STREQ(stop_signal_name(), "SIGTERM");
    EXPECT_EQ(stop_signal_count(), 1);
}

TEST_F(StopSignals, Sigusr1SetsTheFlag) {
    ASSERT_EQ(raise(SIGUSR1), 0);
    EXPECT_TRUE(stop_requested());
    EXPECT_STREQ(stop_signal_name(), "SIGUSR1");
}

TEST_F(StopSignals, FirstSignalWinsAndRepeatsAreCounted) {
    raise(SIGUSR1);
    raise(SIGTERM);
    raise(SIGUSR1);
    EXPECT_STREQ(stop_signal_name(), "SIGUSR1");
    EXPECT_EQ(stop_signal_count(), 3);
}

TEST(SignalNames, KnownAndUnknownNumbers) {
    EXPECT_EQ(signal_name(0), "");
    EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
    EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
    EXPECT_EQ(signal_name(99), "signal 99");
}

TEST_F(StopSignals, ClearForgetsTheRequest) {
    raise(SIGTERM);
    clear_stop_request();
    EXPECT_FALSE(stop_requested());
    EXPECT_EQ(stop_signal_count(), 0);
    raise(SIGUSR1);
    EXPECT_STREQ(stop_signal_name(), "SIGUSR1");
}

TEST_F(StopSignals, InstallIsIdempotent) {
    install_stop_signal_handlers();
    install_stop_signal_handlers();
    raise(SIGTERM);
    EXPECT_EQ(stop_signal_count(), 1);
}

TEST_F(StopSignals, RequestStopWithoutASignal) {
    request_stop(SIGTERM);
    EXPECT_TRUE(stop_requested());
    EXPECT_STREQ(stop_signal_name(), "SIGTERM");
    try {
        request_stop(SIGINT);
        FAIL() << "SIGINT is not a stop signal";
    } catch (const ValueError& e) {
        EXPECT_NE(e.message().find("signal 2 is not SIGTERM or SIGUSR1"), std::string::npos) << e.message();
    }
}

TEST_F(StopSignals, SignalFromAnotherThreadIsSeen) {
    std::thread t([] { kill(getpid(), SIGUSR1); });
    t.join();
    for (int i = 0; i < 100 && !stop_requested(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_STREQ(stop_signal_name(), "SIGUSR1");
}

// A process started with SIGTERM blocked (inherited mask) still gets the request: install
// unblocks it, and a pending SIGTERM is delivered at that moment.
TEST(StopSignalsProcess, PendingBlockedSignalIsDeliveredOnInstall) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigprocmask(SIG_BLOCK, &set, nullptr);
        raise(SIGTERM);  // pending
        install_stop_signal_handlers();
        _exit(stop_requested() && stop_signal() == SIGTERM ? 42 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "child died on signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 42);
}

// Another process's SIGTERM: the child keeps running, notices, and exits by itself.
TEST(StopSignalsProcess, ExternalSigtermLetsTheProcessFinishItsWork) {
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(pipefd[0]);
        install_stop_signal_handlers();
        char c = 'r';
        if (write(pipefd[1], &c, 1) != 1) _exit(2);
        for (int i = 0; i < 500 && !stop_requested(); ++i) usleep(10000);  // the "step loop"
        _exit(stop_requested() ? 75 : 3);
    }
    close(pipefd[1]);
    char c = 0;
    ASSERT_EQ(read(pipefd[0], &c, 1), 1);  // handlers are installed
    close(pipefd[0]);
    ASSERT_EQ(kill(child, SIGTERM), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "child died on signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 75);
}

}  // namespace
}  // namespace rlpt
