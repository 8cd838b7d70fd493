#pragma once
// NVIDIA's `.run` installers and other makeself archives, read natively: a shell script
// header, then one or more compressed tar payloads. The header is parsed as text, never
// executed. Both header styles are understood:
// - makeself 2.4: `skip="NNN"` and `offset=\`head -n "$skip" "$0" | wc -c\``;
// - makeself 2.1 (what older NVIDIA installers use): the line count written literally,
//   `offset=\`head -n NNN "$0" | wc -c\``, or a bare `skip=NNN`.
// The first payload starts after the header's first NNN lines; `filesizes` lists the
// payloads' sizes, which follow one another to the end of the file.
#include "archive/extract.hpp"
#include "util/error.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hpcbake::archive {

struct MakeselfInfo {
  std::string label;              // the archive's description (`label=`)
  std::uint64_t header_lines = 0; // NNN: the payload starts after this many lines
  std::uint64_t payload_offset = 0;
  std::vector<std::uint64_t> filesizes; // one per payload, in order
  std::string compression; // as declared (gzip, xz, zstd, bzip2, none, ...); empty if the header does not say
  // Checksums as the header carries them, one per payload separated by spaces; empty when
  // absent (makeself writes zeros for "not computed").
  std::string crc;              // POSIX cksum CRC (`CRCsum=`)
  std::string md5;              // `MD5=`
  std::string sha256;           // `SHA=`
  std::string script;           // the startup script the archive would run, with its arguments
  std::string target_dir;       // `targetdir=`
  std::string makeself_version; // from "generated using Makeself X.Y.Z"
};

// Whether `path` is to be read as a makeself archive: it starts with "#!", so it is a
// script and not a tar (whose first member's name could start so: "ustar" at byte 257), zip
// or compressed stream. A damaged makeself header is then reported as such, by field and
// line, instead of as an archive in no format libarchive knows.
bool looks_like_makeself(const std::filesystem::path& path);

// Parses the header of `run_file`. Fails when it is not a makeself archive, declares an
// encrypted or unsupported payload, or its declared sizes do not match the file. A field that
// does not read (skip=, filesizes=, totalsize=, CRCsum=, MD5=, SHA=) is named with its
// file:line:column and byte offset.
Result<MakeselfInfo> read_makeself_header(const std::filesystem::path& run_file);

// Extracts the payloads into `dest`, all or nothing, verifying each checksum the header
// carries (SHA-256, MD5, CRC) while the payload streams through the extractor, so the file
// is read once. A mismatch is refused naming the checksum, the expected and the actual
// value, and nothing is left at dest. ExtractStats::verified names the checksums checked:
// none when the header carries none (makeself --nomd5 --nocrc writes zeros).
Result<ExtractStats> extract_makeself(const std::filesystem::path& run_file, const std::filesystem::path& dest,
                                      const ExtractOptions& options);

// POSIX `cksum` CRC of `data` (what makeself's CRCsum holds), for tests and tools.
std::uint32_t posix_cksum(const void* data, std::size_t size);

} // namespace hpcbake::archive
