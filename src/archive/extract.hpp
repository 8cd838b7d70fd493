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
// - Limits (entries, bytes per entry, bytes in all, and the expansion ratio: bytes written
//   per byte of archive read) are enforced on the bytes actually decoded, while streaming;
//   header sizes are not trusted. Each refusal names the `hpcbake extract` flag that raises
//   the limit (Limits::flag).
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
#include <vector>

namespace hpcbake::archive {

struct Limits {
  std::uint64_t max_total_bytes = 16ull << 30; // all entries' data together (extract --max-bytes)
  std::uint64_t max_entries = 1'000'000;       // extract --max-entries
  std::uint64_t max_entry_bytes = 8ull << 30;  // one entry's data, holes included (extract --max-entry-bytes)
  // The expansion ratio (extract --max-ratio; 0: no ratio check): the file data written
  // (holes excluded) may be at most max_ratio times the archive bytes read so far, judged
  // once more than ratio_floor_bytes are written. A 4 MB tar.gz of 4 GiB of zeros (1000:1,
  // deflate's ceiling; xz, zstd and bzip2 go far beyond) passes the byte limits above.
  // Why 100, from measurements (a prefix scan of each decompressed stream: the largest
  // cumulative output/input once the output passes a floor, tar headers counted as output,
  // so at or above what extraction sees): Debian's NVIDIA 535 packages, built from the files
  // of NVIDIA's .run, 1.7 (nvidia-tesla-535-kernel-dkms) to 10.6 (libcuda1); Debian 12's
  // kernel image, headers and kbuild at most 5.9; all 1450 data streams of a Debian 12
  // package cache (10 GiB decompressed) at most 41 past 1 MiB of output, 27 past 16 MiB and
  // 18.5 past 64 MiB (libmlir-19-dev). No NVIDIA .run or DOCA/OFED tarball was measured.
  // 100 is 5 times the largest ratio seen past the floor and 10 times under a gzip bomb.
  std::uint64_t max_ratio = 100;
  // Under this much output the ratio is not judged: a small, highly compressible file (a
  // text file of zeros, padding) is no bomb, and real streams run higher early (41 past
  // 1 MiB above). A bomb writes at most the larger of this and max_ratio times what it read.
  std::uint64_t ratio_floor_bytes = 64ull << 20;

  enum class Which { total_bytes, entries, entry_bytes, ratio };
  // The `hpcbake extract` flag that sets a limit ("--max-bytes"...).
  static const char* flag(Which w);
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
  std::uint64_t read = 0;    // bytes of the archive read (compressed), what the ratio is judged on
  // The checksums that were checked and matched ("SHA-256", "MD5", "CRC": makeself headers
  // carry them); empty when the archive carries none.
  std::vector<std::string> verified;
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
