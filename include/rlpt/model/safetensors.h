#pragma once
// Safetensors reading (mmap, zero-copy) and writing (atomic, optionally sharded).
//
// Format: 8-byte little-endian header length N, N bytes of JSON header, then the data
// buffer. The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the start of the data buffer) and may hold "__metadata__", a
// string -> string map. Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL; any
// other dtype string is rejected with an IoError naming the file and the tensor.
//
// Errors: malformed input (truncated file, header length past the end of the file, bad
// JSON, unknown dtype, offsets out of range or not matching shape x dtype size,
// overlapping tensors, missing index/shard files) throws rlpt::IoError naming the file
// and, where relevant, the tensor. Programming errors (unknown tensor name in get(),
// non-unique names when writing) throw rlpt::ValueError.
//
// Thread safety: a SafetensorsFile / SafetensorsCheckpoint is immutable after open();
// concurrent get() calls are safe.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rlpt::model {

namespace detail {
struct FileMapping;  // an open read-only mmap of a whole file; unmapped when the last user drops it
}

// Map between the safetensors dtype strings and torch dtypes.
// safetensors_dtype_from_string throws IoError for anything unsupported ("U16", "F8_E4M3", ...).
torch::Dtype safetensors_dtype_from_string(const std::string& s, const std::string& where);
std::string safetensors_dtype_to_string(torch::Dtype dtype);  // ValueError when unsupported

struct SafetensorsTensorInfo {
    torch::Dtype dtype = torch::kFloat32;
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
    uint64_t end = 0;
};

// One .safetensors file, memory-mapped (MAP_PRIVATE: tensors may be written to without
// touching the file, the pages are copied on write).
class SafetensorsFile {
  public:
    // Maps and validates the whole header. Throws IoError on any malformation.
    static SafetensorsFile open(const std::string& path);

    const std::string& path() const { return path_; }
    // Tensor names ordered by data offset (file order).
    const std::vector<std::string>& names() const { return names_; }
    bool contains(const std::string& name) const { return infos_.count(name) != 0; }
    const SafetensorsTensorInfo& info(const std::string& name) const;  // ValueError if absent
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

    // CPU tensor aliasing the mapping (no copy; keeps the mapping alive through its deleter).
    // Copies only when the data is not aligned to the element size.
    torch::Tensor get(const std::string& name) const;
    // get(name).to(device, dtype): copies only when dtype/device differ.
    torch::Tensor get(const std::string& name, torch::Dtype dtype, torch::Device device) const;

  private:
    std::string path_;
    std::shared_ptr<detail::FileMapping> mapping_;
    const uint8_t* data_ = nullptr;  // start of the data buffer inside the mapping
    std::vector<std::string> names_;
    std::map<std::string, SafetensorsTensorInfo> infos_;
    std::map<std::string, std::string> metadata_;
};

// A checkpoint: one model.safetensors, or shards listed by model.safetensors.index.json.
class SafetensorsCheckpoint {
  public:
    // `path` is either a directory (model.safetensors preferred, else
    // model.safetensors.index.json), a .safetensors file, or an index .json file.
    // Throws IoError when nothing loadable is there, when the index is malformed or names a
    // shard that is missing, or when a shard does not hold a tensor the index maps to it.
    static SafetensorsCheckpoint open(const std::string& path);

    const std::string& source() const { return source_; }  // file or index path opened
    // All tensor names, sorted.
    const std::vector<std::string>& names() const { return names_; }
    bool contains(const std::string& name) const { return where_.count(name) != 0; }
    const SafetensorsTensorInfo& info(const std::string& name) const;
    const std::string& file_of(const std::string& name) const;  // shard path
    torch::Tensor get(const std::string& name) const;           // aliasing, as SafetensorsFile
    torch::Tensor get(const std::string& name, torch::Dtype dtype, torch::Device device) const;

  private:
    std::string source_;
    std::vector<SafetensorsFile> files_;
    std::map<std::string, size_t> where_;  // tensor -> index into files_
    std::vector<std::string> names_;
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Produces the data of tensors[index] when the writer needs it (streaming: `tensors` then only
// describe names, shapes and dtypes, e.g. meta-device tensors). Called once per tensor, in the
// order the data is written, which is `tensors`' order when all have one element size.
using TensorFetch = std::function<torch::Tensor(size_t index)>;

// Writes one file atomically (temp file in the same directory + rename). Each tensor is
// converted to a contiguous CPU tensor; the data buffer holds them by element size, largest
// first (stable), so every tensor is aligned to its element size and reads alias it. Names
// must be unique, non-empty and not "__metadata__". `metadata` defaults to {"format": "pt"}.
// With `fetch`, each tensor's data is produced (and dropped) as it is written: peak memory is
// one tensor.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                      const TensorFetch& fetch = nullptr);

// Writes `tensors` into `dir` the way Hugging Face does: a single `<base>.safetensors`
// when everything fits in `max_shard_bytes` (0 = no limit), else
// `<base>-0000i-of-0000n.safetensors` shards (a tensor larger than the limit gets a shard of
// its own) plus `<base>.safetensors.index.json` ({"metadata": {"total_size": bytes},
// "weight_map": {tensor: shard}}). Creates `dir` if needed. Removes stale files from an earlier
// save with the same base name (old shards, an old single file or index) so loaders can't pick
// them up. Returns the file names written (shards, then the index if any).
std::vector<std::string> save_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                                                  uint64_t max_shard_bytes, const std::string& base = "model",
                                                  const TensorFetch& fetch = nullptr);

// Writes `text` to `path` atomically (temp file + rename). IoError on failure.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace rlpt::model
