#pragma once
// Private POSIX helpers of the checkpoint code.

#include <string>

namespace rlpt::ckpt::detail {

// fsync of a regular file's data and metadata. IoError with strerror on failure.
void fsync_file(const std::string& path);

// Parent directory of `path` ("." when it has none).
std::string parent_dir(const std::string& path);

// rename(2) that throws IoError with strerror.
void rename_file(const std::string& from, const std::string& to);

}  // namespace rlpt::ckpt::detail
