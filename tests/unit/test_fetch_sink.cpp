// The sink writes on a worker thread and hashes what it wrote: the file and the digest
// must come out exactly as if the bytes had been written and hashed in order, whatever
// the block sizes, the starting offset and the I/O path.
#include "fetch/sink.hpp"
#include "helpers.hpp"
#include "util/sha256.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <random>

using namespace hpcbake::fetch;
using hpcbake::util::Sha256;

namespace {

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng());
  return s;
}

std::string hex_of(const std::string& s) {
  return hpcbake::util::sha256_of(s).value();
}

// Appends `data` in blocks of varying, odd sizes.
bool feed(Sink& sink, const std::string& data, unsigned seed) {
  std::mt19937 rng(seed);
  std::size_t off = 0;
  while (off < data.size()) {
    const std::size_t n = std::min<std::size_t>(data.size() - off, 1 + rng() % 150000);
    if (!sink.append(data.data() + off, n)) return false;
    off += n;
  }
  return true;
}

// A .part holding `prefix` in a fresh scratch directory, open for reading and writing.
struct Part {
  std::filesystem::path path;
  int fd = -1;
};
Part make_part(const std::string& scratch, const std::string& prefix = "") {
  Part p{test::scratch(scratch) / "a.part"};
  test::write(p.path, prefix);
  p.fd = ::open(p.path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(p.fd >= 0);
  return p;
}

// The file-size limit lowered for the scope (RLIMIT_FSIZE: a write past it fails with EFBIG, as
// under a quota; SIGXFSZ ignored so it is an error, not a kill), restored on leaving it.
struct FileSizeLimit {
  struct rlimit before {};
  void (*old_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lowered = before;
    lowered.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, old_handler);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
};

} // namespace

TEST_CASE("sink: bytes and digest match the input for every I/O path and offset") {
  const std::string data = random_bytes(3 * 1024 * 1024 + 777, 7);
  for (DirectIo mode : {DirectIo::try_it, DirectIo::never}) {
    for (std::size_t start : {std::size_t{0}, std::size_t{12345}, std::size_t{64 * 1024}}) {
      CAPTURE(static_cast<int>(mode));
      CAPTURE(start);
      const auto [path, fd] = make_part("sink", data.substr(0, start)); // a prefix left by an earlier run
      Sha256 prefix;
      prefix.update(data.data(), start);
      SinkOptions so;
      so.chunk_size = 64 * 1024;
      so.depth = 3;
      so.direct = mode;
      Sink sink(fd, path.string(), start, std::move(prefix), so);
      REQUIRE(feed(sink, data.substr(start), 11));
      CHECK(sink.appended() == data.size() - start);
      sink.close(Durability::fsync);
      sink.wait();
      CHECK(sink.done());
      CHECK(sink.error().empty());
      CHECK(sink.written() == data.size());
      CHECK(sink.take_digest().hex() == hex_of(data));
      if (mode == DirectIo::never) CHECK_FALSE(sink.used_direct_io());
      // Where this file system takes O_DIRECT, the direct path must really have been used:
      // otherwise this test would pass with direct I/O silently broken.
      const int probe = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
      if (mode == DirectIo::try_it && probe >= 0) CHECK(sink.used_direct_io());
      if (probe >= 0) ::close(probe);
      ::close(fd);
      CHECK(test::slurp(path) == data);
    }
  }
}

TEST_CASE("sink: a full disk stops the worker, says where, and keeps the digest of what was written") {
  // /dev/full fails every write with ENOSPC, as a full file system does.
  const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  SinkOptions so;
  so.chunk_size = 4096;
  so.depth = 2;
  so.direct = DirectIo::never;
  bool on_done_ran = false;
  Sink sink(fd, "/dev/full", 0, Sha256(), so, [&] { on_done_ran = true; });
  const std::string data = random_bytes(64 * 1024, 3);
  CHECK_FALSE(feed(sink, data, 5)); // refused once the worker has failed; never blocks forever
  sink.close(Durability::fsync);
  sink.wait();
  CHECK(on_done_ran);
  CHECK(sink.written() == 0);
  CHECK(sink.error().find("/dev/full: write failed: No space left on device") != std::string::npos);
  CHECK(sink.take_digest().hex() == hex_of(""));
  ::close(fd);
}

// The first chunk is being hashed when the second one's write fails (the file may not grow past
// one chunk: RLIMIT_FSIZE, EFBIG, as a quota does): the digest and written() stop after the first.
TEST_CASE("sink: a write failing after the first chunk leaves the digest at exactly the first") {
  const auto [path, fd] = make_part("sink-efbig");
  SinkOptions so;
  so.chunk_size = 64 * 1024;
  so.direct = DirectIo::never;
  const std::string data = random_bytes(4 * so.chunk_size, 11);
  std::string error;
  std::uint64_t written = 0;
  std::string digest;
  {
    const FileSizeLimit one_chunk(so.chunk_size);
    Sink sink(fd, path.string(), 0, Sha256(), so);
    feed(sink, data, 7);
    sink.close(Durability::none);
    sink.wait();
    error = sink.error();
    written = sink.written();
    digest = sink.take_digest().hex().value();
  }
  ::close(fd);
  CHECK(error.find("write failed: File too large") != std::string::npos);
  CHECK(written == so.chunk_size);
  CHECK(digest == hex_of(data.substr(0, so.chunk_size)));
  CHECK(test::slurp(path) == data.substr(0, so.chunk_size));
}

TEST_CASE("sink: an empty body, a sink dropped without close, and bad options") {
  const auto [path, fd] = make_part("sink-edge");
  {
    Sink sink(fd, path.string(), 0, Sha256(), SinkOptions{});
    sink.close(Durability::fsync);
    sink.wait();
    CHECK(sink.written() == 0);
    CHECK(sink.take_digest().hex() == hex_of(""));
  }
  {
    Sink sink(fd, path.string(), 0, Sha256(), SinkOptions{});
    CHECK(sink.append("abc", 3));
  } // the destructor writes what was appended and joins the worker
  CHECK(test::slurp(path) == "abc");
  SinkOptions bad;
  bad.chunk_size = 1000;
  CHECK_THROWS_AS(Sink(fd, path.string(), 0, Sha256(), bad), std::invalid_argument);
  ::close(fd);
}
