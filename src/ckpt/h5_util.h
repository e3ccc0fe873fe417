#pragma once
// Private helpers of the HDF5 checkpoint store (h5_store.cpp): reserved attribute names, the
// dtype table, name validation, scalar attributes and object lookup. All throw like
// RLPT_H5_CHECK (IoError) or ValueError for bad names.

#include <hdf5.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "ckpt/h5_handle.h"

namespace rlpt::ckpt::detail {

inline constexpr const char* kAttrMagic = "rlpt_magic";
inline constexpr const char* kAttrVersion = "rlpt_format_version";
inline constexpr const char* kAttrKind = "rlpt_kind";
inline constexpr const char* kAttrDtype = "rlpt_dtype";
inline constexpr const char* kAttrCrc = "rlpt_crc32";
inline constexpr const char* kKindTensor = "tensor";
inline constexpr const char* kKindBlob = "blob";

inline constexpr torch::ScalarType kSupportedDtypes[] = {torch::kFloat,    torch::kDouble,       torch::kHalf,
                                                         torch::kBFloat16, torch::kBool,         torch::kByte,
                                                         torch::kChar,     torch::kShort,        torch::kInt,
                                                         torch::kLong,     torch::kComplexFloat, torch::kComplexDouble};

struct StoredType {
    hid_t h5;          // file (and memory) type, little endian
    const char* name;  // rlpt_dtype
    bool complex;      // stored with a trailing dimension of 2
};

bool is_supported(torch::ScalarType t);
// ValueError for dtypes outside kSupportedDtypes.
StoredType stored_type(torch::ScalarType t);

// "a/b/c" -> {"a", "b", "c"} (empty components kept).
std::vector<std::string> split_name(const std::string& name);
// ValueError unless name is '/'-separated non-empty components other than "." and "..".
void check_name(const std::string& name, const char* what);
// ValueError for empty names, NUL bytes and the reserved rlpt_ prefix.
void check_attr_name(const std::string& name);

// Scalar attributes; put_* replaces an existing attribute of the same name.
void put_attr(hid_t obj, const char* name, hid_t type, const void* value);
void put_string_attr(hid_t obj, const char* name, const std::string& value);
void put_int_attr(hid_t obj, const char* name, int64_t value);
// IoError naming `where` if missing, of another class, or not scalar. Strings may be fixed- or
// variable-length.
int64_t get_int_attr(hid_t obj, const char* name, const std::string& where);
double get_double_attr(hid_t obj, const char* name, const std::string& where);
std::string get_string_attr(hid_t obj, const char* name, const std::string& where);

enum class Node { kMissing, kGroup, kDataset, kOther };
// What `name` is in the file, walking its prefixes so that a missing parent is kMissing rather
// than an HDF5 error.
Node node_at(hid_t file, const std::string& name);

}  // namespace rlpt::ckpt::detail
