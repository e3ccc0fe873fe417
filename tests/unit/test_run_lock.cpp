// The run-directory lock (src/app/run_dir.h): one job per run directory, stale locks replaced.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "rlpt/core/error.h"
#include "run_dir.h"

namespace fs = std::filesystem;
using rlpt::app::RunLock;

namespace {

class RunLockTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = (fs::temp_directory_path() / ("rlpt_run_lock_" + std::to_string(::getpid()))).string();
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string lock_path() const { return dir_ + "/rlpt.lock"; }
    void write_lock(const std::string& host, long pid) const {
        std::ofstream(lock_path()) << "host: " << host << "\npid: " << pid
                                   << "\nstarted: 2026-01-01T00:00:00Z\nslurm_job: \nslurm_restart: 0\n";
    }
    std::string dir_;
};

std::string this_host() {
    char buf[256] = {0};
    gethostname(buf, sizeof buf - 1);
    return buf;
}

TEST_F(RunLockTest, SecondJobIsRefusedNamingTheFirstAndTheLockGoesOnExit) {
    {
        RunLock first = RunLock::acquire(dir_);
        ASSERT_TRUE(fs::exists(lock_path()));
        try {
            RunLock second = RunLock::acquire(dir_);
            ADD_FAILURE() << "a second lock on the same directory";
        } catch (const rlpt::ConfigError& e) {
            const std::string msg = e.message();
            EXPECT_NE(msg.find("is in use by another rlpt job (host " + this_host() + ", pid " +
                               std::to_string(::getpid())),
                      std::string::npos)
                << msg;
            EXPECT_NE(msg.find("lock file " + lock_path()), std::string::npos) << msg;
        }
        EXPECT_TRUE(fs::exists(lock_path()));  // the refused job does not remove the holder's lock
    }
    EXPECT_FALSE(fs::exists(lock_path()));
}

TEST_F(RunLockTest, StaleLocksAreReplacedLiveOrForeignOnesAreNot) {
    write_lock(this_host(), 999999999);  // no such process
    { RunLock l = RunLock::acquire(dir_); }
    EXPECT_FALSE(fs::exists(lock_path()));
    write_lock("some-other-node", 1);  // cannot be checked from here: refused
    EXPECT_THROW(RunLock::acquire(dir_), rlpt::ConfigError);
    write_lock(this_host(), ::getppid());  // alive, but not rlpt (the test runner's parent): stale
    { RunLock l = RunLock::acquire(dir_); }
}

}  // namespace
