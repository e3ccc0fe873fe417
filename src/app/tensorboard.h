#pragma once
// TensorBoard event files without TensorFlow or protobuf: the few messages a scalar needs,
// encoded by hand (tensorflow/core/util/event.proto, summary.proto), in TFRecord framing.
// Torch-free. Private to src/app.
//
// File: <dir>/events.out.tfevents.<unix seconds>.<host>; records of
//   uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// with masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (CRC-32C, Castagnoli). The first
// record is Event{wall_time, file_version: "brain.Event:2"}; each add_scalars() writes one
// Event{wall_time (1, double), step (2, int64), summary (5): Summary{value (1) repeated:
// Value{tag (1, string), simple_value (2, float)}}}, one value per finite metric, and flushes.
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace rlpt::app {

// CRC-32C of `data` (exposed for tests).
uint32_t crc32c(const void* data, size_t n);

class TensorBoardWriter {
  public:
    // Creates `dir` and a new event file in it (IoError when it cannot).
    explicit TensorBoardWriter(const std::string& dir);
    // One scalar per finite metric at `step` (NaN/inf are skipped, as metrics.jsonl writes null).
    void add_scalars(int64_t step, const std::map<std::string, double>& metrics);
    const std::string& path() const { return path_; }

  private:
    void write_record(const std::string& data);
    std::string path_;
    std::ofstream out_;
};

}  // namespace rlpt::app
