#pragma once
// Checkpoint directories: <root>/step_<N>/ holds the files of one checkpoint (one or more per
// rank, typically H5Writer files) plus a COMPLETE marker written last. COMPLETE holds the
// manifest as JSON (step, world layout, config hash, file list with sizes and CRC-32s); a
// directory without it is incomplete (being written, or left by a crash) and is never resumed
// from and never pruned.
//
// Protocol for a multi-rank checkpoint (the MPI part is the caller's):
//   1. one rank: create_step_dir(root, step)        (others wait, e.g. on a barrier)
//   2. every rank: H5Writer w(step_dir + "/actor_rank3.h5"); ...; digest = w.commit();
//   3. gather (name, digest) on one rank, which calls write_complete_marker(step_dir, manifest)
//   4. that rank: prune_checkpoints(root, keep_last, step)
// Resume: latest_complete_checkpoint(root).
//
// Every function here is local (no MPI); none is thread-safe against concurrent calls on the
// same directory from several threads of one process, but readers in other processes may run
// while a checkpoint is written or pruned: COMPLETE appears atomically (temporary file, fsync,
// rename, directory fsync) and disappears first when a checkpoint is pruned.
// Errors: IoError for file-system problems and malformed manifests, ValueError for bad
// arguments. Torch-free.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlpt::ckpt {

// Version of the manifest JSON layout (COMPLETE); read_manifest rejects other versions.
inline constexpr int64_t kManifestVersion = 1;
inline constexpr const char* kCompleteMarker = "COMPLETE";

struct FileDigest {
    uint64_t size = 0;   // bytes
    uint32_t crc32 = 0;  // CRC-32 of the whole file (rlpt/ckpt/crc32.h)
    bool operator==(const FileDigest& o) const { return size == o.size && crc32 == o.crc32; }
    bool operator!=(const FileDigest& o) const { return !(*this == o); }
};

// Size and CRC-32 of a file's bytes. IoError if it can't be read.
FileDigest file_digest(const std::string& path);

// Writes `contents` to `path` atomically: <path>.tmp, fsync, rename over path, fsync of the
// directory. Readers see the old file or the new one, never a mix.
void write_file_atomic(const std::string& path, std::string_view contents);

// fsync of a directory (after creating, renaming or removing entries in it).
void fsync_directory(const std::string& dir);

struct ManifestFile {
    std::string name;  // relative to the step directory; no "..", not absolute
    FileDigest digest;
};

struct Manifest {
    int64_t step = 0;
    std::string config_hash;                        // identifies the run's config
    int world_size = 0;                             // MPI world size that wrote the checkpoint
    std::map<std::string, std::vector<int>> roles;  // role name -> world ranks hosting it
    std::vector<ManifestFile> files;
    // Filled by write_complete_marker; informational.
    std::string rlpt_version;
    std::string git_sha;
};

// "step_<N>" and <root>/step_<N>. step must be >= 0.
std::string step_dir_name(int64_t step);
std::string step_dir_path(const std::string& root, int64_t step);

// Creates <root>/step_<N> (and root) if missing and fsyncs the parents; returns its path.
// ValueError if step < 0 or if the directory is already complete (a checkpoint is never rewritten
// in place).
std::string create_step_dir(const std::string& root, int64_t step);

// Checks that every file in the manifest exists in step_dir with the recorded size (and, with
// verify_crc, the recorded CRC, which reads every byte), that names are unique and relative, and
// that manifest.step matches the directory name; then writes COMPLETE atomically. IoError names
// the first file that does not match.
void write_complete_marker(const std::string& step_dir, const Manifest& manifest, bool verify_crc = false);

bool is_complete(const std::string& step_dir);

// Parses <step_dir>/COMPLETE. IoError if missing (incomplete checkpoint), not valid JSON, missing
// keys, or of another manifest version.
Manifest read_manifest(const std::string& step_dir);

// Re-reads every file of a complete checkpoint and compares size and CRC with the manifest.
// IoError naming the first mismatching or missing file.
void verify_checkpoint(const std::string& step_dir);

struct CheckpointInfo {
    int64_t step = 0;
    std::string dir;
    Manifest manifest;
};

// Steps of the directories under root that carry a COMPLETE marker, ascending. Entries that are
// not step_<N> directories are ignored. Empty if root does not exist.
std::vector<int64_t> list_complete_steps(const std::string& root);

// The newest checkpoint whose COMPLETE marker parses, names its own step, and whose files all
// exist with their recorded sizes (a cheap check; verify_checkpoint for CRCs). Incomplete or
// damaged directories are skipped with a warning. nullopt if there is none (or no root).
std::optional<CheckpointInfo> latest_complete_checkpoint(const std::string& root);

// For resume: the newest checkpoint under root that passes the full check (manifest parses and
// names its step, every file there with its recorded size and CRC-32). Each newer complete one
// that fails it is damaged: it is moved aside to step_<N>.damaged-<UTC time> (never deleted;
// a later save of step N then writes a fresh step_<N>), with one warning line naming the
// problem and the new name; its path (after the move) is appended to *moved when given.
// nullopt if none is valid. IoError if a damaged directory cannot be moved.
std::optional<CheckpointInfo> newest_valid_checkpoint(const std::string& root,
                                                      std::vector<std::string>* moved = nullptr);

// Names of the directories under root that newest_valid_checkpoint moved aside (now or in an
// earlier run), sorted. Empty if root does not exist.
std::vector<std::string> list_damaged_checkpoints(const std::string& root);

// Keeps the newest keep_last (>= 1) complete checkpoints and protect_step (the one just
// written, kept even if older); removes the other complete ones (COMPLETE first, then the
// directory). Incomplete directories are never touched. Returns the removed steps, ascending.
std::vector<int64_t> prune_checkpoints(const std::string& root, int keep_last, int64_t protect_step);

}  // namespace rlpt::ckpt
