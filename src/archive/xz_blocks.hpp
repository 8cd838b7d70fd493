#pragma once
// Two-thread decoding of a multi-block .xz file, in bounded memory.
//
// `xz -T` (and every xz >= 5.4 compressing with threads) writes independent blocks and records
// each block's offset and sizes in the index at the end of the stream. Two worker threads decode
// alternate blocks (0, 2, 4 ... and 1, 3, 5 ...) with liblzma's block decoder, each into its
// own queue of six 1 MiB chunks; the reader takes chunks in block order. While the reader
// consumes one block, the other worker decodes the next, until its queue is full. Memory is
// bounded by 2 x (queue + the LZMA2 dictionary), 28 MiB for `xz -6`, whatever the size of
// the file; liblzma's own threaded decoder holds whole blocks in and out (about 90 MiB with two
// threads for `xz -6 -T0`).
//
// Each block's integrity check (CRC32/CRC64/SHA-256), its header's sizes and the index's sizes
// are verified, as a sequential decoder would. Files this does not fit (one block, several
// concatenated streams, stream padding, a dictionary over kMaxDictionary) are left to the
// caller's sequential decoder: `open` says why not.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <archive.h>

namespace hpcbake::archive {

class XzBlocks {
public:
  static constexpr std::size_t kChunk = 1 << 20;
  static constexpr std::size_t kQueueChunks = 6;            // per worker
  static constexpr std::uint64_t kMaxDictionary = 64 << 20; // per worker

  // Reads the stream header, footer and index of [begin, end) of `fd` (pread only: the file
  // offset is not used). nullptr with `why_not` set when the file is not a candidate; the
  // sequential decoder then reports any damage. The workers add the compressed bytes they
  // read to `consumed` (when given), for the caller's expansion ratio.
  static std::unique_ptr<XzBlocks> open(int fd, std::uint64_t begin, std::uint64_t end, const std::string& label,
                                        std::string& why_not, std::atomic<std::uint64_t>* consumed = nullptr);
  ~XzBlocks();
  XzBlocks(const XzBlocks&) = delete;
  XzBlocks& operator=(const XzBlocks&) = delete;

  // A libarchive read callback over the decoded bytes (archive_read_set_read_callback with
  // this object as callback data). A chunk stays valid until the next call.
  static la_ssize_t read(struct archive* a, void* data, const void** out);

  std::size_t blocks() const;

  struct Impl;

private:
  explicit XzBlocks(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace hpcbake::archive
