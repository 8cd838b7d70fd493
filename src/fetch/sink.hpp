#pragma once
// Where a transfer's bytes go: a worker thread writes them to the .part and hashes what
// it wrote, so the download loop only copies each received block into a buffer and moves
// on. Receiving, writing and hashing then overlap, and several transfers hash on several
// cores.
//
// Bytes are grouped into chunks whose file offsets are multiples of the chunk size. Full,
// aligned chunks are written with O_DIRECT where the file system allows it: the artifact is
// fsynced before it is published anyway, and direct I/O sends it to disk once instead of
// copying it through the page cache and flushing it afterwards. A chunk that cannot go
// direct (the first chunk of a resume at an odd offset, the last one, a file system without
// O_DIRECT) is written through the ordinary descriptor.
//
// A second thread hashes each chunk once it is written, while the worker writes the next one,
// so a transfer takes the longer of writing and hashing, not their sum: on a 16-core machine,
// writing then hashing held a 1 GiB fetch at twice the disk's time (docs/benchmarks.md).
//
// Invariant: the digest covers exactly the .part's first `written()` bytes: `written()` moves
// past a chunk once it is written and hashed, and a chunk is hashed only after its write
// succeeded. A write error (disk full) stops the worker; the file may then hold a torn chunk
// after `written()`, so the caller re-hashes the .part before resuming.
#include "util/fd.hpp"
#include "util/sha256.hpp"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hpcbake::fetch {

enum class DirectIo { try_it, never };
enum class Durability { fsync, none };

struct SinkOptions {
  std::size_t chunk_size = 1 << 20; // a multiple of 4096
  std::size_t depth = 4;            // buffers per transfer: one filling, the rest queued or being written
  DirectIo direct = DirectIo::try_it;
};

class Sink {
public:
  // `fd` is the .part, open for writing; `path` names it in errors and is reopened for
  // O_DIRECT. `digest` covers the file's first `offset` bytes; new bytes go after them.
  // `on_done` runs on the worker thread when it has finished after close().
  Sink(int fd, std::string path, std::uint64_t offset, util::Sha256 digest, SinkOptions options,
       std::function<void()> on_done = {});
  ~Sink(); // closes without syncing and waits for the worker
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  // Copies `len` bytes in. Waits while `depth` chunks are queued. False once the worker has
  // failed: error() says why.
  bool append(const char* data, std::size_t len);
  // No more bytes: the worker writes what is left, syncs the file when asked, then stops.
  void close(Durability durability);
  bool done() const;
  void wait();

  std::uint64_t appended() const { return appended_; } // bytes handed over, this sink
  // After done(): bytes on disk from offset 0 that the digest covers, the digest, the error.
  std::uint64_t written() const;
  util::Sha256 take_digest();
  std::string error() const;
  bool used_direct_io() const; // at least one chunk went out through O_DIRECT

private:
  struct Chunk {
    char* data = nullptr;
    std::size_t size = 0;
    std::uint64_t offset = 0;
  };
  void run();
  void run_hasher();
  bool write_chunk(const Chunk& c);
  bool hash_chunk(const Chunk& c); // false, with error_ set, when the digest fails
  void start_hash(const Chunk& c); // the hasher hashes `c` while this thread writes the next one
  bool wait_hash();
  void finish_chunk(const Chunk& c, bool ok);
  Chunk fresh_chunk(std::uint64_t offset);

  const int fd_;
  const std::string path_;
  const SinkOptions opt_;
  std::function<void()> on_done_;
  util::Fd direct_fd_; // the same file opened O_DIRECT, when asked and possible
  bool direct_ok_ = false;
  std::uint64_t direct_writes_ = 0; // worker thread; read after done or under mu_

  // Owned by the caller's thread.
  Chunk filling_;
  std::uint64_t next_offset_; // file offset of the next appended byte
  std::uint64_t appended_ = 0;

  // Shared with the worker.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  std::vector<char*> free_;
  std::vector<char*> all_;
  bool closing_ = false;
  Durability durability_ = Durability::none;
  bool done_ = false;
  bool failed_ = false;
  std::string error_;
  std::uint64_t written_;
  util::Sha256 digest_; // only the hasher touches it until done_

  // The worker hands the hasher one chunk at a time (hash_job_) and waits for its verdict.
  std::mutex hash_mu_;
  std::condition_variable hash_cv_;
  const Chunk* hash_job_ = nullptr;
  bool hash_ok_ = true;
  bool hash_stop_ = false;
  std::thread hasher_;
  std::thread worker_;
};

} // namespace hpcbake::fetch
