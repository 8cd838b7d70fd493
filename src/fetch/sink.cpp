#include "fetch/sink.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace hpcbake::fetch {

namespace {
constexpr std::size_t kAlign = 4096; // O_DIRECT wants buffer, offset and length aligned to the block size

bool aligned(std::uint64_t v) {
  return v % kAlign == 0;
}
} // namespace

Sink::Sink(int fd, std::string path, std::uint64_t offset, util::Sha256 digest, SinkOptions options,
           std::function<void()> on_done)
    : fd_(fd), path_(std::move(path)), opt_(options), on_done_(std::move(on_done)), next_offset_(offset),
      written_(offset), digest_(std::move(digest)) {
  if (opt_.chunk_size == 0 || opt_.chunk_size % kAlign != 0 || opt_.depth < 2)
    throw std::invalid_argument("Sink: chunk_size must be a positive multiple of 4096 and depth at least 2");
  if (opt_.direct == DirectIo::try_it) {
    direct_fd_.reset(::open(path_.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
    direct_ok_ = direct_fd_.ok(); // EINVAL: this file system has no direct I/O
  }
  filling_ = fresh_chunk(next_offset_);
  hasher_ = std::thread([this] { run_hasher(); });
  try {
    worker_ = std::thread([this] { run(); });
  } catch (...) {
    {
      std::lock_guard lock(hash_mu_);
      hash_stop_ = true;
    }
    hash_cv_.notify_all();
    hasher_.join();
    throw;
  }
}

Sink::~Sink() {
  close(Durability::none);
  wait();
  for (char* p : all_)
    std::free(p);
}

Sink::Chunk Sink::fresh_chunk(std::uint64_t offset) {
  std::unique_lock lock(mu_);
  if (free_.empty() && all_.size() < opt_.depth) {
    void* p = std::aligned_alloc(kAlign, opt_.chunk_size);
    if (!p) throw std::bad_alloc();
    all_.push_back(static_cast<char*>(p));
    free_.push_back(static_cast<char*>(p));
  }
  cv_.wait(lock, [&] { return !free_.empty() || failed_; });
  if (free_.empty()) return {};
  Chunk c;
  c.data = free_.back();
  free_.pop_back();
  c.offset = offset;
  return c;
}

bool Sink::append(const char* data, std::size_t len) {
  while (len > 0) {
    if (!filling_.data) {
      filling_ = fresh_chunk(next_offset_);
      if (!filling_.data) return false;
    }
    // A chunk ends at the next multiple of chunk_size, so later chunks start aligned.
    const std::size_t room =
        opt_.chunk_size - static_cast<std::size_t>((filling_.offset % opt_.chunk_size)) - filling_.size;
    const std::size_t n = std::min(room, len);
    std::memcpy(filling_.data + filling_.size, data, n);
    filling_.size += n;
    data += n;
    len -= n;
    next_offset_ += n;
    appended_ += n;
    if (n == room) {
      {
        std::lock_guard lock(mu_);
        if (failed_) return false;
        queue_.push_back(filling_);
      }
      cv_.notify_all();
      filling_ = {};
    }
  }
  std::lock_guard lock(mu_);
  return !failed_;
}

void Sink::close(Durability durability) {
  {
    std::lock_guard lock(mu_);
    if (closing_) return;
    if (filling_.data && filling_.size > 0) {
      queue_.push_back(filling_);
      filling_ = {};
    }
    closing_ = true;
    durability_ = durability;
  }
  cv_.notify_all();
}

bool Sink::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

void Sink::wait() {
  if (worker_.joinable()) worker_.join();
  if (hasher_.joinable()) hasher_.join(); // run() stopped it before finishing
}

std::uint64_t Sink::written() const {
  std::lock_guard lock(mu_);
  return written_;
}

util::Sha256 Sink::take_digest() {
  std::lock_guard lock(mu_);
  return std::move(digest_);
}

std::string Sink::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

bool Sink::used_direct_io() const {
  std::lock_guard lock(mu_);
  return direct_writes_ > 0;
}

bool Sink::hash_chunk(const Chunk& c) {
  if (auto s = digest_.update(c.data, c.size); !s) {
    std::lock_guard lock(mu_);
    error_ = fmt::format("{}: {}", path_, s.error().message);
    return false;
  }
  return true;
}

bool Sink::write_chunk(const Chunk& c) {
  const bool direct =
      direct_ok_ && aligned(c.offset) && aligned(c.size) && reinterpret_cast<std::uintptr_t>(c.data) % kAlign == 0;
  std::size_t off = 0;
  while (off < c.size) {
    const int fd = direct ? direct_fd_.get() : fd_;
    const ssize_t w = ::pwrite(fd, c.data + off, c.size - off, static_cast<off_t>(c.offset + off));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && direct && errno == EINVAL && off == 0) {
      // The file system accepted O_DIRECT at open but not this write: go buffered from now on.
      std::lock_guard lock(mu_);
      direct_ok_ = false;
      return write_chunk(c);
    }
    if (w < 0) {
      std::lock_guard lock(mu_);
      error_ = fmt::format("{}: write failed: {}", path_, std::strerror(errno));
      return false;
    }
    off += static_cast<std::size_t>(w);
  }
  if (direct) {
    std::lock_guard lock(mu_);
    ++direct_writes_;
  }
  return true;
}

void Sink::run_hasher() {
  std::unique_lock lock(hash_mu_);
  while (true) {
    hash_cv_.wait(lock, [&] { return hash_job_ != nullptr || hash_stop_; });
    if (!hash_job_) return;
    const Chunk* job = hash_job_;
    lock.unlock();
    const bool ok = hash_chunk(*job);
    lock.lock();
    hash_ok_ = ok;
    hash_job_ = nullptr;
    hash_cv_.notify_all();
  }
}

void Sink::start_hash(const Chunk& c) {
  {
    std::lock_guard lock(hash_mu_);
    hash_job_ = &c;
  }
  hash_cv_.notify_all();
}

bool Sink::wait_hash() {
  std::unique_lock lock(hash_mu_);
  hash_cv_.wait(lock, [&] { return hash_job_ == nullptr; });
  return hash_ok_;
}

// A chunk is done with: its buffer goes back, and written_ moves past it when it was both written
// and hashed; otherwise the worker has failed and drops what is queued.
void Sink::finish_chunk(const Chunk& c, bool ok) {
  {
    std::lock_guard lock(mu_);
    free_.push_back(c.data);
    if (ok)
      written_ += c.size;
    else {
      failed_ = true;
      for (const auto& q : queue_)
        free_.push_back(q.data);
      queue_.clear();
    }
  }
  cv_.notify_all();
}

// Chunk N is hashed while chunk N+1 is written; a chunk is hashed only once its write succeeded,
// so a failed write leaves the digest at the bytes before it.
void Sink::run() {
  Chunk hashing; // written, being hashed (data null: none)
  while (true) {
    Chunk c;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty()) break; // closing, and everything is written
      c = queue_.front();
      queue_.pop_front();
    }
    const bool wrote = write_chunk(c);
    if (hashing.data) {
      const bool hashed = wait_hash();
      finish_chunk(hashing, hashed);
      hashing = {};
      if (!hashed) {
        finish_chunk(c, false);
        break;
      }
    }
    if (!wrote) {
      finish_chunk(c, false);
      break;
    }
    hashing = c;
    start_hash(hashing);
  }
  if (hashing.data) finish_chunk(hashing, wait_hash());
  {
    std::lock_guard lock(hash_mu_);
    hash_stop_ = true;
  }
  hash_cv_.notify_all();
  bool sync = false;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return closing_; }); // a failed worker still waits for close()
    sync = !failed_ && durability_ == Durability::fsync;
  }
  if (sync && ::fsync(fd_) != 0) {
    std::lock_guard lock(mu_);
    failed_ = true;
    error_ = fmt::format("{}: fsync failed: {}", path_, std::strerror(errno));
  }
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (on_done_) on_done_();
}

} // namespace hpcbake::fetch
