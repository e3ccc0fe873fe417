#pragma once
// Encoding of a Batch's layout (everything but the tensor bytes) for the wire (see
// include/rlpt/wire.h). Decoding validates every length against the buffer: a malformed
// or truncated message is a CommError, never a crash.

#include <string>
#include <vector>

#include "rlpt/batch/batch.h"

namespace rlpt {

struct ColumnDesc {
    std::string name;
    torch::ScalarType dtype = torch::kFloat32;
    std::vector<int64_t> shape;  // shape[0] == rows
    int64_t nbytes = 0;          // numel * element size
};

struct BatchLayout {
    std::vector<ColumnDesc> columns;  // in name order
    Batch skeleton;                   // rows, fields, meta and metrics; no columns yet
};

// Appends the layout of `b` to `out`. Columns are described as they will be sent: the
// caller sends each column's bytes C-contiguous, in name order.
void encode_layout(const Batch& b, std::string& out);
// Parses a layout from [data, data+n). Throws CommError on malformed input.
BatchLayout decode_layout(const char* data, size_t n);

// Wire dtype code <-> torch dtype; unsupported dtypes throw ValueError.
uint8_t dtype_code(torch::ScalarType t);
torch::ScalarType dtype_from_code(uint8_t code);

}  // namespace rlpt
