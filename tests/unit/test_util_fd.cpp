// util::Fd: one owner closes a descriptor exactly once, moves hand ownership over.
#include "util/fd.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>

#include <cerrno>

using hpcbake::util::Fd;

namespace {

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

} // namespace

TEST_CASE("util::Fd closes on scope exit, moves ownership and releases on request") {
  int raw = -1;
  {
    Fd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    REQUIRE(fd.ok());
    raw = fd.get();
    Fd moved(std::move(fd));
    CHECK_FALSE(fd.ok()); // NOLINT(bugprone-use-after-move): the moved-from state is the contract
    CHECK(moved.get() == raw);
    CHECK(is_open(raw));
  }
  CHECK_FALSE(is_open(raw));

  Fd kept(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int released = kept.release();
  CHECK_FALSE(kept.ok());
  CHECK(is_open(released));
  CHECK(::close(released) == 0);

  Fd closed(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  CHECK(closed.close() == 0);
  CHECK_FALSE(closed.ok());
  CHECK(Fd().close() == 0);
}
