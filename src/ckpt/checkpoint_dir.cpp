#include "rlpt/ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ckpt/fs_util.h"
#include "rlpt/build_config.h"
#include "rlpt/ckpt/crc32.h"
#include "rlpt/core/error.h"
#include "rlpt/core/log.h"

namespace rlpt::ckpt {

namespace fs = std::filesystem;

namespace {

// Final component of a directory path, ignoring trailing separators.
std::string dir_basename(const std::string& dir) {
    fs::path p = fs::path(dir).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    return p.filename().string();
}

// step_<N> in canonical form (no sign, no leading zeros) -> N; -1 otherwise.
int64_t parse_step_name(const std::string& name) {
    constexpr std::string_view kPrefix = "step_";
    if (name.size() <= kPrefix.size() || name.size() > kPrefix.size() + 18 ||
        name.compare(0, kPrefix.size(), kPrefix) != 0) {
        return -1;
    }
    int64_t step = 0;
    for (size_t i = kPrefix.size(); i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step_dir_name(step) == name ? step : -1;
}

void check_file_name(const std::string& name, const std::string& step_dir) {
    const fs::path p(name);
    bool ok = !name.empty() && p.is_relative() && name != kCompleteMarker;
    for (const auto& part : p) ok = ok && part != ".." && part != ".";
    RLPT_CHECK(ok,
               "checkpoint {}: bad file name '{}' in the manifest (must be relative, without "
               "'.' or '..', and not {})",
               step_dir, name, kCompleteMarker);
}

std::string read_small_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    RLPT_CHECK_KIND(IoError, in.good(), "cannot open {}: {}", path, std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    RLPT_CHECK_KIND(IoError, !in.bad(), "cannot read {}", path);
    return ss.str();
}

nlohmann::json manifest_to_json(const Manifest& m) {
    nlohmann::json files = nlohmann::json::array();
    for (const ManifestFile& f : m.files) {
        files.push_back({{"name", f.name}, {"size", f.digest.size}, {"crc32", f.digest.crc32}});
    }
    nlohmann::json roles = nlohmann::json::object();
    for (const auto& [role, ranks] : m.roles) roles[role] = ranks;
    return {{"manifest_version", kManifestVersion}, {"step", m.step},      {"config_hash", m.config_hash},
            {"world_size", m.world_size},           {"roles", roles},      {"files", files},
            {"rlpt_version", m.rlpt_version},       {"git_sha", m.git_sha}};
}

Manifest manifest_from_json(const nlohmann::json& j) {
    Manifest m;
    m.step = j.at("step").get<int64_t>();
    m.config_hash = j.at("config_hash").get<std::string>();
    m.world_size = j.at("world_size").get<int>();
    for (const auto& [role, ranks] : j.at("roles").items()) {
        m.roles[role] = ranks.get<std::vector<int>>();
    }
    for (const auto& f : j.at("files")) {
        m.files.push_back(
            {f.at("name").get<std::string>(), {f.at("size").get<uint64_t>(), f.at("crc32").get<uint32_t>()}});
    }
    m.rlpt_version = j.value("rlpt_version", "");
    m.git_sha = j.value("git_sha", "");
    return m;
}

// Every listed file exists with its recorded size (and CRC when asked). IoError otherwise.
void check_files(const std::string& step_dir, const Manifest& m, bool verify_crc) {
    for (const ManifestFile& f : m.files) {
        const std::string path = (fs::path(step_dir) / f.name).string();
        std::error_code ec;
        const uint64_t size = fs::file_size(path, ec);
        RLPT_CHECK_KIND(IoError, !ec, "checkpoint {}: file {} is missing or unreadable: {}", step_dir, f.name,
                        ec.message());
        RLPT_CHECK_KIND(IoError, size == f.digest.size, "checkpoint {}: file {} has {} bytes, the manifest says {}",
                        step_dir, f.name, size, f.digest.size);
        if (verify_crc) {
            const FileDigest d = file_digest(path);
            RLPT_CHECK_KIND(IoError, d.crc32 == f.digest.crc32,
                            "checkpoint {}: file {} has CRC-32 {:08x}, the manifest says {:08x}", step_dir, f.name,
                            d.crc32, f.digest.crc32);
        }
    }
}

}  // namespace

FileDigest file_digest(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    RLPT_CHECK_KIND(IoError, fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
    FileDigest d;
    std::vector<unsigned char> buf(size_t(1) << 20);
    while (true) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int err = errno;
            ::close(fd);
            RLPT_THROW(IoError, "cannot read {}: {}", path, std::strerror(err));
        }
        if (n == 0) break;
        d.crc32 = crc32(buf.data(), size_t(n), d.crc32);
        d.size += uint64_t(n);
    }
    ::close(fd);
    return d;
}

void write_file_atomic(const std::string& path, std::string_view contents) {
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        const int e = errno;
        RLPT_THROW(IoError, "{} while creating {} (cannot create it: {})", io_error_cause(e), tmp, std::strerror(e));
    }
    size_t done = 0;
    int err = 0;
    while (done < contents.size()) {
        const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            err = errno;
            break;
        }
        done += size_t(n);
    }
    if (err == 0 && ::fsync(fd) != 0) err = errno;
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err != 0) {
        ::unlink(tmp.c_str());
        RLPT_THROW(IoError, "{} while writing {} ({})", io_error_cause(err), tmp, std::strerror(err));
    }
    detail::rename_file(tmp, path);
    fsync_directory(detail::parent_dir(path));
}

std::string step_dir_name(int64_t step) {
    RLPT_CHECK(step >= 0, "checkpoint step must be >= 0, got {}", step);
    return fmt::format("step_{}", step);
}

std::string step_dir_path(const std::string& root, int64_t step) {
    return (fs::path(root) / step_dir_name(step)).string();
}

bool is_complete(const std::string& step_dir) { return fs::exists(fs::path(step_dir) / kCompleteMarker); }

std::string create_step_dir(const std::string& root, int64_t step) {
    const std::string dir = step_dir_path(root, step);
    RLPT_CHECK(!is_complete(dir), "checkpoint {} is already complete; refusing to write into it", dir);
    const bool root_existed = fs::exists(root);
    std::error_code ec;
    fs::create_directories(dir, ec);
    RLPT_CHECK_KIND(IoError, !ec, "{} while creating checkpoint directory {} ({})", io_error_cause(ec.value()), dir,
                    ec.message());
    if (!root_existed) fsync_directory(detail::parent_dir(fs::path(root).lexically_normal().string()));
    fsync_directory(root);
    return dir;
}

void write_complete_marker(const std::string& step_dir, const Manifest& manifest, bool verify_crc) {
    RLPT_CHECK(dir_basename(step_dir) == step_dir_name(manifest.step),
               "manifest for step {} cannot complete directory {}", manifest.step, step_dir);
    RLPT_CHECK(!is_complete(step_dir), "checkpoint {} is already complete", step_dir);
    std::set<std::string> names;
    for (const ManifestFile& f : manifest.files) {
        check_file_name(f.name, step_dir);
        RLPT_CHECK(names.insert(f.name).second, "checkpoint {}: file {} is listed twice", step_dir, f.name);
    }
    check_files(step_dir, manifest, verify_crc);
    Manifest m = manifest;
    m.rlpt_version = RLPT_VERSION_STRING;
    m.git_sha = RLPT_GIT_SHA;
    write_file_atomic((fs::path(step_dir) / kCompleteMarker).string(), manifest_to_json(m).dump(2));
}

Manifest read_manifest(const std::string& step_dir) {
    const std::string path = (fs::path(step_dir) / kCompleteMarker).string();
    RLPT_CHECK_KIND(IoError, fs::exists(path), "checkpoint {} is incomplete (no {} marker)", step_dir, kCompleteMarker);
    const std::string text = read_small_file(path);
    try {
        const nlohmann::json j = nlohmann::json::parse(text);
        const int64_t version = j.at("manifest_version").get<int64_t>();
        RLPT_CHECK_KIND(IoError, version == kManifestVersion,
                        "{}: manifest version {} is not supported (this build reads version {})", path, version,
                        kManifestVersion);
        return manifest_from_json(j);
    } catch (const nlohmann::json::exception& e) {
        RLPT_THROW(IoError, "{}: malformed manifest: {}", path, e.what());
    }
}

void verify_checkpoint(const std::string& step_dir) {
    check_files(step_dir, read_manifest(step_dir), /*verify_crc=*/true);
}

std::vector<int64_t> list_complete_steps(const std::string& root) {
    std::vector<int64_t> steps;
    if (!fs::exists(root)) return steps;
    RLPT_CHECK_KIND(IoError, fs::is_directory(root), "checkpoint root {} is not a directory", root);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
        const int64_t step = parse_step_name(entry.path().filename().string());
        if (step >= 0 && entry.is_directory() && is_complete(entry.path().string())) {
            steps.push_back(step);
        }
    }
    RLPT_CHECK_KIND(IoError, !ec, "cannot list checkpoint root {}: {}", root, ec.message());
    std::sort(steps.begin(), steps.end());
    return steps;
}

std::optional<CheckpointInfo> latest_complete_checkpoint(const std::string& root) {
    const std::vector<int64_t> steps = list_complete_steps(root);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
        const std::string dir = step_dir_path(root, *it);
        try {
            Manifest m = read_manifest(dir);
            RLPT_CHECK_KIND(IoError, m.step == *it, "{}: manifest names step {}", dir, m.step);
            check_files(dir, m, /*verify_crc=*/false);
            return CheckpointInfo{*it, dir, std::move(m)};
        } catch (const IoError& e) {
            RLPT_LOG_WARN("skipping damaged checkpoint {}: {}", dir, e.message());
        }
    }
    return std::nullopt;
}

namespace {
std::string utc_stamp() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    return buf;
}
constexpr std::string_view kDamagedInfix = ".damaged-";
}  // namespace

std::optional<CheckpointInfo> newest_valid_checkpoint(const std::string& root, std::vector<std::string>* moved) {
    const std::vector<int64_t> steps = list_complete_steps(root);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
        const std::string dir = step_dir_path(root, *it);
        std::string problem;
        try {
            Manifest m = read_manifest(dir);
            RLPT_CHECK_KIND(IoError, m.step == *it, "{}: the manifest names step {}", dir, m.step);
            check_files(dir, m, /*verify_crc=*/true);
            return CheckpointInfo{*it, dir, std::move(m)};
        } catch (const IoError& e) {
            problem = e.message();
        }
        std::string aside = dir + std::string(kDamagedInfix) + utc_stamp();
        for (int n = 1; fs::exists(aside); ++n)
            aside = dir + std::string(kDamagedInfix) + utc_stamp() + "-" + std::to_string(n);
        detail::rename_file(dir, aside);
        fsync_directory(root);
        RLPT_LOG_WARN("checkpoint {} is damaged ({}); moved it aside to {} and falling back to an older one", dir,
                      problem, aside);
        if (moved) moved->push_back(aside);
    }
    return std::nullopt;
}

std::vector<std::string> list_damaged_checkpoints(const std::string& root) {
    std::vector<std::string> out;
    if (!fs::is_directory(root)) return out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
        const std::string name = entry.path().filename().string();
        const size_t at = name.find(kDamagedInfix);
        if (at != std::string::npos && parse_step_name(name.substr(0, at)) >= 0) out.push_back(name);
    }
    RLPT_CHECK_KIND(IoError, !ec, "cannot list checkpoint root {}: {}", root, ec.message());
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<int64_t> prune_checkpoints(const std::string& root, int keep_last, int64_t protect_step) {
    RLPT_CHECK(keep_last >= 1, "keep_last must be >= 1, got {}", keep_last);
    const std::vector<int64_t> steps = list_complete_steps(root);
    std::vector<int64_t> removed;
    const size_t n_keep = std::min(steps.size(), size_t(keep_last));
    for (size_t i = 0; i + n_keep < steps.size(); ++i) {
        if (steps[i] == protect_step) continue;
        const std::string dir = step_dir_path(root, steps[i]);
        // Marker first: from here on readers see an incomplete directory, never a partial one.
        std::error_code ec;
        fs::remove(fs::path(dir) / kCompleteMarker, ec);
        RLPT_CHECK_KIND(IoError, !ec, "cannot remove {}/{}: {}", dir, kCompleteMarker, ec.message());
        fsync_directory(dir);
        fs::remove_all(dir, ec);
        RLPT_CHECK_KIND(IoError, !ec, "cannot remove checkpoint {}: {}", dir, ec.message());
        removed.push_back(steps[i]);
    }
    if (!removed.empty()) fsync_directory(root);
    return removed;
}

}  // namespace rlpt::ckpt
