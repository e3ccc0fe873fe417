#pragma once
// HDF5 checkpoint files: named tensors, named byte blobs and scalar file attributes, written
// atomically and verified on read. The building block of per-role checkpoints (weights,
// optimizer state, RNG states, data position, step, config hash).
//
// File layout (format version kFormatVersion):
//   /                      attributes rlpt_magic = kMagic, rlpt_format_version = kFormatVersion,
//                          plus the user's int64 / double / string attributes
//   /<group>/.../<leaf>    one dataset per tensor or blob; names are '/'-separated paths, groups
//                          are created on demand ("actor/optimizer/exp_avg/model.layers.0.w").
//                          Attributes: rlpt_kind ("tensor" | "blob"), rlpt_dtype (torch dtype
//                          name: "float32", "bfloat16", ...), rlpt_crc32 (CRC-32 of the raw
//                          little-endian bytes, checked on every read).
// Dtypes: every non-quantized torch dtype except complex32. bfloat16 and float16 are stored as
// uint16 and bool as uint8 (rlpt_dtype records the real one); complex64/128 as float32/64 with a
// trailing dimension of 2. Shapes: any, including 0-dim (HDF5 scalar) and empty (a zero extent).
// Tensors are copied to CPU and made contiguous; strides are not kept.
//
// Errors: IoError (with HDF5's own error text, never printed to stderr) for I/O and format
// problems: missing file, not HDF5, truncated, wrong magic or version, missing dataset or
// attribute, checksum mismatch. ValueError for bad arguments (names, dtypes, duplicates).
// Threading: one object per thread; HDF5 serialises calls internally (thread-safe build).
// Little-endian hosts only (checked at compile time).

#include <torch/torch.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rlpt/ckpt/checkpoint_dir.h"

namespace rlpt::ckpt {

inline constexpr const char* kMagic = "rlpt-checkpoint";
inline constexpr int64_t kFormatVersion = 1;

// Writes one checkpoint file. Nothing appears at `path` until commit(): the data goes to
// <path>.tmp, which commit() closes, fsyncs, renames over `path` (replacing an older file
// atomically) and makes durable with an fsync of the directory. Destroying an uncommitted writer
// (e.g. during exception unwinding) deletes the temporary file and leaves `path` untouched.
class H5Writer {
  public:
    // Creates (truncates) <path>.tmp. IoError if the directory does not exist or is not writable.
    explicit H5Writer(std::string path);
    ~H5Writer();
    H5Writer(H5Writer&&) noexcept;
    H5Writer& operator=(H5Writer&&) noexcept;
    H5Writer(const H5Writer&) = delete;
    H5Writer& operator=(const H5Writer&) = delete;

    const std::string& path() const;

    // `name`: '/'-separated, non-empty components other than "." and "..", no leading or trailing
    // '/'. A name may be written once, and may not be both a dataset and a group.
    void write_tensor(const std::string& name, const torch::Tensor& tensor);
    void write_blob(const std::string& name, std::string_view bytes);

    // Scalar attributes on the file. Names must not start with "rlpt_" (reserved); setting a
    // name again replaces its value. Strings must not contain '\0' (use a blob for binary data).
    void set_int_attr(const std::string& name, int64_t value);
    void set_double_attr(const std::string& name, double value);
    void set_string_attr(const std::string& name, const std::string& value);

    // Finalises the file as described above and returns the size and CRC-32 of the committed
    // file (for the checkpoint manifest). The writer is unusable afterwards.
    FileDigest commit();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

enum class EntryKind { kTensor, kBlob };

struct TensorMeta {
    torch::ScalarType dtype;
    std::vector<int64_t> sizes;
};

// Reads a committed checkpoint file. The constructor validates that the file is HDF5 with the
// rlpt magic and this build's format version.
class H5Reader {
  public:
    explicit H5Reader(std::string path);
    ~H5Reader();
    H5Reader(H5Reader&&) noexcept;
    H5Reader& operator=(H5Reader&&) noexcept;
    H5Reader(const H5Reader&) = delete;
    H5Reader& operator=(const H5Reader&) = delete;

    const std::string& path() const;
    int64_t format_version() const;

    // Whether `name` is a tensor or blob dataset.
    bool contains(const std::string& name) const;
    EntryKind kind(const std::string& name) const;
    // Full names of all tensors and blobs under `group` ("" = everywhere), sorted.
    std::vector<std::string> list(const std::string& group = "") const;

    // dtype and shape without reading the data.
    TensorMeta tensor_meta(const std::string& name) const;
    // A new contiguous CPU tensor with the stored dtype and shape, checksum verified.
    torch::Tensor read_tensor(const std::string& name) const;
    // Elements [begin, begin + count) of a 1-D tensor (a hyperslab read: only those bytes are
    // read). The dataset checksum covers the whole tensor and is not checked here: sharded
    // checkpoints are verified whole against their manifest CRC-32 before they are read
    // (ckpt::newest_valid_checkpoint). IoError when the tensor is not 1-D or the range is outside it.
    torch::Tensor read_tensor_range(const std::string& name, int64_t begin, int64_t count) const;
    std::string read_blob(const std::string& name) const;

    bool has_attr(const std::string& name) const;
    // User attribute names (without the reserved rlpt_ ones), sorted.
    std::vector<std::string> attr_names() const;
    // IoError if missing or of another type (an int attribute is not read as double).
    int64_t int_attr(const std::string& name) const;
    double double_attr(const std::string& name) const;
    std::string string_attr(const std::string& name) const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace rlpt::ckpt
