// Checkpoint directories: COMPLETE markers, resuming from the latest complete checkpoint after a
// crash, verification, and keep-last-K pruning.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>

#include "rlpt/ckpt/checkpoint_dir.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/core/error.h"

namespace fs = std::filesystem;
using namespace rlpt::ckpt;

namespace {

class CkptDir : public ::testing::Test {
  protected:
    void SetUp() override {
        static std::atomic<int> counter{0};
        root_ = (fs::temp_directory_path() /
                 ("rlpt_ckpt_dir_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
                    .string();
        fs::remove_all(root_);
    }
    void TearDown() override { fs::remove_all(root_); }

    // A complete checkpoint of `step` with one H5 file per rank.
    Manifest write_checkpoint(int64_t step, int n_ranks = 2) {
        const std::string dir = create_step_dir(root_, step);
        Manifest m;
        m.step = step;
        m.config_hash = "cfg-abc";
        m.world_size = n_ranks + 1;
        m.roles["actor"] = {};
        for (int r = 0; r < n_ranks; ++r) {
            const std::string name = "actor_rank" + std::to_string(r) + ".h5";
            H5Writer w(dir + "/" + name);
            w.write_tensor("actor/model/w", torch::full({4}, double(step * 10 + r)));
            w.set_int_attr("step", step);
            m.files.push_back({name, w.commit()});
            m.roles["actor"].push_back(r + 1);
        }
        write_complete_marker(dir, m);
        return m;
    }

    std::string root_;
};

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

template <class E, class F>
void expect_error(F&& fn, const std::string& fragment) {
    try {
        fn();
        ADD_FAILURE() << "expected an exception mentioning " << fragment;
    } catch (const E& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

TEST_F(CkptDir, StepNames) {
    EXPECT_EQ(step_dir_name(0), "step_0");
    EXPECT_EQ(step_dir_name(1200), "step_1200");
    EXPECT_EQ(step_dir_path("/ck", 3), "/ck/step_3");
    EXPECT_THROW(step_dir_name(-1), rlpt::ValueError);
}

TEST_F(CkptDir, CompleteCheckpointRoundTrip) {
    EXPECT_FALSE(latest_complete_checkpoint(root_).has_value());  // no root yet
    const Manifest written = write_checkpoint(5);
    const auto latest = latest_complete_checkpoint(root_);
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(latest->step, 5);
    EXPECT_EQ(latest->dir, step_dir_path(root_, 5));
    const Manifest& m = latest->manifest;
    EXPECT_EQ(m.step, 5);
    EXPECT_EQ(m.config_hash, "cfg-abc");
    EXPECT_EQ(m.world_size, 3);
    EXPECT_EQ(m.roles.at("actor"), (std::vector<int>{1, 2}));
    ASSERT_EQ(m.files.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(m.files[i].name, written.files[i].name);
        EXPECT_EQ(m.files[i].digest, written.files[i].digest);
        EXPECT_EQ(m.files[i].digest, file_digest(latest->dir + "/" + m.files[i].name));
    }
    EXPECT_FALSE(m.git_sha.empty());
    EXPECT_FALSE(m.rlpt_version.empty());
    EXPECT_NO_THROW(verify_checkpoint(latest->dir));
    EXPECT_TRUE(
        torch::equal(H5Reader(latest->dir + "/actor_rank1.h5").read_tensor("actor/model/w"), torch::full({4}, 51.0)));
    EXPECT_EQ(list_complete_steps(root_), (std::vector<int64_t>{5}));
}

TEST_F(CkptDir, CrashMidWriteKeepsThePreviousCheckpointLatest) {
    write_checkpoint(1);
    // Step 2: rank 0's file committed, rank 1 killed mid-write (a real process exiting without
    // unwinding leaves its .tmp), no COMPLETE.
    const std::string dir2 = create_step_dir(root_, 2);
    {
        H5Writer w(dir2 + "/actor_rank0.h5");
        w.write_tensor("actor/model/w", torch::ones({4}));
        w.commit();
    }
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        H5Writer w(dir2 + "/actor_rank1.h5");
        w.write_blob("actor/rng", std::string(1 << 20, 'x'));
        ::_exit(0);  // dies before commit: no destructor runs
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(fs::exists(dir2 + "/actor_rank1.h5.tmp"));
    EXPECT_FALSE(fs::exists(dir2 + "/actor_rank1.h5"));
    EXPECT_FALSE(is_complete(dir2));
    EXPECT_EQ(latest_complete_checkpoint(root_)->step, 1);
    expect_error<rlpt::IoError>([&] { read_manifest(dir2); }, "is incomplete (no COMPLETE marker)");

    // Step 3: COMPLETE present but a listed file vanished; step 4: COMPLETE is garbage.
    write_checkpoint(3);
    fs::remove(step_dir_path(root_, 3) + "/actor_rank0.h5");
    const std::string dir4 = create_step_dir(root_, 4);
    write_text(dir4 + "/COMPLETE", "{ not json");
    EXPECT_EQ(latest_complete_checkpoint(root_)->step, 1);
    EXPECT_EQ(list_complete_steps(root_), (std::vector<int64_t>{1, 3, 4}));

    // A later good checkpoint wins again.
    write_checkpoint(6);
    EXPECT_EQ(latest_complete_checkpoint(root_)->step, 6);
}

TEST_F(CkptDir, CompleteMarkerChecksFiles) {
    const std::string dir = create_step_dir(root_, 7);
    Manifest m;
    m.step = 7;
    {
        H5Writer w(dir + "/a.h5");
        w.write_blob("x", "payload");
        m.files.push_back({"a.h5", w.commit()});
    }
    Manifest wrong_size = m;
    wrong_size.files[0].digest.size += 1;
    expect_error<rlpt::IoError>([&] { write_complete_marker(dir, wrong_size); }, "file a.h5 has");
    Manifest wrong_crc = m;
    wrong_crc.files[0].digest.crc32 ^= 1;
    // Sizes only unless verify_crc; a trailing '/' and '..' in the path are fine.
    EXPECT_NO_THROW(write_complete_marker(dir + "/../" + step_dir_name(7) + "/", wrong_crc));
    fs::remove(dir + "/COMPLETE");
    expect_error<rlpt::IoError>([&] { write_complete_marker(dir, wrong_crc, true); }, "CRC-32");
    Manifest missing = m;
    missing.files.push_back({"b.h5", {1, 2}});
    expect_error<rlpt::IoError>([&] { write_complete_marker(dir, missing); }, "file b.h5 is missing");
    Manifest dup = m;
    dup.files.push_back(m.files[0]);
    expect_error<rlpt::ValueError>([&] { write_complete_marker(dir, dup); }, "listed twice");
    for (const std::string bad : {"../a.h5", "/tmp/a.h5", "COMPLETE", "x/./a.h5", ""}) {
        Manifest b = m;
        b.files[0].name = bad;
        EXPECT_THROW(write_complete_marker(dir, b), rlpt::ValueError) << bad;
    }
    Manifest other_step = m;
    other_step.step = 8;
    expect_error<rlpt::ValueError>([&] { write_complete_marker(dir, other_step); }, "cannot complete");

    write_complete_marker(dir, m, /*verify_crc=*/true);
    EXPECT_TRUE(is_complete(dir));
    EXPECT_FALSE(fs::exists(dir + "/COMPLETE.tmp"));
    expect_error<rlpt::ValueError>([&] { write_complete_marker(dir, m); }, "already complete");
    expect_error<rlpt::ValueError>([&] { create_step_dir(root_, 7); }, "already complete");
}

TEST_F(CkptDir, VerifyDetectsCorruptFiles) {
    write_checkpoint(2);
    const std::string dir = step_dir_path(root_, 2);
    EXPECT_NO_THROW(verify_checkpoint(dir));
    std::fstream f(dir + "/actor_rank1.h5", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(100);
    f.put('\x5a');
    f.close();
    expect_error<rlpt::IoError>([&] { verify_checkpoint(dir); }, "file actor_rank1.h5 has CRC-32");
}

TEST_F(CkptDir, ManifestVersionAndMalformedManifests) {
    write_checkpoint(3);
    const std::string dir = step_dir_path(root_, 3);
    const std::string text = [&] {
        std::ifstream in(dir + "/COMPLETE");
        return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    std::string newer = text;
    newer.replace(newer.find("\"manifest_version\": 1"), 21, "\"manifest_version\": 2");
    write_text(dir + "/COMPLETE", newer);
    expect_error<rlpt::IoError>([&] { read_manifest(dir); }, "manifest version 2 is not supported");
    EXPECT_FALSE(latest_complete_checkpoint(root_).has_value());
    write_text(dir + "/COMPLETE", R"({"manifest_version": 1, "step": 3})");
    expect_error<rlpt::IoError>([&] { read_manifest(dir); }, "malformed manifest");
    write_text(dir + "/COMPLETE", text);
    EXPECT_EQ(read_manifest(dir).step, 3);
}

TEST_F(CkptDir, PruneKeepsTheNewestAndNeverTouchesIncompleteOnes) {
    for (int64_t s = 1; s <= 5; ++s) write_checkpoint(s, 1);
    create_step_dir(root_, 0);  // an old leftover without COMPLETE
    create_step_dir(root_, 6);  // someone is writing it right now
    fs::create_directories(root_ + "/notes");
    fs::create_directories(root_ + "/step_03");  // not canonical: not ours
    write_text(root_ + "/step_03/COMPLETE", "{}");

    EXPECT_EQ(prune_checkpoints(root_, 2, 5), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(list_complete_steps(root_), (std::vector<int64_t>{4, 5}));
    EXPECT_FALSE(fs::exists(step_dir_path(root_, 1)));
    EXPECT_TRUE(fs::exists(step_dir_path(root_, 0)));
    EXPECT_TRUE(fs::exists(step_dir_path(root_, 6)));
    EXPECT_TRUE(fs::exists(root_ + "/notes"));
    EXPECT_TRUE(fs::exists(root_ + "/step_03/COMPLETE"));
    EXPECT_EQ(latest_complete_checkpoint(root_)->step, 5);

    // The step just written is kept even when it is not among the newest.
    write_checkpoint(7, 1);
    EXPECT_EQ(prune_checkpoints(root_, 1, 4), (std::vector<int64_t>{5}));
    EXPECT_EQ(list_complete_steps(root_), (std::vector<int64_t>{4, 7}));
    EXPECT_TRUE(prune_checkpoints(root_, 5, 7).empty());
    EXPECT_THROW(prune_checkpoints(root_, 0, 7), rlpt::ValueError);
}

TEST_F(CkptDir, RootErrorsAndAtomicFiles) {
    EXPECT_TRUE(list_complete_steps(root_).empty());
    write_text(root_, "a file, not a directory");
    expect_error<rlpt::IoError>([&] { list_complete_steps(root_); }, "is not a directory");
    fs::remove(root_);

    fs::create_directories(root_);
    const std::string path = root_ + "/state.json";
    write_file_atomic(path, "first");
    write_file_atomic(path, "second");
    std::ifstream in(path);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second");
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    expect_error<rlpt::IoError>([&] { write_file_atomic(root_ + "/missing/x", "y"); }, "cannot create");
    expect_error<rlpt::IoError>([&] { file_digest(root_ + "/nope"); }, "cannot open");
}

TEST_F(CkptDir, DamagedCheckpointsAreMovedAsideAndTheNewestValidOneIsChosen) {
    for (int64_t s = 1; s <= 4; ++s) write_checkpoint(s);
    EXPECT_TRUE(list_damaged_checkpoints(root_).empty());
    // 4: flipped bytes (only the CRC sees them), 3: a malformed manifest.
    {
        std::fstream f(step_dir_path(root_, 4) + "/actor_rank0.h5", std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(200);
        f.put('\x77');
    }
    write_text(step_dir_path(root_, 3) + "/COMPLETE", "{\"manifest_version\": 1, ");
    std::vector<std::string> moved;
    const auto best = newest_valid_checkpoint(root_, &moved);
    ASSERT_TRUE(best.has_value());
    EXPECT_EQ(best->step, 2);
    ASSERT_EQ(moved.size(), 2u);
    EXPECT_NE(moved[0].find("step_4.damaged-"), std::string::npos) << moved[0];
    EXPECT_NE(moved[1].find("step_3.damaged-"), std::string::npos) << moved[1];
    EXPECT_FALSE(fs::exists(step_dir_path(root_, 4)));
    EXPECT_TRUE(fs::exists(moved[0] + "/actor_rank0.h5"));  // kept, never deleted
    const auto damaged = list_damaged_checkpoints(root_);
    ASSERT_EQ(damaged.size(), 2u);
    EXPECT_EQ(damaged[0].rfind("step_3.damaged-", 0), 0u);
    // Step 3 can be written again, and the moved directories are neither listed nor pruned.
    write_checkpoint(3);
    EXPECT_EQ(list_complete_steps(root_), (std::vector<int64_t>{1, 2, 3}));
    prune_checkpoints(root_, 1, 3);
    EXPECT_EQ(list_damaged_checkpoints(root_).size(), 2u);
    // A missing file and a truncated one: nothing valid left.
    fs::remove(step_dir_path(root_, 3) + "/actor_rank1.h5");
    EXPECT_FALSE(newest_valid_checkpoint(root_).has_value());
    EXPECT_EQ(list_damaged_checkpoints(root_).size(), 3u);
}

TEST(IoErrorCause, NamesTheCauseOfAnErrno) {
    EXPECT_EQ(rlpt::io_error_cause(ENOSPC), "disk full");
    EXPECT_EQ(rlpt::io_error_cause(EISDIR), "a directory in the way");
    EXPECT_EQ(rlpt::io_error_cause(EACCES), "permission denied");
    EXPECT_EQ(rlpt::io_error_cause(12345), "file-system error");
    EXPECT_EQ(rlpt::errno_in_text("H5FD_sec2_write(): file write failed: time = x, errno = 28, error message = 'No'"),
              28);
    EXPECT_EQ(rlpt::errno_in_text("no number here"), 0);
}

TEST_F(CkptDir, DiskErrorsNameTheCauseFirst) {
    fs::create_directories(root_ + "/x.h5.tmp");  // a directory where the temporary file goes
    try {
        H5Writer w(root_ + "/x.h5");
        ADD_FAILURE() << "created a file over a directory";
    } catch (const rlpt::IoError& e) {
        const std::string msg = e.message();
        EXPECT_EQ(msg.rfind("a directory in the way while writing " + root_ + "/x.h5.tmp (Is a directory)", 0), 0u)
            << msg;
    }
}

}  // namespace
