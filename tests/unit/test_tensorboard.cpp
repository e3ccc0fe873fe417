// The hand-encoded TensorBoard event file (src/app/tensorboard.h). The trainer test
// (trainer_runs.sh own-task) parses a run's file back and compares it with metrics.jsonl.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tensorboard.h"

TEST(TensorBoard, Crc32cKnownValues) {
    EXPECT_EQ(rlpt::app::crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
    EXPECT_EQ(rlpt::app::crc32c("", 0), 0u);
}

TEST(TensorBoard, RecordsAreFramedAndCarryTheScalars) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("rlpt_tb_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    std::string path;
    {
        rlpt::app::TensorBoardWriter w(dir.string());
        w.add_scalars(7, {{"actor/pg_loss", 0.25}, {"val-core/x/acc/mean@1", 1.0}, {"skipped", std::nan("")}});
        path = w.path();
    }
    EXPECT_EQ(fs::path(path).parent_path(), dir);
    EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    // Two records: the file_version event and the step's event.
    size_t at = 0;
    std::vector<std::string> records;
    while (at + 12 <= data.size()) {
        uint64_t n = 0;
        std::memcpy(&n, data.data() + at, 8);
        ASSERT_LE(at + 16 + n, data.size());
        records.push_back(data.substr(at + 12, n));
        at += 16 + n;
    }
    EXPECT_EQ(at, data.size());
    ASSERT_EQ(records.size(), 2u);
    EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
    EXPECT_NE(records[1].find("actor/pg_loss"), std::string::npos);
    EXPECT_NE(records[1].find("val-core/x/acc/mean@1"), std::string::npos);
    EXPECT_EQ(records[1].find("skipped"), std::string::npos);
    const float quarter = 0.25f;
    EXPECT_NE(records[1].find(std::string("\x15", 1) + std::string(reinterpret_cast<const char*>(&quarter), 4)),
              std::string::npos);  // simple_value (field 2, fixed32) = 0.25
    fs::remove_all(dir);
}
