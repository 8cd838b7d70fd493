#pragma once
// Safe extraction of tar (plain, gzip, xz, zstd, bzip2, lz4, lzma) and zip archives.
//
// Contract:
// - Every entry name is checked before anything is written: no absolute path, no `..`
//   component, no empty name. A symlink's target must be relative, all its `..` must come
//   first and must not climb above the link's own directory inside dest; a hardlink must
//   point at a regular file already extracted. Device nodes, FIFOs and setuid/setgid files
//   are refused unless the options allow them; sockets always are. A refusal names the
//   archive and the entry.
// - Files are written relative to directory descriptors. Each path component is opened with
//   O_DIRECTORY|O_NOFOLLOW and every file is created with O_NOFOLLOW, so a symlink planted by
//   an earlier entry cannot redirect a later write outside dest. The process's working
//   directory is never changed.
// - Limits (entries, bytes per entry, bytes in all) are enforced on the bytes actually
//   decoded, while streaming; header sizes are not trusted.
// - All or nothing: the archive is extracted into `<dest>.partial-XXXXXX` next to dest and
//   renamed onto dest only when everything succeeded; on failure that tree is removed. dest
//   must not exist or be an empty directory.
// - Memory stays constant whatever the archive size: data goes from libarchive's buffers to
//   pwrite without being held.
// Permission bits (0777 plus sticky) and mtimes are kept; owners are not (files belong to
// the extracting user). Directory modes and times are applied after their contents.
#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>

namespace hpcbake::archive {

struct Limits {
  std::uint64_t max_total_bytes = 16ull << 30; // all entries' data together
  std::uint64_t max_entries = 1'000'000;
  std::uint64_t max_entry_bytes = 8ull << 30; // one entry's data (its size, holes included)
};

struct ExtractOptions {
  Limits limits;
  bool allow_devices = false;    // character/block devices and FIFOs
  bool allow_setuid = false;     // setuid/setgid bits on files
  unsigned strip_components = 0; // like tar --strip-components: entries left empty are skipped
};

struct ExtractStats {
  std::uint64_t entries = 0; // entries read from the archive, skipped ones included
  std::uint64_t bytes = 0;   // bytes of file data written (holes included)
};

// Extracts `archive_path` into `dest` (created if missing; must be empty or new).
Result<ExtractStats> extract_file(const std::filesystem::path& archive_path, const std::filesystem::path& dest,
                                  const ExtractOptions& options);

// Same, reading from an open fd from `offset` to its end (used for makeself payloads);
// `label` names the archive in errors. The fd is read with pread and stays open.
Result<ExtractStats> extract_fd(int fd, std::uint64_t offset, const std::string& label,
                                const std::filesystem::path& dest, const ExtractOptions& options);

// One archive stored in a byte range of a file, as makeself stores its payloads.
struct Range {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// Sees every byte of the range, in order, exactly once; used to hash while extracting.
using Observer = std::function<void(std::size_t range_index, const void* data, std::size_t size)>;
// Called once per range after all its bytes went through the observer, whether its
// extraction worked or not. An error it returns takes precedence over the extraction's own
// (a checksum mismatch explains a decompression error, not the other way round).
using RangeCheck = std::function<Status(std::size_t range_index, const Error* extraction_error)>;

// Extracts several archives stored one after the other in `fd` into one new tree at `dest`,
// all or nothing.
Result<ExtractStats> extract_ranges(int fd, std::span<const Range> ranges, const std::string& label,
                                    const std::filesystem::path& dest, const ExtractOptions& options,
                                    const Observer& observe, const RangeCheck& check);

} // namespace hpcbake::archive
