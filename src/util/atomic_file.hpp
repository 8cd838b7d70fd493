#pragma once
// Durable, all-or-nothing file writes: a reader sees the old file or the new one, never
// half of either, and a crash after success keeps the new one.
#include "util/error.hpp"

#include <filesystem>
#include <string>

namespace hpcbake::util {

// Temp file in the same directory, fsync, rename over `path`, fsync the directory.
Status write_file_atomic(const std::filesystem::path& path, const std::string& content, unsigned mode = 0644);
// fsync of a file or (with O_DIRECTORY in flags) a directory.
Status sync_path(const std::filesystem::path& path, int flags);

} // namespace hpcbake::util
