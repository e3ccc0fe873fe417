#include "ckpt/fs_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "rlpt/ckpt/checkpoint_dir.h"
#include "rlpt/core/error.h"

namespace rlpt::ckpt {
namespace {

void fsync_path(const std::string& path, int flags, const char* what) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) {
        RLPT_THROW(IoError, "cannot open {} {} to fsync it: {}", what, path, std::strerror(errno));
    }
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    // EINVAL: the file system does not support fsync on this object (some FUSE / tmpfs dirs).
    if (rc != 0 && err != EINVAL) {
        RLPT_THROW(IoError, "{} while syncing {} {} to disk ({})", io_error_cause(err), what, path, std::strerror(err));
    }
}

}  // namespace

void fsync_directory(const std::string& dir) { fsync_path(dir, O_RDONLY | O_DIRECTORY, "directory"); }

namespace detail {

void fsync_file(const std::string& path) { fsync_path(path, O_RDONLY, "file"); }

std::string parent_dir(const std::string& path) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    return parent.empty() ? std::string(".") : parent.string();
}

void rename_file(const std::string& from, const std::string& to) {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
        const int err = errno;
        RLPT_THROW(IoError, "{} while renaming {} to {} ({})", io_error_cause(err), from, to, std::strerror(err));
    }
}

}  // namespace detail
}  // namespace rlpt::ckpt
