#pragma once
// One owned file descriptor: closed when the owner goes out of scope, whatever path it leaves
// by. Move-only, so exactly one owner closes it. -1 means "none".
#include <unistd.h>

#include <utility>

namespace hpcbake::util {

class Fd {
public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  explicit operator bool() const { return ok(); }
  // Gives the descriptor up without closing it: the caller owns it now.
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }
  // Closes the held descriptor (errors ignored: use close() where they matter) and holds `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // Closes now and reports ::close's result (0, or -1 with errno set): for writes whose
  // failure shows only at close (NFS, quotas). Holds nothing afterwards, whatever the result.
  int close() {
    const int fd = release();
    return fd >= 0 ? ::close(fd) : 0;
  }

private:
  int fd_ = -1;
};

} // namespace hpcbake::util
