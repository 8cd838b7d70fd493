#pragma once
// Editing a host's configuration file the way a careful admin would, shared by every editor
// (waagent's RDMA keys, the container engines' NVIDIA runtime): the name followed through
// symlinks under the root, the original kept once beside it, the new text written atomically
// with the original's mode and owner. The text edit itself belongs to each caller.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::util {

// Follows symlinks at `host_path` the way the kernel would on that host (HostFs::resolve_checked:
// inside the root, absolute targets from the root, '..' never above it). The path it ends at
// may not exist.
Result<std::filesystem::path> follow_links(const HostFs& host, std::string_view host_path);

// Writes `content` to `path` only if `path` does not exist yet: through a temp file and
// link(2), which fails rather than replace, so a crash never leaves a partial backup and an
// existing backup (the true original) is never overwritten. Mode and (as root) owner from
// `like`. Returns whether it was created.
Result<bool> create_once(const std::filesystem::path& path, const std::string& content, const struct stat& like);

// A configuration file as it is now. `exists` false: the stat is what a new file gets
// (0644, this process's owner).
struct CurrentFile {
  std::filesystem::path path; // symlinks followed
  bool exists = false;
  struct stat st {};
  std::string text;
};
// Reads it (errors name the path and the failing call). A missing file is not an error; one
// larger than `bound` is, naming it (a 3 GiB waagent.conf is refused, never read and rewritten).
Result<CurrentFile> read_current(const std::filesystem::path& path, FileBound bound = host_file::config);

// Refuses before anything is touched: a read-only file (a decision to respect) or a directory
// the new file cannot be renamed into. `wanted` names the change for the hint. A missing file's
// directories are created.
Status check_writable(const CurrentFile& cur, const std::string& wanted);

struct EditWrite {
  std::optional<std::filesystem::path> backup; // created now or earlier
  bool backup_created = false;
};
// The one-time backup of an existing original at `backup`, then the atomic write of `edited`
// with the original's mode and owner; `crash_point` is the test hook (util::crash_point). When
// the write fails the backup made now is removed (it equals the untouched original).
Result<EditWrite> write_edited(const CurrentFile& cur, const std::filesystem::path& backup, const std::string& edited,
                               const std::string& crash_point);

} // namespace hpcbake::util
